"""A config's life, `hermit setup` run again (audit s21 t3): the owner re-runs setup on a terminal for an account
that exists — to put in a new bot token — and presses Enter at every question, as the first line of setup says
Enter keeps what the brackets show. The account's DM policy must stay as it was: `disabled` (DMs off) or
`allowlist` (strangers learn nothing, SPEC §14.12) used to become `pairing` — every stranger's DM answered with a
pairing code naming the bot as Hermit — because the question's default was its first option, not the account's.

A real `hermit setup` on a pseudo-terminal (test_setup.Terminal) against the fake Telegram Bot API on 127.0.0.1
(the token check), with a real state dir."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import test_setup as setup_cli
from conftest import write
from test_firstday_telegram import TOKEN, telegram


@pytest.mark.parametrize("policy", ["disabled", "allowlist", "open"])
def test_rerunning_setup_with_enter_keeps_the_accounts_dm_policy(tmp_path: Path, policy: str) -> None:
    home = tmp_path / "home"
    with telegram() as tg:
        write(home / "hermit.yaml", yaml.safe_dump({"channels": {"telegram": {"accounts": {"default": {
            "token_env": "TELEGRAM_BOT_TOKEN", "api_base": tg.base_url, "owners": ["4242"], "dm_policy": policy,
            "allow_from": ["5151"]}}}}}))
        (home / "hermit.yaml").chmod(0o600)
        term = setup_cli.Terminal(["setup", "--channel", "telegram", "--account", "default", "--no-check"],
                                  setup_cli.env_for(home))
        try:
            seen = term.expect("choice [")  # the model question: left as it is (its last option)
            [keep] = re.findall(r"(\d+)\) no model for now", seen)
            term.send(keep)
            term.expect("telegram token, stored as TELEGRAM_BOT_TOKEN")
            term.send(TOKEN)  # the new bot's token
            term.expect("Your own sender id on telegram")
            term.send("")
            term.expect("What do strangers who DM the bot get?")
            term.expect(": ")
            term.send("")
        except AssertionError:
            term.send("\x03")
            raise
        finally:
            code = term.close()
    assert code == 0, term.seen
    account = yaml.safe_load((home / "hermit.yaml").read_text())["channels"]["telegram"]["accounts"]["default"]
    assert account["dm_policy"] == policy, term.seen
    assert account["owners"] == ["4242"] and account["allow_from"] == ["5151"]
