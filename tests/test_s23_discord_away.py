"""Discord deletes the gateway was away for, and an archived thread's lookup (s23 t6; s22 t9 left both open).

1. A delete sent while the gateway's socket was down is not replayed when Discord refuses to resume the session
   (op 9), nor when the gateway was not running at all: Ann's deleted "my card is …" stayed in her session and went
   to the model with every later turn. Now each fresh session reads the history of the channels whose messages the
   account handed on (channels/discord_missed.py) and retracts those Discord no longer has.
2. A delete in an archived thread (discord.py does not cache it) asks Discord for the thread; the thread's next
   message waited for that lookup — 30 s while Discord was slow — and then ran with the deleted text. The next message
   names its thread (THREAD_UPDATE unarchived it first), so it ends the lookup at once, as a DM's does (s22).

Real `hermit gateway run`, the real Discord adapter against the fake Discord on 127.0.0.1, the fake model provider.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from audit19_who import last_user_text
from channeldrivers import DiscordDriver
from channelhelpers import run
from fakes.fake_discord import BOT_ID
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER = "600000000000001001"
POLICIES = {"fam": {"owners": [OWNER], "group_policy": "open", "require_mention": False}}
SCRIPT = [{"match": {"contains": "AW-NEXT"}, "text": "next-ok"}, {"text": "ok", "repeat": True}]
ARCHIVED = "800000000000000030"


def nexts(provider: FakeProvider) -> list[str]:
    return [json.dumps(r.body) for r in provider.requests if "AW-NEXT" in last_user_text(r.body)]


def away(tmp_path: Path, *, restart: bool, edit: bool = False) -> list[str]:
    """A secret and a note said in a DM; the secret deleted on Discord while the gateway is away (its socket dropped
    and the resume refused, or the gateway stopped); then the next message. Returns the next message's requests."""

    async def main() -> list[str]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "discord", provider, POLICIES) as (d, gw):
                assert isinstance(d, DiscordDriver)
                fake, token = d.fake, d.tokens["fam"]
                mid = await fake.say("AW-SECRET my card is 4111-0001", author=OWNER, bot_token=token)
                await until(lambda: len(d.texts("fam", OWNER)) == 1, "the secret's answer")
                await fake.say("AW-KEEP the spare key is under the blue pot", author=OWNER, bot_token=token)
                await until(lambda: len(d.texts("fam", OWNER)) == 2, "the note's answer")
                identified = fake.identified
                change = fake.edit(mid, "AW-SECRET never mind", tell=False) if edit else fake.delete(mid, tell=False)
                if restart:
                    await gw.stop()
                    await change  # nobody connected: nobody hears it
                    await gw.start()
                else:
                    fake.refuse_resume = True
                    await change  # while the socket is down
                    await fake.drop_gateway()
                await fake.wait_for(lambda: fake.identified > identified, timeout=PROC_TIMEOUT)  # a fresh session
                await fake.say("AW-NEXT what did I tell you?", author=OWNER, bot_token=token)
                await until(lambda: "next-ok" in d.texts("fam", OWNER), "the next message's answer")
                if not restart:
                    assert fake.done("resume_refused")
                return nexts(provider)

    return run(main, timeout=PROC_TIMEOUT * 2)


def test_a_dm_deleted_while_the_socket_was_down_and_the_resume_refused_is_retracted(tmp_path: Path) -> None:
    [request] = away(tmp_path, restart=False)
    assert "4111-0001" not in request
    assert "blue pot" in request  # what was not deleted stays


def test_a_dm_deleted_while_the_gateway_was_stopped_is_retracted_at_its_start(tmp_path: Path) -> None:
    [request] = away(tmp_path, restart=True)
    assert "4111-0001" not in request
    assert "blue pot" in request
    held = next(tmp_path.rglob("held-messages.json"))
    assert "4111" not in held.read_text() and held.stat().st_mode & 0o077 == 0  # ids only, the owner's alone


def test_a_dm_edited_while_the_gateway_was_stopped_runs_as_edited(tmp_path: Path) -> None:
    [request] = away(tmp_path, restart=True, edit=True)
    assert "4111-0001" not in request and "AW-SECRET never mind" in request
    assert "blue pot" in request


def test_a_delete_in_an_archived_thread_does_not_hold_the_threads_next_message(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], int]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "discord", provider, POLICIES) as (d, gw):
                assert isinstance(d, DiscordDriver)
                fake, token = d.fake, d.tokens["fam"]
                fake.archive_thread(ARCHIVED)
                await fake.unarchive(ARCHIVED, token)
                mid = await fake.say(f"<@{BOT_ID}> AW-SECRET my card is 4111-0001", author=OWNER, thread=True,
                                     channel_id=ARCHIVED, mention_bot=True, bot_token=token)
                await until(lambda: len([m for m in fake.sent(token) if m["channel_id"] == ARCHIVED]) == 1,
                            "the secret's answer")
                identified = fake.identified
                await gw.stop()
                await gw.start()  # READY lists no archived thread: the new process does not cache it
                await fake.wait_for(lambda: fake.identified > identified, timeout=PROC_TIMEOUT)
                looked = len(fake.done("channel"))
                fake.channel_lookups_held = asyncio.Event()  # Discord slow to answer
                try:
                    await fake.delete(mid, bot_token=token)
                    await until(lambda: len(fake.done("channel")) > looked, "the delete's lookup of its thread")
                    await fake.unarchive(ARCHIVED, token)  # Discord unarchives a thread a message is sent to
                    await fake.say(f"<@{BOT_ID}> AW-NEXT oops, wrong thread", author=OWNER, thread=True,
                                   channel_id=ARCHIVED, mention_bot=True, bot_token=token)
                    await until(lambda: any(m["content"] == "next-ok" for m in fake.sent(token)),
                                "the next message's answer")
                    held = len(fake.done("channel")) - looked
                finally:
                    fake.channel_lookups_held.set()
                return nexts(provider), held

    requests, lookups = run(main, timeout=PROC_TIMEOUT * 2)
    assert len(requests) == 1 and lookups == 1
    sessions = next(tmp_path.rglob("sessions.json")).read_text()
    assert f":thread:{ARCHIVED}" in sessions and f"group:{ARCHIVED}" not in sessions  # both said in the thread
    assert "4111-0001" not in requests[0]  # retracted before the next turn: the delete was not left waiting
