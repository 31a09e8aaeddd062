"""One chat account without its token (its variable gone from hermit.env) made `hermit gateway run` refuse to start
at all: `error: channels.telegram.accounts.family: no token: environment variable … is not set` — the web app and
every other channel down with it. Now the gateway starts without that account alone (it fails closed: nothing
reaches anyone through it), says so in its log, and `hermit gateway status`, `hermit channels status` and
`hermit doctor` name the account, the variable and the command that stores it. A restart (SIGUSR1, the path a
config change that needs one takes) starts the same way.

A real `hermit gateway run` with a working account against the fake Telegram Bot API on 127.0.0.1."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import test_setup as setup_cli  # its hermit and env_for (a module attribute: its tests are not collected here)
from gatewayhelpers import GatewayProcess, write_config
from prochelpers import PROC_TIMEOUT
from test_firstday_telegram import TOKEN, telegram

MISSING = "TELEGRAM_BOT_TOKEN_FAMILY"
FIX = "hermit setup --channel telegram --account family --token-stdin"


def _wait(what: str, ready: object, gw: GatewayProcess) -> None:
    deadline = time.monotonic() + PROC_TIMEOUT
    while time.monotonic() < deadline:
        if callable(ready) and ready():
            return
        assert gw.proc.poll() is None, f"the gateway exited ({gw.proc.returncode}) waiting for {what}: {gw.stderr()}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}: {gw.stderr()}")


def test_the_gateway_starts_without_an_account_whose_token_is_missing_and_names_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with telegram() as fake:
        write_config(home, "http://127.0.0.1:9/v1", extra=(
            "channels:\n  telegram:\n    accounts:\n"
            f"      default: {{token_env: TELEGRAM_BOT_TOKEN, api_base: \"{fake.base_url}\"}}\n"
            f"      family: {{token_env: {MISSING}, api_base: \"{fake.base_url}\"}}\n"))
        (home / "hermit.env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\n", encoding="utf-8")
        (home / "hermit.env").chmod(0o600)
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()  # before: it exited 1, "no token: environment variable TELEGRAM_BOT_TOKEN_FAMILY …"
            _wait("the working account's poll", lambda: bool(fake.done("getUpdates")), gw)
            log = gw.stderr() + _gateway_log(home)
            assert "telegram/family not started" in log and MISSING in log and FIX in log, log

            status = setup_cli.hermit(home, "gateway", "status")
            assert status.returncode == 0, status.stdout + status.stderr
            [line] = [ln for ln in status.stdout.splitlines() if "telegram/family" in ln]
            assert "disconnected" in line and MISSING in line and FIX in line, status.stdout
            [ok] = [ln for ln in status.stdout.splitlines() if "telegram/default" in ln]
            assert "connected" in ok and "disconnected" not in ok, status.stdout

            chs = setup_cli.hermit(home, "channels", "status")
            assert "telegram/family: NOT connected" in chs.stdout and MISSING in chs.stdout and FIX in chs.stdout, \
                chs.stdout

            doc = setup_cli.hermit(home, "doctor", TELEGRAM_BOT_TOKEN=TOKEN)
            assert f"channels.telegram.accounts.family: ${MISSING} is not set" in doc.stdout, doc.stdout
            assert "hermit setup --channel telegram --account family --token-stdin" in doc.stdout, doc.stdout

            # A restart (a config change that needs one) starts the same way: without the account, not refusing.
            gw.proc.send_signal(signal.SIGUSR1)
            gw.wait_ready()
            assert gw.proc.poll() is None, gw.stderr()
        finally:
            gw.stop()


def _gateway_log(home: Path) -> str:
    p = home / "logs" / "gateway.log"
    return p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""
