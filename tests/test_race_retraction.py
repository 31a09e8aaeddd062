"""A deleted chat message must stop being used, whatever else happens around its delete (audit H3).

Played through real parts: the Slack channel against the fake Slack on 127.0.0.1 (Socket Mode), the gateway's
Bus with the real Router and AccessControl, an AgentRuntime on a FunctionModel, real transcript files.

- Slack does not send `message_deleted` for a message that has thread replies: it keeps a "This message was
  deleted." tombstone in its place and sends `message_changed` (message.subtype `tombstone`), whose
  previous_message carries `thread_ts` equal to the message's own ts. Hermit took it for an edit and routed it
  to the thread's session (a thread parent was posted in the channel, so its turn ran in the channel's session):
  a waiting message was still answered and an answered one never retracted. Any member replying in the thread
  of the owner's message made the owner's delete miss.
- A delete arriving after the bus took the message from its queue but before its turn recorded it (the access
  check again, its files being filed) found it neither waiting nor in the transcript, and was lost.
- Discord names only the channel of a deleted message: after a restart a DM's person was unknown, and the delete
  was dropped; in an archived thread (no longer cached) it went to a session named after the thread's id.
- A delete of a message whose turn was running was retracted only after that turn, but the platform was told
  at once that the delete was handled: a kill during the turn lost it. It is now on disk when publish returns.
- A message that came after its own delete (webhooks out of order) was answered: the delete had found nothing.
- A delete in a chat without a session (a refused sender's) took the session's lock to look, leaving a lock
  file per chat: a member of a channel the assistant ignores made one per thread, without end.
Guarded too (no attack found): a delete is looked for only in the session its sender's messages go to, so the
same message id in another chat, or a stranger's DM, retracts nothing of the owner's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from channelhelpers import FAST, QueueSink, run
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL, THREAD, FakeDiscord, patch_discord, unpatch
from fakes.fake_discord import user as discord_user
from fakes.fake_slack import BOT_USER, FakeSlack
from gatewayhelpers import HeldAdmission, RecordingChannel, last_user_text, make_bus, runtime
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.discord import DiscordChannel
from hermit.channels.pairing import PairingStore
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import DiscordAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Admission, Bus
from hermit.gateway.supervisor import admit_with, route_with, split_chunks
from hermit.memory.index.session_source import render_transcript
from hermit.models.base import ModelRequest
from hermit.sessions.entries import RETRACTED_TEXT
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply
from sessionhelpers import Clock
from test_channel_slack import socket_mode
from test_trust_deleted_messages import msg

OWNER, MEMBER, CHANNEL = "U1", "U2", "C1"
SECRET = "my card PIN is 4711"


@dataclass
class SlackGateway:
    fake: FakeSlack
    bus: Bus
    rt: AgentRuntime
    seen: list[str]  # the last user text of every model request
    requests: list[ModelRequest]

    async def say(self, text: str, user: str, *, thread_ts: str | None = None) -> dict[str, Any]:
        """A member's message in the channel, mentioning the assistant; returns the event Slack sent."""
        ev, eid = self.fake.message(f"<@{BOT_USER}> {text}", user=user, channel=CHANNEL, kind="app_mention",
                                    thread_ts=thread_ts)
        await self.fake.push(ev, eid)
        return ev

    async def delete_thread_parent(self, ev: dict[str, Any], event_id: str) -> None:
        """What Slack sends when a message that has thread replies is deleted: a tombstone takes its place."""
        prev = {"type": "message", "user": ev["user"], "text": ev["text"], "ts": ev["ts"], "thread_ts": ev["ts"],
                "reply_count": 1, "reply_users": [MEMBER], "latest_reply": "9.9"}
        tomb = {"type": "message", "subtype": "tombstone", "user": "USLACKBOT", "text": "This message was deleted.",
                "hidden": True, "ts": ev["ts"], "thread_ts": ev["ts"], "reply_count": 1}
        await self.fake.push({"type": "message", "subtype": "message_changed", "channel": CHANNEL,
                              "channel_type": "channel", "hidden": True, "event_ts": "1.5", "ts": "1.5",
                              "message": tomb, "previous_message": prev}, event_id)


