"""Audit 22, Discord: how long a message waits behind a change before it (channels/in_order.py).

Measured first (real gateway, fake Discord, t9): a reply after a delete came as fast as any (0.17-0.21 s vs 0.16 s);
after the gateway socket dropped and discord.py resumed, 0.21 s; after a delete the gateway missed while it was down,
0.17 s — a missed event holds nothing (only a change whose handler runs in this process does; the delete is then never
retracted: Discord does not send it again). The 30 s bound is reached only when a change's handler hangs: a lookup
Discord is slow to answer. One such lookup is in normal use: a delete in a DM the gateway has not seen since it
started (a restart) names only the channel, and the DM's person is asked of Discord. Ann's next message in that DM
waited for that lookup — 30 s while Discord was slow — and then ran with the deleted text still in its history.

Now the message itself ends the wait: a DM message names the DM's person, so a delete's lookup of that channel takes
it from the message and the lookup is dropped; the delete is handed on, the retraction written, and the message runs
without the deleted text at once. Real `hermit gateway run` (restarted once), the real Discord adapter against the fake
Discord (its channel lookup held open), the fake model provider.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from audit19_who import last_user_text
from channeldrivers import DiscordDriver
from channelhelpers import run
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER = "600000000000001001"
POLICIES = {"fam": {"owners": [OWNER]}}


def test_a_delete_in_a_dm_unseen_since_a_restart_does_not_hold_the_next_message(tmp_path: Path) -> None:
    script = [{"match": {"contains": "DH-NEXT"}, "text": "next-ok"}, {"text": "ok", "repeat": True}]

    async def main() -> tuple[list[str], int]:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "discord", provider, POLICIES) as (d, gw):
                assert isinstance(d, DiscordDriver)
                fake, token = d.fake, d.tokens["fam"]
                dm = f"5{OWNER[1:]}"
                mid = await fake.say("DH-SECRET my card is 4111-0001", author=OWNER, bot_token=token)
                await until(lambda: len(d.texts("fam", OWNER)) == 1, "the secret's answer")
                identified = fake.identified
                await gw.stop()
                await gw.start()
                await fake.wait_for(lambda: fake.identified > identified)  # the new process is connected
                fake.channel_lookups_held = asyncio.Event()
                try:
                    await fake._dispatch("MESSAGE_DELETE", {"id": mid, "channel_id": dm}, token)  # noqa: SLF001
                    await until(lambda: bool(fake.done("channel")), "the delete's lookup of its DM channel")
                    await fake.say("DH-NEXT oops, wrong chat", author=OWNER, bot_token=token)
                    await until(lambda: "next-ok" in d.texts("fam", OWNER), "the next message's answer")
                    held = len(fake.done("channel"))
                finally:
                    fake.channel_lookups_held.set()
                return [json.dumps(r.body) for r in provider.requests if "DH-NEXT" in last_user_text(r.body)], held

    nexts, lookups = run(main, timeout=PROC_TIMEOUT * 2)
    assert len(nexts) == 1 and lookups == 1
    assert "4111-0001" not in nexts[0]  # retracted before the next turn: the delete was not left waiting
