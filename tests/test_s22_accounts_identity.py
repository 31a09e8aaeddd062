"""Session 22, t14: an account whose bot changed under the same id while no gateway ran inherits no approvals.

The household's `shop` Telegram bot let strangers pair: Dan was approved, Eve's code was pending. With the gateway
stopped the owner removed `shop` from hermit.yaml, then added another bot under the same id (edit, edit, start), or
`hermit setup` stored another bot's token for `shop`. t9's fix (83cfbda) retires the approvals of an account only
when a gateway reads a config without it, so here the new bot let Dan in, and `hermit pairing approve telegram
<Eve's old code>` run with no gateway let Eve into it. Now each account's bot is recorded (a hash of the bot id, the
token's part before ':'; channels/account_identity.py) and a gateway starting with another bot under the id retires
the approvals and codes. The same bot with a reissued token (same bot id) keeps them.

Real `hermit gateway run`, the real Telegram adapter against fake Bot APIs on 127.0.0.1, the real `hermit pairing
approve` and `hermit setup` commands, the fake model provider.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from channeldrivers import TelegramDriver
from channelhelpers import run
from fakes.fake_telegram import FakeTelegram
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import Gateway, env_for, until

DAN, EVE = "7007", "8008"
CODE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")
REPLY = "agent says hi"


async def hermit(home: Path, *args: str, stdin: str = "", env: dict[str, str]) -> tuple[int, str]:
    """A `hermit` command run as the owner would, beside the fakes (which answer on this event loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hermit.cli.main", "--home", str(home), *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env)
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), PROC_TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def save(home: Path, provider: FakeProvider, accounts: dict[str, Any]) -> None:
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {"telegram": {"accounts": accounts}}}
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")


def driver_with(*tokens: str) -> TelegramDriver:
    """A Telegram driver whose fakes are the bots `bot1`, `bot2`… with these tokens (TG_BOT1, TG_BOT2…)."""
    d = TelegramDriver([])
    for n, token in enumerate(tokens, 1):
        d.fakes[f"bot{n}"] = FakeTelegram(token)
        d.env[f"TG_BOT{n}"] = token
    d.servers = list(d.fakes.values())
    return d


def shop_as(d: TelegramDriver, bot: str, var: str | None = None) -> dict[str, Any]:
    return {"token_env": var or f"TG_{bot.upper()}", "api_base": d.fakes[bot].base_url, "poll_timeout_seconds": 1,
            "dm_policy": "pairing"}


async def dm(d: TelegramDriver, bot: str, sender: str, text: str) -> str:
    n = len(d.texts(bot, sender))
    await d.dm(bot, sender, text)
    await until(lambda: len(d.texts(bot, sender)) > n, f"an answer to {sender} on {bot}", PROC_TIMEOUT)
    return d.texts(bot, sender)[n]


async def dan_approved_eve_pending(home: Path, d: TelegramDriver, env: dict[str, str]) -> str:
    """The first bot `bot1` as `shop`: Dan approved through `hermit pairing approve`, Eve's code pending."""
    gw = await Gateway(home, env).start()
    try:
        code = CODE.search(await dm(d, "bot1", DAN, "hi"))
        assert code is not None
        assert (await hermit(home, "pairing", "approve", "telegram", code.group(0), env=env))[0] == 0
        assert await dm(d, "bot1", DAN, "hello again") == REPLY
        eve = CODE.search(await dm(d, "bot1", EVE, "hi"))
        assert eve is not None
        return eve.group(0)
    finally:
        await gw.stop()


@pytest.mark.parametrize("how", ["removed and added again", "setup stores another bot's token",
                                 "same bot, token reissued"])
def test_a_bot_changed_under_an_account_id_while_no_gateway_ran_lets_none_of_the_old_bots_contacts_in(
        tmp_path: Path, how: str) -> None:
    home = tmp_path / "home"
    same_bot = how == "same bot, token reissued"
    d = driver_with("1:TOKENONE", "1:REISSUED" if same_bot else "2:TOKENTWO")

    async def main() -> tuple[str, str, int, list[str]]:
        with FakeProvider([{"text": REPLY, "repeat": True}]) as provider:
            await d.start()
            try:
                env = env_for(d)
                if how == "setup stores another bot's token":  # the token lives in hermit.env, as setup stores it
                    env = {k: v for k, v in env.items() if not k.startswith("TG_")}
                    save(home, provider, {})
                    for bot, token in (("bot1", "1:TOKENONE"), ("bot2", "2:TOKENTWO")):
                        if bot == "bot2":
                            eves_code = await dan_approved_eve_pending(home, d, env)
                        done = await hermit(home, "setup", "--channel", "telegram", "--account", "shop", "--token-stdin",
                                      "--token-var", "TG_SHOP", "--api-base", d.fakes[bot].base_url,
                                      "--dm-policy", "pairing", "--non-interactive", stdin=token + "\n", env=env)
                        assert done[0] == 0, done[1]
                        raw = yaml.safe_load((home / "hermit.yaml").read_text())
                        raw["channels"]["telegram"]["accounts"]["shop"]["poll_timeout_seconds"] = 1
                        (home / "hermit.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
                else:
                    save(home, provider, {"shop": shop_as(d, "bot1")})
                    eves_code = await dan_approved_eve_pending(home, d, env)
                    save(home, provider, {})  # edit: `shop` removed (no gateway runs)
                    save(home, provider, {"shop": shop_as(d, "bot2")})  # edit: `shop` added again: the other bot
                # The owner approves the pending code they still see, with no gateway running.
                approved_late = (await hermit(home, "pairing", "approve", "telegram", eves_code, env=env))[0]
                gw = await Gateway(home, env).start()
                try:
                    to_dan = await dm(d, "bot2", DAN, "hi, new bot")
                    to_eve = await dm(d, "bot2", EVE, "hi, new bot")
                finally:
                    await gw.stop()
                return to_dan, to_eve, approved_late, [json.dumps(r.body) for r in provider.requests]
            finally:
                await d.stop()

    to_dan, to_eve, approved_late, asked = run(main, timeout=PROC_TIMEOUT * 3)
    assert approved_late == 0  # the CLI cannot tell which bot runs: the code is retired at the next start instead
    if same_bot:  # the same bot (its id is the token's part before ':') keeps its contacts
        assert to_dan == REPLY and to_eve == REPLY
        assert not (home / "credentials" / "retired").exists()
        return
    assert CODE.search(to_dan) and CODE.search(to_eve), (to_dan, to_eve)  # strangers to the new bot: pair anew
    assert not any("new bot" in text for text in asked)  # the model never saw them
    retired = sorted(p.name for p in (home / "credentials" / "retired").iterdir())
    assert [n.split(".")[0] for n in retired] == ["allow-telegram-shop"]
    kept = json.loads((home / "credentials" / "retired" / retired[0]).read_text())
    assert set(kept["allow_from"]) == {DAN, EVE}  # kept aside for the owner to read
    record = (home / "credentials" / "accounts.json").read_text()
    assert "TOKEN" not in record and "1:" not in record  # a hash of the bot id, never the token
    assert os.stat(home / "credentials" / "accounts.json").st_mode & 0o077 == 0
    assert "its bot is not the one it approved them for" in (home / "gateway.stderr").read_text()
