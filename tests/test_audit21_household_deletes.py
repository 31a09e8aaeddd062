"""Audit 21, a delete and at once the next message on Discord: "my card is …" deleted, then "oops, wrong chat".

discord.py runs each event's handler as a task of its own; the next message's handler overtook the delete's, its
turn started before the retraction was written, and the deleted text went to the model once more (in 2 of 4 runs
of one pair; here five pairs, in Ann's DM and in the family channel). Now a message is handed on after the edits
and deletes that came before it in its conversation (channels/in_order.py). Real `hermit gateway run`, the real
Discord adapter against the fake Discord, the fake model provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from audit19_who import last_user_text
from channeldrivers import DiscordDriver
from channelhelpers import run
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL
from hermit.channels.in_order import InOrder, after
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER, CARL = "600000000000001001", "600000000000003000"
POLICIES = {"fam": {"owners": [OWNER], "groups": [TEXT_CHANNEL], "require_mention": False}}
ROUNDS = 5


def test_a_message_deleted_just_before_the_next_one_is_not_in_the_next_turn(tmp_path: Path) -> None:
    script = [*({"match": {"contains": f"DL-NEXT-{i}"}, "text": f"next-ok-{i}"} for i in range(2 * ROUNDS)),
              {"text": "ok", "repeat": True}]

    async def main() -> list[tuple[int, str]]:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "discord", provider, POLICIES) as (d, _gw):
                assert isinstance(d, DiscordDriver)
                fake, token = d.fake, d.tokens["fam"]
                dm = f"5{OWNER[1:]}"
                for i in range(2 * ROUNDS):
                    in_dm = i < ROUNDS
                    where, who = (dm, OWNER) if in_dm else (TEXT_CHANNEL, CARL)
                    n = len(d.texts("fam", where))
                    mid = await fake.say(f"DL-SECRET-{i} my card is 4111-{i:04d}", author=who, guild=not in_dm,
                                         bot_token=token)
                    await until(lambda w=where, n=n: len(d.texts("fam", w)) == n + 1, "the secret's answer")
                    gone = {"id": mid, "channel_id": where, **({} if in_dm else {"guild_id": GUILD_ID})}
                    await fake._dispatch("MESSAGE_DELETE", gone)  # noqa: SLF001 - the fake's own dispatch
                    await fake.say(f"DL-NEXT-{i} oops, wrong chat", author=who, guild=not in_dm, bot_token=token)
                    await until(lambda w=where, i=i: f"next-ok-{i}" in d.texts("fam", w), "the next answer")
                return [(i, json.dumps(r.body)) for r in provider.requests for i in range(2 * ROUNDS)
                        if f"DL-NEXT-{i}" in last_user_text(r.body)]

    nexts = run(main, timeout=PROC_TIMEOUT * 2)
    assert len(nexts) == 2 * ROUNDS
    assert [i for i, body in nexts if f"4111-{i:04d}" in body] == []


def test_a_message_waits_for_the_changes_before_it_only_and_not_for_ever() -> None:
    async def body() -> None:
        order, release, never = InOrder(), asyncio.Event(), asyncio.Event()

        async def change(key: str, until_set: asyncio.Event) -> None:
            with order.pending(key):
                await until_set.wait()

        first = asyncio.create_task(change("chan", release))
        await asyncio.sleep(0)  # the change's handler has started
        assert order.earlier("other") == ()  # another conversation waits for nothing
        message = asyncio.create_task(after(order.earlier("chan")))
        later = asyncio.create_task(change("chan", never))  # came after the message: not waited for
        await asyncio.sleep(0)
        assert not message.done()
        release.set()
        await asyncio.wait_for(message, 5)
        await first
        # A change whose handler hangs holds the next message for the bound only.
        await asyncio.wait_for(after(order.earlier("chan"), timeout=0.01), 5)
        later.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await later
        assert order.earlier("chan") == ()

    asyncio.run(body())
