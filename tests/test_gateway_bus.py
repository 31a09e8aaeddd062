"""The bus: per-session FIFO, concurrency across sessions, bounded queues, reply shaping, shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from pathlib import Path

import pytest

from agenthelpers import fixed_clock
from gatewayhelpers import (
    RecordingChannel,
    allow_all,
    inbound,
    last_user_text,
    make_bus,
    route_dm_main_group_own,
    runtime,
)
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage, StreamDelta, Target, ToolActivity, TurnEnd, Typing
from hermit.channels.inbox import StagedFile
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.errors import ProviderError
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Admission, Bus
from hermit.gateway.replies import APOLOGY, BUSY, NOT_PROCESSED
from hermit.gateway.supervisor import Gateway, split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions.transcript import CustomEntry, read_transcript
from hermit.testing.scripted import FunctionModel, Reply


async def wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_one_turn_at_a_time_per_session_in_arrival_order_and_sessions_run_concurrently(tmp_path: Path) -> None:
    lock = threading.Lock()
    active: dict[str, int] = {}
    peak: dict[str, int] = {}
    seen: list[str] = []
    release = threading.Event()

    def model(req: ModelRequest) -> Reply:
        text = last_user_text(req)
        session = text.split(":")[0]
        with lock:
            active[session] = active.get(session, 0) + 1
            peak[session] = max(peak.get(session, 0), active[session])
            seen.append(text)
        release.wait(10)
        with lock:
            active[session] -= 1
        return f"re {text}"

    ch = RecordingChannel()
    bus = make_bus(runtime(tmp_path, model), ch)

    async def main() -> None:
        for i in range(3):
            assert await bus.publish(inbound(f"a:{i}", "own-a")) == "queued"
            assert await bus.publish(inbound(f"b:{i}", "own-b")) == "queued"
        # both sessions are inside a model call at the same time: different sessions run concurrently
        await wait_for(lambda: active.get("a") == 1 and active.get("b") == 1)
        assert bus.busy("agent:main:telegram:dm:own-a")
        release.set()
        await bus.drain(20)

    asyncio.run(main())
    assert peak == {"a": 1, "b": 1}  # never two turns of one session at once
    assert [t for t in seen if t.startswith("a")] == ["a:0", "a:1", "a:2"]
    assert [m.text for m in ch.messages("own-a")] == ["re a:0", "re a:1", "re a:2"]
    assert [m.text for m in ch.messages("own-b")] == ["re b:0", "re b:1", "re b:2"]


def test_a_full_queue_answers_busy_instead_of_growing(tmp_path: Path) -> None:
    release = threading.Event()

    def model(req: ModelRequest) -> Reply:
        release.wait(10)
        return "ok"

    ch = RecordingChannel()
    bus = make_bus(runtime(tmp_path, model), ch, queue_limit=2)

    async def main() -> list[str]:
        outcomes = [await bus.publish(inbound("first"))]
        await wait_for(lambda: bus.running() == 1)  # the first is running, so the queue holds the next two
        outcomes += [await bus.publish(inbound(f"m{i}")) for i in range(3)]
        release.set()
        await bus.drain(20)
        return outcomes

    assert asyncio.run(main()) == ["queued", "queued", "queued", "queue_full"]
    texts = [m.text for m in ch.messages()]
    assert texts.count(BUSY) == 1 and texts.count("ok") == 3


def test_silent_reply_sends_nothing_but_typing_and_end(tmp_path: Path) -> None:
    ch = RecordingChannel()
    bus = make_bus(runtime(tmp_path, lambda req: "NO_REPLY"), ch)

    async def main() -> None:
        await bus.publish(inbound("hello"))
        await bus.drain(10)

    asyncio.run(main())
    assert ch.messages() == []
    assert [type(i) for i in ch.items] == [Typing, Typing, TurnEnd]
    assert ch.ends()[0].status == "silent"


def test_failed_turn_sends_short_apology_and_logs_the_detail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def model(req: ModelRequest) -> Reply:
        return ProviderError("upstream exploded: secret detail 42", "retry later")

    ch = RecordingChannel()
    bus = make_bus(runtime(tmp_path, model), ch)

    async def main() -> None:
        await bus.publish(inbound("hello"))
        await bus.drain(10)

    with caplog.at_level(logging.ERROR, logger="hermit.gateway"):
        asyncio.run(main())
    msgs = ch.messages()
    assert [m.text for m in msgs] == [APOLOGY] and msgs[0].kind == "error"
    assert "secret detail 42" not in APOLOGY
    assert "upstream exploded: secret detail 42" in caplog.text
    assert ch.ends()[0].status == "error"


def test_long_reply_is_chunked_at_the_channel_limit(tmp_path: Path) -> None:
    reply = "x" * 250
    ch = RecordingChannel(max_chars=100)
    bus = make_bus(runtime(tmp_path, lambda req: reply), ch)

    async def main() -> None:
        await bus.publish(inbound("long please"))
        await bus.drain(10)

    asyncio.run(main())
    parts = [m.text for m in ch.messages()]
    assert len(parts) == 3 and all(len(p) <= 100 for p in parts) and "".join(parts) == reply


def test_streaming_channel_gets_deltas_and_tool_activity(tmp_path: Path) -> None:
    (tmp_path / "workspace" / "memory").mkdir(parents=True)
    calls = iter([{"tool_calls": [{"name": "read", "arguments": {"path": "nope.md"}}]}, "Found **nothing** there."])
    ch = RecordingChannel("webchat", streaming=True)
    bus = make_bus(runtime(tmp_path, lambda req: next(calls)), ch)

    async def main() -> None:
        await bus.publish(inbound("read it", channel="webchat", message_id="m1"))
        await bus.drain(10)

    asyncio.run(main())
    tools = [(i.name, i.status) for i in ch.items if isinstance(i, ToolActivity)]
    assert tools == [("read", "running"), ("read", "failed")]  # the file does not exist
    assert "".join(i.text for i in ch.items if isinstance(i, StreamDelta)) == "Found **nothing** there."
    assert ch.messages() == []  # streamed, so not sent again as a whole message
    assert all(i.target.reply_to == "m1" for i in ch.items)


def test_refused_sender_gets_the_policy_answer_and_the_agent_is_never_called(tmp_path: Path) -> None:
    called: list[str] = []

    def model(req: ModelRequest) -> Reply:
        called.append("x")
        return "hi"

    ch = RecordingChannel()
    bus = make_bus(runtime(tmp_path, model), ch, admit=lambda m, a: Admission(False, "Pairing code: ABCD2345", "pairing"))

    async def main() -> str:
        return await bus.publish(inbound("hello"))

    assert asyncio.run(main()) == "refused"
    assert called == []
    assert [(m.text, m.kind) for m in ch.messages()] == [("Pairing code: ABCD2345", "pairing")]


def test_group_sessions_are_sandboxed_and_never_see_memory_md(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\nThe vault code is PLUM-7731.\n", encoding="utf-8")
    systems: dict[str, str] = {}

    def model(req: ModelRequest) -> Reply:
        systems[last_user_text(req)] = req.system
        return "ok"

    rt = runtime(tmp_path, model)
    ch = RecordingChannel()
    bus = make_bus(rt, ch)

    async def main() -> None:
        await bus.publish(inbound("from the group", "g1", kind="group"))
        await bus.publish(inbound("from me"))
        await bus.drain(10)

    asyncio.run(main())
    assert "PLUM-7731" in systems["from me"]  # the main private session gets MEMORY.md
    assert "PLUM-7731" not in systems["from the group"]
    assert rt.sandboxed("agent:main:telegram:group:g1") and not rt.sandboxed("agent:main:main")
    assert rt.session("agent:main:telegram:group:g1") is not None


def test_scheduler_turns_queue_behind_user_messages_and_return_their_result(tmp_path: Path) -> None:
    order: list[str] = []
    release = threading.Event()

    def model(req: ModelRequest) -> Reply:
        text = last_user_text(req)
        order.append(text)
        if text == "user":
            release.wait(60)
        return f"re {text}"

    ch = RecordingChannel()
    bus = make_bus(runtime(tmp_path, model), ch)

    async def main() -> str:
        await bus.publish(inbound("user"))
        # The user's turn is at the model, held there (a running turn has yet to reach it: under load that
        # took longer than the 50 ms the heartbeat was given below, and the test saw order == []).
        await wait_for(lambda: order == ["user"] and bus.running() == 1)
        job = asyncio.create_task(bus.run_turn("main", "agent:main:main", "heartbeat", heartbeat=True))
        await wait_for(lambda: bus.status()["waiting"] == 1)  # queued behind it
        await asyncio.sleep(0.05)
        assert order == ["user"]  # the heartbeat waits for the user's turn
        release.set()
        result = await job
        await bus.deliver(Target("telegram", "default", "dm", "u1"), "delivered by cron")
        return result.reply

    assert asyncio.run(main()) == "re heartbeat"
    assert order == ["user", "heartbeat"]
    assert [m.text for m in ch.messages()] == ["re user", "delivered by cron"]



def test_while_shutting_down_only_senders_let_in_hear_that_hermit_is_restarting(tmp_path: Path) -> None:
    """Audit U: during the drain every message got "Hermit is restarting…" before routing and access control,
    so a stranger under an allowlist, a group not allowed and group chatter without a mention were all
    answered (telling outsiders what the bot is). Admission first; the notice only to those let in."""
    rt = runtime(tmp_path, lambda req: "never runs")
    ch = RecordingChannel()

    def admit(msg: InboundMessage, agent_id: str) -> Admission:
        return Admission(msg.peer_id == "owner", reason="allowlist: sender not allowed")

    bus = make_bus(rt, ch, admit=admit)

    async def main() -> None:
        bus.close_intake()
        assert await bus.publish(inbound("hi", peer="stranger")) == "refused"
        assert await bus.publish(inbound("chatter", peer="-100999", kind="group")) == "refused"
        assert await bus.publish(inbound("hello", peer="owner")) == "refused"

    asyncio.run(main())
    assert [(m.target.peer_id, m.text) for m in ch.messages()] == [("owner", NOT_PROCESSED)]


def test_a_sender_revoked_while_queued_hears_nothing_at_shutdown(tmp_path: Path) -> None:
    """A message queued behind a running turn is answered "not processed" at shutdown; its sender, revoked
    while it waited, was answered all the same (access is checked again, as when its turn would start)."""
    started, go_on = threading.Event(), threading.Event()
    revoked: set[str] = set()

    def model(req: ModelRequest) -> Reply:
        started.set()
        go_on.wait(10)
        return "done"

    def admit(msg: InboundMessage, agent_id: str) -> Admission:
        return Admission(msg.peer_id not in revoked, reason="pairing: approval revoked")

    rt = runtime(tmp_path, model)
    ch = RecordingChannel()
    bus = make_bus(rt, ch, admit=admit)

    async def main() -> None:
        await bus.publish(inbound("work", peer="owner"))
        await bus.publish(inbound("queued", peer="contact"))
        await bus.publish(inbound("queued too", peer="owner2"))
        await wait_for(started.is_set)
        revoked.add("contact")
        bus.close_intake()
        go_on.set()
        assert await bus.drain(10)

    asyncio.run(main())
    notices = [(m.target.peer_id, m.text) for m in ch.messages() if m.text == NOT_PROCESSED]
    assert notices == [("owner2", NOT_PROCESSED)]


@pytest.mark.parametrize("replays", [False, True], ids=["discord", "telegram-journal"])
def test_files_of_messages_queued_at_shutdown_are_deleted_unless_the_channel_replays(tmp_path: Path,
                                                                                   replays: bool) -> None:
    """A queued message's files are filed when its turn starts; one the gateway stopped before running kept
    them staged for Telegram's journal to replay, but Discord, Slack and WhatsApp replay nothing: their files
    stayed in <state>/inbox for good (audit R2). They are deleted now unless the channel replays."""
    inbox = tmp_path / "state-inbox"
    started, go_on = threading.Event(), threading.Event()

    def model(req: ModelRequest) -> Reply:
        started.set()
        go_on.wait(10)
        return "ok"

    rt = runtime(tmp_path, model)
    ch = RecordingChannel("discord")
    ch.capabilities = dataclasses.replace(ch.capabilities, replays=replays)
    bus = make_bus(rt, ch)
    with StagedFile(inbox, ("discord", "default", "c1", "m2"), "contract.pdf") as f:
        f.write(b"contract draft")
    queued = dataclasses.replace(inbound("queued behind", "owner", channel="discord"),
                                 attachments=(f.attachment("document", "contract.pdf", "application/pdf"),))

    async def main() -> None:
        await bus.publish(inbound("work", "owner", channel="discord"))
        await wait_for(started.is_set)
        assert await bus.publish(queued) == "queued"
        bus.close_intake()
        go_on.set()
        assert await bus.drain(10)

    asyncio.run(main())
    assert [m.text for m in ch.messages()] == ["ok", NOT_PROCESSED]
    assert len(list(inbox.iterdir())) == (1 if replays else 0)

def test_cancelled_turn_is_marked_interrupted_in_a_valid_transcript(tmp_path: Path) -> None:
    started = threading.Event()
    go_on = threading.Event()

    def model(req: ModelRequest) -> Reply:
        started.set()
        go_on.wait(10)
        return {"tool_calls": [{"name": "read", "arguments": {"path": "a.md"}}]}

    rt = runtime(tmp_path, model)
    ch = RecordingChannel()
    bus = make_bus(rt, ch)

    async def main() -> None:
        await bus.publish(inbound("work"))
        await bus.publish(inbound("queued behind"))
        await wait_for(started.is_set)
        bus.close_intake()
        assert await bus.publish(inbound("too late")) == "refused"
        assert bus.host.cancel_all() == 1
        go_on.set()
        assert await bus.drain(10)

    asyncio.run(main())
    assert ch.ends()[0].status == "interrupted"
    assert [m.text for m in ch.messages()] == [NOT_PROCESSED, NOT_PROCESSED]  # "too late" and "queued behind"
    record = rt.session("agent:main:main")
    assert record is not None
    read = read_transcript(rt.store.transcript_path(record.session_id))
    assert read.problems == ()
    assert any(isinstance(e, CustomEntry) and e.custom_type == "interrupted" for e in read.entries)


def test_the_gateway_routes_by_dm_scope_and_checks_access_before_the_agent(tmp_path: Path) -> None:
    loaded = build_config({
        "agents": {"defaults": {"timezone": "Europe/Paris", "session": {"dm_scope": "per-channel-peer"},
                                "mention_patterns": ["\\bhermit\\b"]}},
        "channels": {"telegram": {"accounts": {"default": {
            "dm_policy": "pairing", "allow_from": ["4242"], "group_policy": "allowlist", "groups": ["g1"]}}}},
    }, StatePaths(tmp_path))
    asked: list[str] = []

    def model(req: ModelRequest) -> Reply:
        asked.append(last_user_text(req))
        return "hello"

    rt = AgentRuntime(loaded.agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=tmp_path)
    ch = RecordingChannel()
    gw = Gateway(loaded, tmp_path, {}, {"main": rt}, "t" * 40, host="127.0.0.1", port=0, channels=[ch],
                 service_factories=[])

    async def main() -> list[str]:
        out = [await gw.bus.publish(inbound("hi", "stranger")),
               await gw.bus.publish(inbound("hi again", "stranger")),
               await gw.bus.publish(inbound("hi from a friend", "4242")),
               await gw.bus.publish(inbound("chatter", "g1", kind="group")),
               await gw.bus.publish(inbound("hey Hermit, lunch?", "g1", kind="group")),
               await gw.bus.publish(inbound("hermit?", "g2", kind="group"))]
        await gw.bus.drain(10)
        return out

    assert asyncio.run(main()) == ["refused", "refused", "queued", "refused", "queued", "refused"]
    # Strangers never reach the agent (the two sessions run concurrently, so their order is free).
    assert sorted(asked) == sorted(["hi from a friend", "hey Hermit, lunch?"])
    code_msgs = [m for m in ch.messages("stranger")]
    assert len(code_msgs) == 1 and code_msgs[0].kind == "pairing" and "hermit pairing approve" in code_msgs[0].text
    keys = {r.key for r in rt.store.list()}
    assert keys == {"agent:main:telegram:dm:4242", "agent:main:telegram:group:g1"}
    assert all(rt.sandboxed(k) for k in keys)  # neither is the main session


def test_attachments_wait_in_the_state_dir_and_are_filed_where_the_session_works(tmp_path: Path) -> None:
    """A stranger's file is deleted; the owner's goes to the workspace inbox, a group's to its room's inbox
    (never among the owner's files), within the room's quota."""
    import dataclasses

    from hermit.channels.base import Attachment

    inbox = tmp_path / "inbox"
    inbox.mkdir()

    def attached(msg_text: str, peer: str, name: str, size: int = 10, kind: str = "dm") -> object:
        f = inbox / name
        f.write_bytes(b"x" * size)
        msg = inbound(msg_text, peer, kind=kind)  # type: ignore[arg-type]
        st = f.stat()  # the identity a channel records when it stages a file (channels/inbox.py)
        return dataclasses.replace(msg, attachments=(Attachment("document", str(f), name,
                                                                staged=(st.st_dev, st.st_ino)),))

    def admit(msg: object, agent_id: str) -> Admission:
        return Admission(getattr(msg, "sender_id", "") != "stranger", None, "test")

    ch = RecordingChannel()
    rt = runtime(tmp_path, lambda req: "ok", sandbox={"room_mb": 1})
    bus = make_bus(rt, ch, admit=admit)

    async def main() -> None:
        assert await bus.publish(attached("hi", "stranger", "from-stranger.txt")) == "refused"  # type: ignore[arg-type]
        assert await bus.publish(attached("mine", "owner", "from-owner.txt")) == "queued"  # type: ignore[arg-type]
        assert await bus.publish(attached("ours", "g1", "from-group.txt", kind="group")) == "queued"  # type: ignore[arg-type]
        assert await bus.publish(attached("big", "g1", "too-big.bin", 2 << 20, kind="group")) == "queued"  # type: ignore[arg-type]
        await bus.drain(20)

    asyncio.run(main())
    ws = rt.agent.workspace
    room = rt.confinement.room("agent:main:telegram:group:g1").path
    assert list(inbox.iterdir()) == []  # nothing waits: filed or deleted
    assert (ws / "inbox" / "from-owner.txt").exists() and not (ws / "inbox" / "from-stranger.txt").exists()
    assert (room / "inbox" / "from-group.txt").read_bytes() == b"x" * 10
    assert not (ws / "inbox" / "from-group.txt").exists() and not (room / "inbox" / "too-big.bin").exists()


def test_status_shows_the_live_queue_as_waiting_and_lifetime_counts_apart(tmp_path: Path) -> None:
    release = threading.Event()

    def model(req: ModelRequest) -> Reply:
        release.wait(10)
        return "ok"

    bus = make_bus(runtime(tmp_path, model), RecordingChannel(), queue_limit=4)

    async def main() -> tuple[dict[str, object], dict[str, object]]:
        await bus.publish(inbound("first"))
        await wait_for(lambda: bus.running() == 1)
        await bus.publish(inbound("second"))
        await bus.publish(inbound("third"))
        during = bus.status()
        release.set()
        await bus.drain(20)
        return during, bus.status()

    during, after = asyncio.run(main())
    assert during["waiting"] == 2 and during["turns_running"] == 1
    assert during["since_start"] == {"accepted": 3, "refused": 0, "queue_full": 0, "ignored": 0, "turns": 1}
    # Once everything ran nothing waits, whatever the lifetime count says.
    assert after["waiting"] == 0 and after["turns_running"] == 0
    assert after["since_start"]["accepted"] == 3 and after["since_start"]["turns"] == 3  # type: ignore[index]


def test_two_agents_sessions_of_one_name_are_two_queues(tmp_path: Path) -> None:
    """A key naming no agent (`cron:<job>`, a CLI session `notes`) may be in two agents' stores: they are
    two sessions, so one agent's long turn does not hold the other's back, and `busy` can tell them apart."""
    lock = threading.Lock()
    active: list[str] = []
    release = threading.Event()

    def model(req: ModelRequest) -> Reply:
        with lock:
            active.append(last_user_text(req))
        release.wait(10)
        return "done"

    host = AgentHost({"main": runtime(tmp_path / "a", model), "work": runtime(tmp_path / "b", model)})
    bus = Bus(host, route=route_dm_main_group_own, admit=allow_all, channels={}, chunk=split_chunks)

    async def main() -> None:
        turns = [asyncio.create_task(bus.run_turn(agent, "cron:daily", f"{agent} job")) for agent in ("main", "work")]
        try:
            await wait_for(lambda: len(active) == 2)  # both inside a model call at once
            assert bus.busy("cron:daily", "work") and bus.busy("cron:daily")
            assert not bus.busy("cron:weekly")
        finally:
            release.set()
        assert [r.reply for r in await asyncio.gather(*turns)] == ["done", "done"]
        assert not bus.busy("cron:daily", "main")

    asyncio.run(main())
    assert sorted(active) == ["main job", "work job"]
