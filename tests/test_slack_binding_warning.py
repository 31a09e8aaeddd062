"""A Slack `peer` binding without `account_id` or `team_id` matches the id in every workspace the Slack accounts
are in (a Slack id names someone only within one): `hermit doctor` names it and says how to fix it, and the
gateway logs it when it starts. Real config files, the real `hermit doctor` in a subprocess."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from hermit.channels.slack_migrate import gateway_service
from hermit.cli.context import CliContext
from hermit.cli.doctor_slack import slack_bindings_check
from hermit.config.load import LoadedConfig, load_config
from hermit.config.paths import StatePaths


def doctor_ctx(home: Path) -> CliContext:
    return CliContext(home=home, environ={})


def write_config(home: Path, accounts: dict[str, dict[str, Any]], bindings: list[dict[str, Any]]) -> None:
    cfg = {"agents": {"defaults": {"memory_search": {"provider": "none"}}, "list": [{"id": "main"}, {"id": "ops"}]},
           "channels": {"slack": {"accounts": accounts}}, "bindings": bindings}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")


def peer(kind: str, pid: str, **more: str) -> dict[str, Any]:
    return {"agent_id": "ops", "match": {"channel": "slack", "peer": {"kind": kind, "id": pid}, **more}}


TWO: dict[str, dict[str, Any]] = {"work": {}, "club": {}}


def test_doctor_names_each_peer_binding_without_account_or_team_and_says_how_to_fix_it(tmp_path: Path) -> None:
    write_config(tmp_path, TWO, [peer("dm", "U0BOSS1"), peer("group", "C0OPS1", account_id="*"),
                                 peer("dm", "U0SCOPED", account_id="work"), peer("group", "C0T", team_id="T0AAAA1"),
                                 {"agent_id": "ops", "match": {"channel": "slack", "account_id": "club"}},
                                 peer("dm", "U0EXT1@T0CCCC3"), peer("dm", "W0GRID1")])
    check = slack_bindings_check(doctor_ctx(tmp_path))
    assert check.status == "warn", check
    assert "bindings[0] (slack dm U0BOSS1 -> agent ops) names no account_id or team_id" in check.detail
    assert "bindings[1] (slack group C0OPS1 -> agent ops)" in check.detail
    assert not any(f"bindings[{i}]" in check.detail for i in range(2, 7)), check.detail
    assert "every one of their workspaces" in check.detail and "club, work" in check.detail
    assert "account_id" in check.fix and "team_id" in check.fix

    # The real command: the warning is there, and a warning alone does not fail `hermit doctor`'s exit code.
    out = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "doctor", "--json"],
                         capture_output=True, text=True, timeout=120)
    [line] = [c for c in json.loads(out.stdout) if c["name"] == "slack bindings"]
    assert line["status"] == "warn" and "bindings[0]" in line["detail"] and line["ok"] is True


def test_scoped_bindings_and_a_single_account_get_no_warning(tmp_path: Path) -> None:
    write_config(tmp_path, TWO, [peer("dm", "U0BOSS1", account_id="work"), peer("group", "C0T", team_id="T0AAAA1")])
    check = slack_bindings_check(doctor_ctx(tmp_path))
    assert check.status == "ok" and "every Slack peer binding names its account or workspace" in check.detail

    write_config(tmp_path, {"work": {}}, [peer("dm", "U0BOSS1")])
    check = slack_bindings_check(doctor_ctx(tmp_path))
    assert check.status == "ok" and "exact with one Slack account" in check.detail, check
    assert "add account_id before adding a second" in check.detail


class _Host:
    def __init__(self) -> None:
        self.channels: Mapping[tuple[str, str], object] = {}


class _Ctx:
    def __init__(self, loaded: LoadedConfig, home: Path) -> None:
        self.host = _Host()
        self.loaded = loaded
        self.state_dir = home
        self.config = None


def test_the_gateway_logs_the_warning_when_it_starts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_config(tmp_path, TWO, [peer("dm", "U0BOSS1")])
    loaded = load_config(StatePaths(tmp_path))
    with caplog.at_level(logging.WARNING, logger="hermit.channels.slack_migrate"):
        gateway_service(_Ctx(loaded, tmp_path))
    [msg] = [r.getMessage() for r in caplog.records if "bindings[0]" in r.getMessage()]
    assert "names no account_id or team_id" in msg and "add account_id or team_id" in msg
