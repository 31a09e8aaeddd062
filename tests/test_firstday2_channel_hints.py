"""A bot token Telegram refuses stops the channel, and the error carries its hint ("the bot token is wrong or revoked:
get a new one from @BotFather"), but the gateway's log line and `hermit channels status` kept only the message
("Telegram getMe failed: 401 Unauthorized"): the user learnt that it failed, not what to do. Both now keep the hint;
so does Slack's refused token ("check the app's tokens and scopes").

A real gateway process, its real status file and log, `hermit channels status`, the fake Telegram and Slack APIs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

import test_setup as setup_cli  # its hermit and env_for (a module attribute: its tests are not collected here)
from fakes.fake_slack import FakeSlack
from prochelpers import PROC_TIMEOUT
from test_firstday_telegram import served, telegram

HINT = "the bot token is wrong or revoked: get a new one from @BotFather"


def wait_for_error(gateway: subprocess.Popen[str], status: Path, word: str) -> None:
    """Until the gateway's status file for the account names `word` in its last error (or the gateway ended)."""
    deadline = time.monotonic() + PROC_TIMEOUT
    while not (status.exists() and word in json.loads(status.read_text() or "{}").get("last_error", "")):
        ended = gateway.poll() is not None
        assert not ended and time.monotonic() < deadline, \
            f"the channel never reported {word}: {gateway.stderr.read() if ended and gateway.stderr else ''}"
        time.sleep(0.05)


def run_gateway(home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "gateway", "run", "--port", "0"],
                            env=setup_cli.env_for(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_refused_token_keeps_its_hint_in_the_log_and_in_channels_status(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "setup", "--provider", "fake", "--no-check").returncode == 0
    with telegram() as fake:
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--api-base", fake.base_url, "--token-stdin",
                             "--owner", "42", "--no-check", stdin="123456789:AAHrevoked\n")
        assert r.returncode == 0, r.stderr
        status = home / "channels" / "status" / "telegram.default.json"
        gateway = run_gateway(home)
        try:
            wait_for_error(gateway, status, "401")
            st = setup_cli.hermit(home, "channels", "status")
            assert st.returncode == 0, st.stderr
            assert f"    last error: Telegram getMe failed: 401 Unauthorized — {HINT}" in st.stdout, st.stdout
        finally:
            gateway.send_signal(signal.SIGTERM)
            _, err = gateway.communicate(timeout=PROC_TIMEOUT)
        assert fake.done("getMe") == []  # the token was refused: no getMe succeeded
    log = (home / "logs" / "gateway.log").read_text()
    line = next(x for x in (log + err).splitlines() if "telegram default stopped" in x)
    assert f"Telegram getMe failed: 401 Unauthorized — {HINT}" in line, line
    assert "AAHrevoked" not in log + err + st.stdout


def test_a_refused_slack_token_keeps_its_hint_in_channels_status(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "setup", "--provider", "fake", "--no-check").returncode == 0
    with served(FakeSlack()) as fake:
        r = setup_cli.hermit(home, "setup", "--channel", "slack", "--token-stdin", "--secret", "app_token=xapp-test",
                             "--owner", "U1", "--no-check", stdin="xoxb-revoked\n")
        assert r.returncode == 0, r.stderr
        cfg = yaml.safe_load((home / "hermit.yaml").read_text())
        cfg["channels"]["slack"]["accounts"]["default"]["base_url"] = fake.base_url + "/api"
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
        gateway = run_gateway(home)
        try:
            wait_for_error(gateway, home / "channels" / "status" / "slack.default.json", "invalid_auth")
            st = setup_cli.hermit(home, "channels", "status")
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.communicate(timeout=PROC_TIMEOUT)
    assert st.returncode == 0, st.stderr
    assert ("    last error: Slack auth.test failed: invalid_auth — check the app's tokens and scopes" in st.stdout), \
        st.stdout
    assert "xoxb-revoked" not in st.stdout
