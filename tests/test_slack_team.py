"""A Slack member id names a member of one workspace: `owners: [U0OWNER1]` means that member of the account's
own workspace. Slack delivers messages from members of other workspaces too (a Slack Connect channel or DM
shared with another organisation: the event's `user_team` names their workspace), and such a sender must
not be taken for the listed person on the strength of the same member id. End to end: `hermit gateway run`
with the real Slack adapter (Socket Mode) against the fake Slack and the fake model provider."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx

from channeldrivers import SlackDriver
from channelhelpers import run
from fakes.fake_slack import TEAM, event_body
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import SECRET, stack, until

OWNER = "U0OWNER1"
CODE_RE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")
POLICIES = {"work": {"dm_policy": "pairing", "owners": [OWNER], "group_policy": "allowlist", "groups": ["C77"],
                     "group_allow_from": [OWNER]}}


async def say(d: SlackDriver, text: str, *, team: str | None, channel: str, kind: str = "message",
              channel_type: str = "im") -> None:
    f = d.fakes["work"]
    ev, eid = f.message(text, user=OWNER, channel=channel, kind=kind, channel_type=channel_type)
    if team is not None:
        ev["user_team"] = ev["team"] = team  # the sender's own workspace, as Slack sends it
    await f.push(ev, eid)


def posted(d: SlackDriver, channel: str) -> list[str]:
    return [m["text"] for m in d.fakes["work"].posted() if m["channel"] == channel]


def bodies(provider: FakeProvider) -> str:
    return json.dumps([r.body for r in provider.requests])


def test_the_same_member_id_from_another_workspace_is_not_the_listed_owner(tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [{"text": "agent says hi", "repeat": True}]

    async def main() -> None:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "slack", provider, POLICIES) as (d, _gw):
                assert isinstance(d, SlackDriver)
                # A Slack Connect DM from a member of another organisation whose id is the owner's.
                await say(d, "OTHER-1: send me the vault code", team="TOTHER", channel="DEXT")
                await until(lambda: posted(d, "DEXT"), "the reply to the other workspace's member")
                [reply] = posted(d, "DEXT")
                assert CODE_RE.search(reply), reply  # a stranger: a pairing code, never the owner's session
                assert f"{OWNER}@TOTHER" in reply  # the id they are known by names their workspace
                assert provider.requests == []
                # In a channel shared with that organisation, where only the owner may talk to the bot.
                await say(d, "OTHER-2: and here?", team="TOTHER", channel="C77", kind="app_mention")
                await asyncio.sleep(1.0)
                assert posted(d, "C77") == [] and provider.requests == []

                # The owner, in the account's own workspace (said so, or not said at all): the main session.
                await say(d, "HOME-1: it's me", team=TEAM, channel="DHOME")
                await until(lambda: posted(d, "DHOME"), "the owner's reply")
                assert posted(d, "DHOME") == ["agent says hi"] and SECRET in bodies(provider)
                await say(d, "HOME-2: me again", team=None, channel="DHOME")
                await until(lambda: len(posted(d, "DHOME")) == 2, "the owner's second reply")
                assert len(provider.requests) == 2 and "OTHER-" not in bodies(provider)

    run(main, timeout=PROC_TIMEOUT)


def test_org_members_stay_bare_and_an_edit_by_another_workspaces_member_keeps_their_id(tmp_path: Path) -> None:
    """An org-wide Enterprise Grid install: a member of another workspace of the org, in a conversation the org
    does not share outside, is the org's member id (the same person in every workspace of it); the same id from
    a Slack Connect conversation is someone else's, and so is their edit of a message they sent."""
    from test_channel_slack_workspace import IdentitySlack, http_mode, post

    async def main() -> None:
        fake = IdentitySlack({"team_id": "", "enterprise_id": "E1", "is_enterprise_install": True})
        async with http_mode(tmp_path, fake) as (_ch, sink, url), httpx.AsyncClient() as c:
            for n, (home, shared) in enumerate([("T6", False), ("T9", True)]):
                ev, eid = fake.message(f"message {n}", user=OWNER, channel="DX")
                ev["user_team"] = home
                body = {**event_body(ev, eid), "team_id": "T5", "enterprise_id": "E1", "is_ext_shared_channel": shared}
                assert await post(c, url, json.dumps(body).encode()) == 200
            ev, eid = fake.message("", user=OWNER, channel="DX")
            ev.update(subtype="message_changed", message={"user": OWNER, "text": "edited", "ts": "2.0"},
                      previous_message={"user": OWNER, "user_team": "T9", "ts": "2.0", "text": "message 1"})
            body = {**event_body(ev, eid), "team_id": "T5", "enterprise_id": "E1", "is_ext_shared_channel": True}
            assert await post(c, url, json.dumps(body).encode()) == 200
            got = [await sink.next() for _ in range(3)]
        assert [(m.sender_id, m.peer_id, m.change) for m in got] == [
            (OWNER, OWNER, None), (f"{OWNER}@T9", f"{OWNER}@T9", None), (f"{OWNER}@T9", f"{OWNER}@T9", "edited")]

    run(main)


def test_a_member_of_another_workspace_can_be_listed_by_the_id_the_pairing_reply_names(tmp_path: Path) -> None:
    from hermit.channels.access import AccessControl
    from hermit.channels.pairing import PairingStore
    from hermit.config import StatePaths
    from hermit.config.load import build_config

    loaded = build_config({"channels": {"slack": {"accounts": {"work": {"owners": [f" slack:{OWNER.lower()}@tother"]}}}}},
                          StatePaths(tmp_path))
    acc = loaded.config.channels.slack.accounts["work"]
    assert acc.owners == [f"{OWNER}@TOTHER"]
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    assert ac.is_owner("slack", "work", f"{OWNER}@TOTHER") and not ac.is_owner("slack", "work", OWNER)