@asynccontextmanager
async def slack_gateway(tmp: Path, release: threading.Event | None = None) -> AsyncIterator[SlackGateway]:
    """The Slack channel publishing straight into a real Bus; the model blocks on `release` when given."""
    home = tmp / "home"
    seen: list[str] = []
    requests: list[ModelRequest] = []

    def model(req: ModelRequest) -> str:
        requests.append(req)
        seen.append(last_user_text(req))
        if release is not None:
            release.wait(20)
        return "noted"

    async with socket_mode(tmp) as (fake, ch, _sink):
        loaded = build_config({
            "agents": {"defaults": {"timezone": "Europe/Paris"}},
            "channels": {"slack": {"accounts": {"work": {
                "owners": [OWNER], "group_policy": "allowlist", "groups": [CHANNEL]}}}},
        }, StatePaths(home))
        rt = AgentRuntime(loaded.agent(), FunctionModel(model), clock=Clock(), fsync=False, home=home)
        access = AccessControl(loaded.config.channels, PairingStore(home))
        bus = Bus(AgentHost({rt.agent.id: rt}), route=route_with(Router.from_config(loaded), access),
                  admit=admit_with(access, loaded), chunk=split_chunks, channels={("slack", "work"): ch})
        ch._sink = bus  # type: ignore[assignment]  # the channel publishes into the gateway, as supervisor wires it
        try:
            yield SlackGateway(fake, bus, rt, seen, requests)
        finally:
            if release is not None:
                release.set()
            await bus.drain(30)
            rt.close()


