"""Two Slack accounts in two workspaces: a Slack member id (`U…`) or channel id (`C…`) names someone or something
only within its workspace, so the same bare id in workspace B is another person (another channel) than in
workspace A. A member of B whose id equals A's owner's, or A's paired contact's, and a channel of B whose id
equals A's, must get nothing of A's: no owner rights, no pairing, no session and no room of the other.

End to end: `hermit gateway run` with the real Slack adapter (Socket Mode) against two fake Slacks on 127.0.0.1
(one per workspace, each answering auth.test with its own team id) and the fake model provider."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from channeldrivers import SlackDriver
from channelhelpers import run
from fakes.fake_slack import BOT_USER
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import SECRET, Gateway, env_for, until

OWNER = "U0OWNER1"  # the owner's member id in workspace A; in workspace B the same id is a stranger
TEAMS = {"a": "T0AAAA1", "b": "T0BBBB2"}
CODE_RE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")


@asynccontextmanager
async def two_workspaces(tmp: Path, provider: FakeProvider, policies: dict[str, dict[str, Any]],
                         dm_scope: str) -> AsyncIterator[SlackDriver]:
    d = SlackDriver(list(policies))
    for account, fake in d.fakes.items():
        fake.team = TEAMS[account]
    await d.start()
    accounts = {a: {**d.account_config(a), **p} for a, p in policies.items()}
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"},
                                   "session": {"dm_scope": dm_scope}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {"slack": {"accounts": accounts}}}
    (tmp / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    (tmp / "workspace").mkdir(exist_ok=True)
    (tmp / "workspace" / "MEMORY.md").write_text(f"# Memory\n\nThe vault code is {SECRET}.\n", encoding="utf-8")
    gw = Gateway(tmp, env_for(d))
    try:
        await gw.start()
        yield d
    finally:
        if gw.proc is not None:
            await gw.stop()
        await d.stop()


async def dm(d: SlackDriver, account: str, user: str, text: str) -> None:
    f = d.fakes[account]
    ev, eid = f.message(text, user=user, channel=f"D{user}")
    await f.push(ev, eid)


async def mention(d: SlackDriver, account: str, user: str, channel: str, text: str) -> None:
    f = d.fakes[account]
    ev, eid = f.message(f"<@{BOT_USER}> {text}", user=user, channel=channel, kind="app_mention")
    await f.push(ev, eid)


def posted(d: SlackDriver, account: str, channel: str) -> list[str]:
    return [m["text"] for m in d.fakes[account].posted() if m["channel"] == channel]


def bodies(provider: FakeProvider, since: int = 0) -> str:
    return json.dumps([r.body for r in provider.requests[since:]])


async def replied(d: SlackDriver, account: str, channel: str, n: int, what: str) -> None:
    await until(lambda: len(posted(d, account, channel)) >= n, what)


def test_the_same_bare_ids_in_another_workspace_share_no_session_with_the_owner_nor_a_group(tmp_path: Path) -> None:
    """dm_scope per-channel-peer: the owner's DMs on Slack are one session keyed by their member id; a member
    of workspace B with that id must not be put into it (and read what the owner said there), nor may a
    channel of B with the id of a channel of A share that channel's session."""
    policies = {"a": {"dm_policy": "allowlist", "owners": [OWNER], "group_policy": "allowlist", "groups": ["C77"]},
                "b": {"dm_policy": "open", "group_policy": "allowlist", "groups": ["C77"]}}

    async def main() -> None:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            async with two_workspaces(tmp_path, provider, policies, "per-channel-peer") as d:
                await dm(d, "a", OWNER, "OWNER-A-1: my bank PIN is 8231")
                await replied(d, "a", f"D{OWNER}", 1, "the owner's reply in workspace A")
                await mention(d, "a", "U0MEMBA", "C77", "GROUP-A-1: the launch is on Friday")
                await replied(d, "a", "C77", 1, "the reply in A's channel C77")
                seen = len(provider.requests)

                await dm(d, "b", OWNER, "B-1: what did I tell you before?")
                await replied(d, "b", f"D{OWNER}", 1, "the reply to B's member with the owner's id")
                await mention(d, "b", "U0MEMBB", "C77", "B-2: what was said here?")
                await replied(d, "b", "C77", 1, "the reply in B's channel C77")
                later = bodies(provider, seen)
                assert "B-1" in later and "B-2" in later
                assert "OWNER-A-1" not in later and "8231" not in later, "B's member read the owner's session"
                assert "GROUP-A-1" not in later, "B's channel C77 read A's channel C77"
                assert SECRET not in bodies(provider)
                # The owner's own session is still theirs, and does not hold B's words either.
                await dm(d, "a", OWNER, "OWNER-A-2: and now?")
                await replied(d, "a", f"D{OWNER}", 2, "the owner's second reply")
                last = json.dumps(provider.requests[-1].body)
                assert "OWNER-A-1" in last and "B-1" not in last

    run(main, timeout=PROC_TIMEOUT)


