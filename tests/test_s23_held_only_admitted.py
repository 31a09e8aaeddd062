"""The record of messages handed on holds only the ones the gateway took (s23 t13).

Discord's and Slack's adapters held every message they published — also the ones the gateway refused (a group's
chatter that does not mention the bot, with `require_mention` on by default; a stranger's DM; a group not let in),
which no session ever recorded and no retraction can concern. The record keeps the last 50 conversations written
to: a bot sitting in 50 channels of chatter pushed the owner's DM out of it, and a secret the owner deleted while
the gateway was stopped was never looked for: it stayed in the owner's session and went to the model with the next
message (and each start read up to 1,000 messages of history of every such channel). Now a message is held only when
the gateway queued it.

Real `hermit gateway run`, the real Slack and Discord adapters against the fakes on 127.0.0.1, the fake provider.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audit19_who import last_user_text
from channeldrivers import DiscordDriver, SlackDriver
from channelhelpers import run
from hermit.channels.held_messages import CHANNELS
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER = "U1001"
MEMBER = "U2002"
POLICIES = {"fam": {"owners": [OWNER], "group_policy": "open", "require_mention": True}}
SCRIPT = [{"match": {"contains": "AW-NEXT"}, "text": "next-ok"}, {"text": "ok", "repeat": True}]


def _requests(provider: FakeProvider, marker: str) -> list[str]:
    return [json.dumps(r.body) for r in provider.requests if marker in last_user_text(r.body)]


def test_slack_chatter_in_many_channels_does_not_push_the_owners_dm_out_of_the_record(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], dict[str, Any]]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "slack", provider, POLICIES) as (d, gw):
                assert isinstance(d, SlackDriver)
                f = d.fakes["fam"]
                secret, eid = f.message("AW-SECRET my card is 4111-0001", user=OWNER, channel=f"D{OWNER}")
                await f.push(secret, eid)
                await until(lambda: len(d.texts("fam", OWNER)) == 1, "the secret's answer")
                for n in range(CHANNELS):  # chatter, no mention: refused (require_mention), never in a session
                    await d.group("fam", f"C{500 + n}", MEMBER, f"lunch at noon in room {n}?", mention=False)
                await d.group("fam", "C999", MEMBER, "AW-PING anyone?", mention=True)  # handled after the chatter
                await until(lambda: len(d.texts("fam", "C999")) == 1, "the mention's answer")
                await gw.stop()
                f.delete(secret["channel"], secret["ts"])  # deleted on Slack while the gateway was stopped
                connections = f.connections
                await gw.start()
                await f.wait_for(lambda: f.connections > connections, timeout=PROC_TIMEOUT)
                await d.dm("fam", OWNER, "AW-NEXT what did I tell you?")
                await until(lambda: "next-ok" in d.texts("fam", OWNER), "the next message's answer")
                held = json.loads(next(tmp_path.rglob("slack/fam/held-messages.json")).read_text())
                return _requests(provider, "AW-NEXT"), held

    [request], held = run(main, timeout=PROC_TIMEOUT * 2)
    assert "4111-0001" not in request, "the secret deleted while away stayed in the owner's session"
    assert {c["id"] for c in held["channels"]} <= {f"D{OWNER}", "C999"}, held  # no refused chatter held


D_OWNER, D_MEMBER = "600000000000001001", "600000000000001002"


def test_discord_refused_chatter_is_not_held(tmp_path: Path) -> None:
    policies = {"fam": {**POLICIES["fam"], "owners": [D_OWNER]}}

    async def main() -> dict[str, Any]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "discord", provider, policies) as (d, _gw):
                assert isinstance(d, DiscordDriver)
                await d.dm("fam", D_OWNER, "AW-KEEP the spare key is under the blue pot")
                await until(lambda: len(d.texts("fam", D_OWNER)) == 1, "the DM's answer")
                for n in range(3):  # chatter, no mention: refused
                    await d.group("fam", d.group_id(n + 1), D_MEMBER, f"lunch at noon in room {n}?", mention=False)
                await d.group("fam", d.group_id(9), D_MEMBER, "AW-PING anyone?", mention=True)
                await until(lambda: len(d.texts("fam", d.group_id(9))) == 1, "the mention's answer")
                data: dict[str, Any] = json.loads(next(tmp_path.rglob("discord/fam/held-messages.json")).read_text())
                return data

    held = run(main, timeout=PROC_TIMEOUT * 2)
    ids = {c["id"] for c in held["channels"]}
    assert len(ids) == 2 and "800000000000000009" in ids, held  # the owner's DM and the mentioned channel only