async def wait_for(cond: Any, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_slack_a_deleted_thread_parent_is_retracted_from_the_channel_session(tmp_path: Path) -> None:
    async def main() -> None:
        async with slack_gateway(tmp_path) as g:
            ev = await g.say(SECRET, OWNER)
            await wait_for(lambda: len(g.seen) == 1)
            assert await g.bus.drain(20)
            await g.say("nice", MEMBER, thread_ts=ev["ts"])  # a member answers in its thread
            await wait_for(lambda: len(g.seen) == 2)
            assert await g.bus.drain(20)
            await g.delete_thread_parent(ev, "EvTomb1")
            await wait_for(lambda: ev_acked(g.fake))
            assert await g.bus.drain(20)
            await g.say("what did I say?", OWNER)
            await wait_for(lambda: len(g.seen) == 3)
            assert await g.bus.drain(20)
            sent = str([m.to_dict() for m in g.requests[-1].messages])
            assert "4711" not in sent and RETRACTED_TEXT in sent, sent

    run(main, timeout=90)


def test_slack_a_thread_parent_deleted_while_it_waits_is_never_answered(tmp_path: Path) -> None:
    release = threading.Event()

    async def main() -> None:
        async with slack_gateway(tmp_path, release) as g:
            await g.say("first", OWNER)
            await wait_for(lambda: g.bus.running() == 1)
            ev = await g.say(SECRET, OWNER)  # waits behind "first"
            await g.delete_thread_parent(ev, "EvTomb2")
            await wait_for(lambda: ev_acked(g.fake))
            release.set()
            assert await g.bus.drain(20)
            assert g.seen == ["first"]
            stored = "".join(p.read_text() for p in g.rt.agent.sessions_dir.glob("*.jsonl"))
            assert "4711" not in stored

    run(main, timeout=90)


def ev_acked(fake: FakeSlack) -> bool:
    """Every envelope pushed so far was acked: the channel published it (Socket Mode acks after publish)."""
    return not fake.unacked


def test_a_delete_while_the_turn_is_being_started_retracts_the_message_once_it_is_recorded(tmp_path: Path) -> None:
    """The bus takes a message from its queue, checks its sender's access again and files its files before the
    turn records it: a delete arriving then found it neither waiting nor in the transcript, so it was lost —
    the deleted text was answered and used by every later turn. Now its retraction waits for that turn."""
    requests: list[ModelRequest] = []
    entered = threading.Event()
    admit = HeldAdmission(2)  # the check when its turn is about to start: held there
    checking, go_on = admit.checking, admit.go_on

    def model(req: ModelRequest) -> Reply:
        requests.append(req)
        return "noted"

    rt = runtime(tmp_path, model)
    retract = rt.retract

    def watched(session_key: str, ref: str, remove: Any = None) -> bool:
        entered.set()
        return retract(session_key, ref, remove)

    rt.retract = watched  # type: ignore[method-assign]  # observed, not replaced
    bus = make_bus(rt, RecordingChannel(), admit=admit)

    async def main() -> None:
        assert await bus.publish(msg(SECRET, "1")) == "queued"
        await wait_for(checking.is_set)
        await bus.publish(msg("", "1", change="deleted"))
        # Released once the retraction either ran (it would find nothing yet) or waits for the turn.
        await wait_for(lambda: entered.is_set() or waits_for_a_turn(bus))
        go_on.set()
        assert await bus.drain(20)
        await ask_again(bus)

    asyncio.run(main())
    assert_retracted_for_the_next_turn(requests)


async def ask_again(bus: Bus) -> None:
    """The sender's next message, answered: its request is the one that shows what the session still holds."""
    await bus.publish(msg("what did I say?", "2"))
    assert await bus.drain(20)


def assert_retracted_for_the_next_turn(requests: list[ModelRequest]) -> None:
    later = str([m.to_dict() for m in requests[-1].messages])
    assert "4711" not in later and RETRACTED_TEXT in later and "what did I say?" in later, later


def waits_for_a_turn(bus: Bus) -> bool:
    """Every pending retraction is parked on an event (the turn it waits for), not running or done."""
    tasks = list(bus._retractions)
    return bool(tasks) and all(getattr(t.get_coro().cr_await, "__qualname__", "") == "Event.wait"  # type: ignore[union-attr]
                               for t in tasks)


class DMsDiscord(FakeDiscord):
    """The fake Discord, also answering GET /channels/{id} for a DM channel (`5…`, with user `6…`) and for the
    guild's thread (archived)."""

    def routes(self, app: Any) -> None:
        super().routes(app)
        app.router.add_get("/api/v10/channels/{channel_id}", self._channel)

    async def _channel(self, request: Any) -> Any:
        stop, _ = await self._guarded("channel", request)
        cid = request.match_info["channel_id"]
        if stop is not None:
            return stop
        self.record("channel", {"channel_id": cid})
        if cid == THREAD:  # archived: discord.py no longer caches it
            thread = next(t for t in self._guild()["threads"] if t["id"] == THREAD)
            return self._json({**thread, "thread_metadata": {**thread["thread_metadata"], "archived": True}})
        if not cid.startswith("5"):
            return self._json({"message": "Unknown Channel", "code": 10003}, 404)
        return self._json({"id": cid, "type": 1, "recipients": [discord_user(f"6{cid[1:]}", "ann")],
                           "last_message_id": None})


@asynccontextmanager
async def discord_account(fake: FakeDiscord, tmp: Path) -> AsyncIterator[tuple[DiscordChannel, QueueSink]]:
    ch = DiscordChannel("default", DiscordAccountConfig(), fake.token, state_dir=tmp, policy=FAST,
                        reconnect_max_delay=0.1)
    sink = QueueSink()
    try:
        await ch.start(sink)
        await fake.wait_for(lambda: ch.status().connected)
        yield ch, sink
    finally:
        await ch.stop()


def test_discord_a_dm_deleted_after_a_restart_is_still_a_delete(tmp_path: Path) -> None:
    """Discord's MESSAGE_DELETE names only the channel and the message, and discord.py's cache is empty after a
    restart: a DM's person was known only from the DM channels this process had answered in, so every delete of
    a DM message sent before a restart was dropped and its text stayed in use. The DM channel is now asked for."""
    author = "600000000000000001"

    async def main() -> None:
        fake = await DMsDiscord().start()
        old = patch_discord(fake)
        try:
            async with discord_account(fake, tmp_path) as (_ch, sink):
                mid = await fake.say(SECRET, author=author)
                first = await sink.next()
                assert (first.peer_id, first.message_id) == (author, mid)
            async with discord_account(fake, tmp_path) as (_ch, sink):  # the gateway restarted
                await fake._dispatch("MESSAGE_DELETE", {"id": mid, "channel_id": f"5{author[1:]}"})
                deleted = await sink.next()
                assert (deleted.change, deleted.peer_kind, deleted.peer_id, deleted.sender_id, deleted.message_id) == \
                    ("deleted", "dm", author, author, mid)
        finally:
            unpatch(old)
            await fake.stop()

    run(main, timeout=60)


def test_a_delete_in_one_chat_never_retracts_another_chats_message_of_the_same_id(tmp_path: Path) -> None:
    """A transcript names a platform message by channel, account and id (bus.message_ref), not by chat, and
    Telegram numbers messages per chat and Slack's ts is unique per channel only: the same id in two chats is
    usual. A member deleting their message in one group must not retract the owner's message of that id in
    another; only the session the delete is routed to is looked at."""
    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel())
    elsewhere = {"peer_id": "g2"}

    async def main() -> None:
        await bus.publish(msg("the owner's plan: ship on friday", "1", sender="owner"))
        await bus.publish(replace(msg("my own words", "1", sender="u8"), **elsewhere))
        assert await bus.drain(20)
        await bus.publish(replace(msg("", "1", sender="u8", change="deleted"), **elsewhere))
        assert await bus.drain(20)

    asyncio.run(main())
    rendered = {p.name: render_transcript(p.read_text())[0] for p in rt.agent.sessions_dir.glob("*.jsonl")}
    [g1] = [r for r in rendered.values() if "g1" in r]
    [g2] = [r for r in rendered.values() if "g2" in r]
    assert "ship on friday" in g1 and RETRACTED_TEXT not in g1
    assert "my own words" not in g2 and RETRACTED_TEXT in g2


