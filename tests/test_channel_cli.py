"""`hermit channels list|status` and the doctor's channel check, run through the real CLI entry point."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hermit.channels.base import ChannelDeps
from hermit.channels.status import StatusTracker
from hermit.cli.main import main
from hermit.config import StatePaths, load_config
from hermit.gateway.channels import build_channels

CONFIG = """\
channels:
  telegram:
    accounts:
      personal:
        token_env: TG_PERSONAL
  slack:
    accounts:
      work:
        mode: http
        bot_token: xoxb-plaintext-secret
        signing_secret_env: WORK_SIGNING
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "hermit.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def test_list_shows_accounts_and_where_secrets_come_from_never_their_values(
        home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_PERSONAL", "123:SECRET-VALUE")
    monkeypatch.delenv("WORK_SIGNING", raising=False)
    assert main(["--home", str(home), "channels", "list", "--json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out)
    assert [(r["channel"], r["account"]) for r in rows] == [("telegram", "personal"), ("slack", "work")]
    assert rows[0]["secrets"] == ["token: $TG_PERSONAL (set)"]
    assert rows[1]["secrets"] == ["bot_token: in the config (plaintext)", "signing_secret: $WORK_SIGNING (NOT SET)"]
    assert rows[1]["webhook"] == "/hooks/slack/work/"
    assert "SECRET-VALUE" not in out and "xoxb-plaintext-secret" not in out


def test_doctor_warns_about_plaintext_and_missing_secrets(
        home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_PERSONAL", "123:x")
    monkeypatch.delenv("WORK_SIGNING", raising=False)
    main(["--home", str(home), "doctor", "--json"])
    [c] = [c for c in json.loads(capsys.readouterr().out) if c["name"] == "channels"]
    assert c["status"] == "warn" and c["ok"]
    assert "channels.slack.accounts.work.bot_token is plaintext" in c["detail"]
    assert "$WORK_SIGNING is not set" in c["detail"] and "TG_PERSONAL" not in c["detail"]
    assert "xoxb-plaintext-secret" not in c["detail"] + c["fix"]


def test_status_reads_what_running_channels_wrote(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = StatusTracker("telegram", "personal", home, clock=lambda: 1000.0)
    t.connected(True)
    t.inbound()
    t.outbound()
    s = StatusTracker("slack", "work", home)
    s.error("Slack chat.postMessage failed: invalid_auth")
    assert main(["--home", str(home), "channels", "status", "--json"]) == 0
    rows = {r["channel"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["telegram"]["connected"] and rows["telegram"]["messages_in"] == 1
    assert rows["telegram"]["running"] and rows["telegram"]["pid"] == os.getpid()
    assert rows["slack"]["last_error"] == "Slack chat.postMessage failed: invalid_auth"
    assert main(["--home", str(home), "channels", "status"]) == 0
    text = capsys.readouterr().out
    assert "telegram/personal: connected; in 1, out 1" in text and "last error: Slack chat.postMessage" in text


def test_the_gateway_builds_every_configured_account_with_secrets_by_name(home: Path) -> None:
    loaded = load_config(StatePaths(home))
    env = {"TG_PERSONAL": "123:x", "SLACK_BOT_TOKEN": "xoxb-1", "WORK_SIGNING": "s"}
    built = build_channels(loaded, ChannelDeps(home, env, time.time))
    assert [(c.name, c.account_id, c.capabilities.max_chars) for c in built] == \
        [("telegram", "personal", 4000), ("slack", "work", 4000)]
    # Without their secrets they stand down, each alone (the gateway starts without them: gateway/unstarted.py).
    down = build_channels(loaded, ChannelDeps(home, {}, time.time))
    assert [(type(c).__name__, c.name, c.account_id) for c in down] == \
        [("UnstartedChannel", "telegram", "personal"), ("UnstartedChannel", "slack", "work")]
    assert "TG_PERSONAL" in down[0].message  # type: ignore[attr-defined]