def test_a_member_of_another_workspace_gets_no_owner_rights_no_pairing_and_no_room_of_the_other(
        tmp_path: Path) -> None:
    """dm_scope main (the default): B's member with the owner's id is a stranger on B (a pairing code, never the
    main session); B's member with the id of a contact paired on A gets a code of their own; and two contacts
    with one bare id, one per workspace, each work in a room of their own: a file one writes is not the other's."""
    policies = {"a": {"dm_policy": "pairing", "owners": [OWNER], "allow_from": ["U0ROOM1"]},
                "b": {"dm_policy": "pairing", "allow_from": ["U0ROOM1"]}}
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "write", "arguments": {"path": "plan.txt", "content": "ROOM-A-SECRET 5521"}}],
         "match": {"contains": "A-WRITE"}},
        {"tool_calls": [{"name": "read", "arguments": {"path": "plan.txt"}}], "match": {"contains": "B-READ"}},
        {"text": "agent says hi", "repeat": True}]

    async def main() -> None:
        with FakeProvider(script) as provider:
            async with two_workspaces(tmp_path, provider, policies, "main") as d:
                # A contact paired on A.
                await dm(d, "a", "U0PAIR1", "hello A")
                await replied(d, "a", "DU0PAIR1", 1, "A's pairing code")
                code = CODE_RE.search(posted(d, "a", "DU0PAIR1")[0])
                assert code
                cmd = [sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "pairing", "approve", "slack",
                       code.group(0)]
                done = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.DEVNULL,
                                                            env={**os.environ})
                assert await done.wait() == 0
                await dm(d, "a", "U0PAIR1", "PAIR-A-2: hi again")
                await replied(d, "a", "DU0PAIR1", 2, "the paired contact's reply")

                # B's members with the owner's and the paired contact's ids: strangers on B, codes of their own.
                asked = len(provider.requests)
                for user in (OWNER, "U0PAIR1"):
                    await dm(d, "b", user, f"B-{user}: let me in")
                    await replied(d, "b", f"D{user}", 1, f"B's answer to {user}")
                    [reply] = posted(d, "b", f"D{user}")
                    assert CODE_RE.search(reply), reply
                assert len(provider.requests) == asked, "B's member reached the agent"

                # One bare id, a contact in each workspace: the file A's writes is not in B's room.
                await dm(d, "a", "U0ROOM1", "A-WRITE: keep my plan")
                await replied(d, "a", "DU0ROOM1", 1, "A's contact's reply")
                seen = len(provider.requests)
                await dm(d, "b", "U0ROOM1", "B-READ: show me the plan")
                await replied(d, "b", "DU0ROOM1", 1, "B's contact's reply")
                later = bodies(provider, seen)
                assert "B-READ" in later and "plan.txt" in later  # the read ran, in B's contact's session
                assert "ROOM-A-SECRET" not in later and "5521" not in later, "B's contact read A's contact's room"
                assert SECRET not in bodies(provider)

    run(main, timeout=PROC_TIMEOUT)


def test_an_account_whose_token_now_belongs_to_another_workspace_takes_nothing_from_it(tmp_path: Path) -> None:
    """`owners: [U0OWNER1]` under an account names that member of the account's workspace. A token swapped for
    another workspace's (a second app pasted into the first account) would make that workspace's U0OWNER1 the
    owner: the account records its workspace the first time auth.test names it, refuses a token of another
    one with an error saying why and how to move it on purpose, and takes the new one once the record is gone.
    The real Slack adapter in HTTP mode, against the fake Slack on 127.0.0.1."""
    import httpx

    from hermit.channels.slack import workspace_path
    from test_channel_slack_workspace import IdentitySlack, body_from, http_mode, post

    record = workspace_path(tmp_path, "work")

    async def main() -> None:
        home = IdentitySlack({"team_id": TEAMS["a"]})
        async with http_mode(tmp_path, home) as (_ch, sink, url), httpx.AsyncClient() as c:
            assert await post(c, url, body_from(home, "A-1", team_id=TEAMS["a"])) == 200
            assert (await sink.next()).sender_id == OWNER
        assert json.loads(record.read_text())["workspace"] == TEAMS["a"] and record.stat().st_mode & 0o777 == 0o600

        other = IdentitySlack({"team_id": TEAMS["b"]})
        async with http_mode(tmp_path, other) as (ch, sink, url), httpx.AsyncClient() as c:
            assert await post(c, url, body_from(other, "B-1: it's me, the owner", team_id=TEAMS["b"])) == 500
            assert await post(c, url, body_from(other, "B-2: again", team_id=TEAMS["b"])) == 500
            assert sink.published == []
            error = ch.status().last_error or ""
            assert f"belongs to workspace {TEAMS['b']}, but the account is workspace {TEAMS['a']}'s" in error, error
            assert str(record) in error and "hermit pairing list slack" in error

        record.unlink()  # moved on purpose, as the error says
        async with http_mode(tmp_path, other) as (_ch, sink, url), httpx.AsyncClient() as c:
            assert await post(c, url, body_from(other, "B-3", team_id=TEAMS["b"])) == 200
            assert (await sink.next()).text == "B-3"
        assert json.loads(record.read_text())["workspace"] == TEAMS["b"]

    run(main)


def test_an_unreadable_workspace_record_refuses_every_event(tmp_path: Path) -> None:
    import httpx

    from hermit.channels.slack import workspace_path
    from test_channel_slack_workspace import IdentitySlack, body_from, http_mode, post

    record = workspace_path(tmp_path, "work")
    record.parent.mkdir(parents=True)
    record.write_text("{not json", encoding="utf-8")

    async def main() -> None:
        fake = IdentitySlack({"team_id": TEAMS["a"]})
        async with http_mode(tmp_path, fake) as (ch, sink, url), httpx.AsyncClient() as c:
            assert await post(c, url, body_from(fake, "A-1", team_id=TEAMS["a"])) == 500
            assert sink.published == []
            assert "cannot tell which Slack workspace account work belongs to" in (ch.status().last_error or "")
        assert record.read_text() == "{not json"  # left for the owner to look at

    run(main)
