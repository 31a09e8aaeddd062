"""Re-audit s21 (t12): `hermit doctor` shows an owner move the gateway refuses (gateway/owner_routes.py) — the
account, the id, from which agent to which and the fix — and a record that cannot be trusted; before, only a
refused start or the gateway's log said so."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hermit.cli.main import main
from hermit.gateway import owner_routes
from test_audit21_reaudit_config_routes import config, home_fixture, save, started  # noqa: F401 (home_fixture: `home`)


def doctor(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["--home", str(home), "doctor", "--json"])
    checks: dict[str, Any] = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    return checks


def test_doctor_names_a_refused_owner_move_and_the_fix(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started(home, config(home))
    assert doctor(home, capsys)["owner routes"]["status"] == "ok"
    save(home, config(home, family=False))  # family and its binding taken out while the gateway is stopped
    os.chmod(home / "hermit.yaml", 0o600)
    c = doctor(home, capsys)["owner routes"]
    assert c["status"] == "fail", c
    assert "telegram/family/3003 (agent family -> agent main)" in c["detail"]
    assert "enabled: false" in c["fix"] and str(owner_routes.path_of(home)) in c["fix"]


def test_doctor_reports_a_damaged_record(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started(home, config(home))
    owner_routes.path_of(home).write_text('{"telegram/family/3003": "fam')  # a kill -9 mid-write elsewhere
    c = doctor(home, capsys)["owner routes"]
    assert c["status"] == "fail" and "not valid JSON" in c["detail"] and "remove" in c["fix"], c


def test_doctor_before_any_gateway_start(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(home, config(home))
    os.chmod(home / "hermit.yaml", 0o600)
    c = doctor(home, capsys)["owner routes"]
    assert c["status"] == "ok" and "no record yet" in c["detail"], c
