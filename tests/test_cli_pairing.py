"""`hermit pairing list|approve` against a temp state dir, and the doctor's access checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermit.channels.access import AccessControl, PairingStore
from hermit.cli.main import main
from hermit.config.schema import ChannelsConfig


def issue(home: Path, *senders: str) -> PairingStore:
    store = PairingStore(home)
    ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"bot": {}}}}), store)
    for s in senders:
        assert ac.check("telegram", "bot", "dm", s, s, sender_name=f"User {s}").reply is not None
    return store


def test_list_and_approve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = issue(tmp_path, "100", "200")
    assert main(["--home", str(tmp_path), "pairing", "list"]) == 0
    out = capsys.readouterr().out
    codes = [r.code for r in store.pending()]
    assert "CHANNEL" in out and all(c in out for c in codes) and "100 (User 100)" in out
    assert "59 min" in out or "60 min" in out

    assert main(["--home", str(tmp_path), "pairing", "list", "slack", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["--home", str(tmp_path), "pairing", "list", "telegram", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["sender_id"] for r in listed] == ["100", "200"]

    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", codes[0].lower()]) == 0
    assert "approved 100 (User 100) on telegram/bot" in capsys.readouterr().out
    assert store.approved_senders("telegram", "bot") == {"100"}
    assert [r.sender_id for r in store.pending()] == ["200"]


def test_listing_a_fresh_state_dir_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path / "fresh"), "pairing", "list"]) == 0
    assert "no pending pairing requests" in capsys.readouterr().out
    assert not (tmp_path / "fresh").exists()


def test_approve_unknown_code_fails_with_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, "100")
    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", "ZZZZZZZZ"]) == 1
    err = capsys.readouterr().err
    assert "no pending pairing request with code ZZZZZZZZ on telegram" in err
    assert "hint: check `hermit pairing list telegram`" in err


def doctor(home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, text=True,
                          capture_output=True, timeout=300)


def by_name(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in json.loads(r.stdout)}


def test_doctor_reports_bad_bindings_and_loose_credentials(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n  list: [{id: main}, {id: work}]\n"
        "bindings:\n  - {match: {channel: slak}, agent_id: work}\n  - {match: {channel: slack}, agent_id: wrk}\n"
        "channels:\n  telegram:\n    accounts:\n      bot: {dm_policy: allowlist, allow_from: ['42']}\n"
        "  discord:\n    accounts:\n      pub: {dm_policy: open, allow_from: ['*']}\n")
    issue(tmp_path, "100")  # creates credentials/
    (tmp_path / "credentials").chmod(0o755)
    checks = by_name(doctor(tmp_path))
    assert checks["bindings"]["ok"] is False
    assert "unknown channel 'slak'" in str(checks["bindings"]["detail"])
    assert "unknown agent 'wrk' (did you mean 'work'?)" in str(checks["bindings"]["detail"])
    assert checks["access"]["status"] == "warn" and "telegram/bot: DMs allowlist" in str(checks["access"]["detail"])
    assert "open to anyone: discord/pub" in str(checks["access"]["detail"])
    assert checks["credentials"]["ok"] is False and "should be 700" in str(checks["credentials"]["detail"])
    assert "chmod 700" in str(checks["credentials"]["fix"])


def test_doctor_reports_star_outside_open_as_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "channels:\n  telegram:\n    accounts:\n      bot: {dm_policy: pairing, allow_from: ['*']}\n")
    r = doctor(tmp_path)
    assert r.returncode == 1
    checks = by_name(r)
    assert checks["config"]["ok"] is False
    detail = str(checks["config"]["detail"])
    assert "channels.telegram.accounts.bot" in detail and "only accepted with dm_policy: open" in detail
    assert "hermit.yaml:4" in detail  # the line of the offending account
    assert checks["credentials"]["ok"] is True
    assert checks["bindings"]["status"] == "skip" and checks["access"]["status"] == "skip"