def test_slack_a_strangers_delete_of_the_same_ts_leaves_the_owners_message(tmp_path: Path) -> None:
    """A delete goes to the session its sender's messages go to: a stranger's, in their own DM channel, naming
    the ts of a message in the owner's DM (ts are unique per channel only), retracts nothing of the owner's."""
    async def main() -> None:
        async with slack_gateway(tmp_path) as g:
            ev, eid = g.fake.message(SECRET, user=OWNER, channel="D1")
            await g.fake.push(ev, eid)
            await wait_for(lambda: len(g.seen) == 1)
            assert await g.bus.drain(20)
            prev = {"type": "message", "user": "U9", "text": "hi", "ts": ev["ts"]}
            await g.fake.push({"type": "message", "subtype": "message_deleted", "channel": "D9",
                               "channel_type": "im", "hidden": True, "deleted_ts": ev["ts"], "event_ts": "1.6",
                               "previous_message": prev}, "EvDelStranger")
            await wait_for(lambda: ev_acked(g.fake))
            assert await g.bus.drain(20)
            ev, eid = g.fake.message("what did I say?", user=OWNER, channel="D1")
            await g.fake.push(ev, eid)
            await wait_for(lambda: len(g.seen) == 2)
            assert await g.bus.drain(20)
            sent = str([m.to_dict() for m in g.requests[-1].messages])
            assert "4711" in sent and RETRACTED_TEXT not in sent, sent

    run(main, timeout=90)


def test_deletes_in_chats_without_a_session_write_nothing(tmp_path: Path) -> None:
    """A delete is routed and looked for before any access check (a refused sender's too: nothing of theirs is
    run). Looking took the session's lock, whose file stays: a member of a channel the assistant does not
    answer in made a file in the sessions folder for every thread they deleted a message in, without end."""
    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel(), admit=lambda _m, _a: Admission(False))

    async def main() -> None:
        for n in range(20):
            await bus.publish(replace(msg("", str(n), sender="stranger", change="deleted"), peer_id=f"thread-{n}"))
        assert await bus.drain(20)

    asyncio.run(main())
    assert not rt.agent.sessions_dir.exists() or list(rt.agent.sessions_dir.iterdir()) == []


def test_discord_a_message_deleted_in_an_archived_thread_goes_to_the_threads_session(tmp_path: Path) -> None:
    """discord.py drops a thread from its cache when it is archived; a delete in it then looked like one in a
    channel of the thread's id, routed to a session that never had the message, and was lost."""
    async def main() -> None:
        fake = await DMsDiscord().start()
        old = patch_discord(fake)
        try:
            async with discord_account(fake, tmp_path) as (_ch, sink):
                mid = await fake.say(SECRET, thread=True, mention_bot=True)
                said = await sink.next()
                assert (said.peer_id, said.thread_id) == (TEXT_CHANNEL, THREAD)
                thread = next(t for t in fake._guild()["threads"] if t["id"] == THREAD)
                await fake._dispatch("THREAD_UPDATE", {**thread, "thread_metadata": {
                    **thread["thread_metadata"], "archived": True}})
                await fake._dispatch("MESSAGE_DELETE", {"id": mid, "channel_id": THREAD, "guild_id": GUILD_ID})
                deleted = await sink.next()
                assert (deleted.change, deleted.peer_kind, deleted.peer_id, deleted.thread_id, deleted.message_id) == \
                    ("deleted", "group", TEXT_CHANNEL, THREAD, mid)
        finally:
            unpatch(old)
            await fake.stop()

    run(main, timeout=60)


