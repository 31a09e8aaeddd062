"""`hermit doctor` after the gateway's Telegram channel stopped on a token Telegram does not know (the first-day
walk): the doctor said "[ok] channels telegram/default: secrets from the environment" while the channel was dead,
its log saying only "telegram default stopped: Telegram getMe failed: 401 Unauthorized". The doctor now reads what
the gateway last said of each configured account that is not connected: a running gateway's error fails with the
fix (the setup command that stores and checks the right token, then a restart); the last run's warns, until
hermit.yaml or hermit.env changes.

A real gateway process, its real status files, and the fake Telegram Bot API on 127.0.0.1."""

from __future__ import annotations

import signal
from pathlib import Path

import test_setup as setup_cli  # its hermit and env_for (a module attribute: its tests are not collected here)
from prochelpers import PROC_TIMEOUT
from test_firstday2_channel_hints import run_gateway, wait_for_error
from test_firstday_telegram import TOKEN, telegram

FIX = ("fix: the token is wrong or revoked: store the right one with `hermit setup --channel telegram --account "
       "default --token-stdin` (it checks it before saving)")


def test_a_token_telegram_refused_is_named_by_the_doctor_with_its_fix_until_the_token_changes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "setup", "--provider", "fake", "--no-check").returncode == 0  # the gateway needs one
    with telegram() as fake:
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--api-base", fake.base_url, "--token-stdin",
                             "--owner", "42", stdin=TOKEN + "\n")
        assert r.returncode == 0, r.stderr
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--token-stdin", "--no-check",
                             stdin="123456789:AAHrevoked\n")  # saved unchecked, as before setup checked tokens
        assert r.returncode == 0, r.stderr
        status = home / "channels" / "status" / "telegram.default.json"
        gateway = run_gateway(home)
        try:
            wait_for_error(gateway, status, "401")
            doc = setup_cli.hermit(home, "doctor")
            assert doc.returncode == 1, doc.stdout
            assert ("[FAIL] channels         not connected: telegram/default: Telegram getMe failed: 401 Unauthorized"
                    in doc.stdout), doc.stdout
            assert f"{FIX}, then restart the gateway" in doc.stdout
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.communicate(timeout=PROC_TIMEOUT)
        doc = setup_cli.hermit(home, "doctor")  # stopped: what its last run said, and how to go on
        assert "[warn] channels         when the gateway last ran: telegram/default: Telegram getMe failed: 401" \
            in doc.stdout, doc.stdout
        assert f"{FIX}, then `hermit gateway run`" in doc.stdout
        r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--token-stdin", stdin=TOKEN + "\n")
        assert r.returncode == 0 and "ok: it is the token of the bot @hermit_bot" in r.stdout, r.stdout + r.stderr
    doc = setup_cli.hermit(home, "doctor")
    assert "[ok  ] channels         telegram/default: secrets from the environment; no error reported by the gateway" in doc.stdout, doc.stdout