def test_a_delete_during_a_long_turn_is_on_disk_when_the_platform_hears_it_was_handled(tmp_path: Path) -> None:
    """The channel tells the platform an event was handled once publish returns (Slack's ack; the seen ids are
    saved): a retraction left for after the running turn was lost when Hermit was killed (kill -9, OOM, power)
    during that turn, and the deleted text stayed in use after the restart. What is on disk when publish
    returns is what a kill leaves."""
    from hermit.sessions.transcript import MessageEntry, read_transcript

    started, release = threading.Event(), threading.Event()

    def model(_req: ModelRequest) -> Reply:
        started.set()
        release.wait(20)
        return "noted"

    rt = runtime(tmp_path, model)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(msg(SECRET, "1"))
        await wait_for(started.is_set)  # its turn runs, its message recorded
        await bus.publish(msg("", "1", change="deleted"))
        try:
            [path] = rt.agent.sessions_dir.glob("*.jsonl")
            users = [e.message for e in read_transcript(path).entries
                     if isinstance(e, MessageEntry) and e.message.get("role") == "user"]
            assert str(users) and "4711" not in str(users) and RETRACTED_TEXT in str(users), users
        finally:
            release.set()
            assert await bus.drain(20)

    asyncio.run(main())


def test_a_delete_while_its_turn_is_starting_is_on_disk_before_the_turn_records_the_message(tmp_path: Path) -> None:
    """The same, for a message taken from the queue whose turn has not recorded it yet: the `retracted` entry is
    written at once, ahead of the message's line (it hides its message wherever it stands), so a kill before the
    turn is over loses nothing."""
    requests: list[ModelRequest] = []
    admit = HeldAdmission(5)  # the second message's check when its turn is about to start (after the first's
    # three: published, started, its reply sent): held there
    checking, go_on = admit.checking, admit.go_on

    def model(req: ModelRequest) -> Reply:
        requests.append(req)
        return "noted"

    rt = runtime(tmp_path, model)
    bus = make_bus(rt, RecordingChannel(), admit=admit)

    async def main() -> None:
        await bus.publish(msg("hello", "0"))
        assert await bus.drain(20)  # the session exists
        await bus.publish(msg(SECRET, "1"))
        await wait_for(checking.is_set)
        await bus.publish(msg("", "1", change="deleted"))
        try:
            [path] = rt.agent.sessions_dir.glob("*.jsonl")
            assert '"customType":"retracted"' in path.read_text().replace(" ", "")
        finally:
            go_on.set()
        assert await bus.drain(20)
        await ask_again(bus)

    asyncio.run(main())
    assert_retracted_for_the_next_turn(requests)


def test_a_message_that_comes_after_its_delete_is_never_answered(tmp_path: Path) -> None:
    """Webhooks come out of order (WhatsApp says so; a message Slack redelivers after a 500 can follow its own
    delete): the delete found nothing, was dropped, and the message it deleted was then answered and kept. Only
    the same chat's message of that id from the one who deleted it is held back."""
    seen: list[str] = []

    def model(req: ModelRequest) -> Reply:
        seen.append(last_user_text(req))
        return "noted"

    rt = runtime(tmp_path, model)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(msg("", "1", change="deleted"))
        await bus.publish(msg("", "2", sender="u8", change="deleted"))  # not u7's to delete
        assert await bus.publish(msg(SECRET, "1")) == "ignored"
        assert await bus.publish(msg("meet at 5", "2")) == "queued"
        assert await bus.publish(replace(msg("same id, another group", "1"), peer_id="g2")) == "queued"
        assert await bus.drain(20)

    asyncio.run(main())
    assert sorted(seen) == ["meet at 5", "same id, another group"]
    stored = "".join(p.read_text() for p in rt.agent.sessions_dir.glob("*.jsonl"))
    assert "4711" not in stored
