"""Forum topics of one Telegram supergroup are sessions of their own, running concurrently: a turn ending in
one topic must not take another topic's unanswered message out of the journal, or a crash loses it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from agenthelpers import fixed_clock
from channelhelpers import FAST, QueueSink, run
from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import last_user_text
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import InboundMessage
from hermit.channels.pairing import PairingStore
from hermit.channels.telegram import TelegramChannel
from hermit.channels.telegram_state import PollState, token_dir
from hermit.config import StatePaths, load_config
from hermit.config.schema import TelegramAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import admit_with, route_with, split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key
from hermit.testing.scripted import FunctionModel

TOKEN = "123:TEST"
CONFIG = """
channels:
  telegram:
    accounts:
      default: {owners: ["42"], group_policy: open, require_mention: false}
"""


def message(mid: int, chat: str = "-100777", topic: int | None = None) -> InboundMessage:
    return InboundMessage("telegram", "default", "group", chat, "7", f"m{mid}", message_id=str(mid),
                          topic_id=str(topic) if topic else None, meta={"chat_id": chat})


def test_a_turn_ending_clears_only_its_own_topics_earlier_messages(tmp_path: Path) -> None:
    state = PollState(tmp_path / "state.json")
    for update, (mid, chat, topic) in enumerate([(101, "-100777", 10), (102, "-100777", 20), (103, "-100777", 10),
                                                 (104, "-100777", None), (105, "-100777", None), (50, "-100888", 10)]):
        state.receive(update, message(mid, chat, topic))

    def journaled() -> list[str]:
        return sorted(m.message_id for m in PollState(tmp_path / "state.json").inflight.values())

    state.done_through("-100777", "102")  # topic 20 answered: topic 10's 101, still running, stays
    assert journaled() == ["101", "103", "104", "105", "50"]
    state.done_through("-100777", "103")  # topic 10's turn for 103 ends: 101 before it in that topic is done
    assert journaled() == ["104", "105", "50"]
    state.done_through("-100777", "105")  # outside any topic: the chat's earlier messages there go with it
    assert journaled() == ["50"]
    state.done_through("-100888", "999")  # a message the journal never held clears nothing
    assert journaled() == ["50"]


def test_a_crash_while_one_topic_runs_replays_it_after_another_topic_was_answered(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(CONFIG, encoding="utf-8")
    loaded = load_config(StatePaths(tmp_path))
    access = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    started, release = threading.Event(), threading.Event()

    def model(request: ModelRequest) -> str:
        text = last_user_text(request)
        if text.startswith("topic A"):
            started.set()
            release.wait(20)  # a long turn (a slow model, tools) in topic A
        return "ok"

    rt = AgentRuntime(loaded.agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=tmp_path)
    topic_b = group_session_key("main", "telegram", "-100777", None, topic_id="20")

    def cfg(fake: FakeTelegram) -> TelegramAccountConfig:
        return TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1, group_policy="open",
                                     require_mention=False)

    async def until(cond: object) -> None:
        for _ in range(2000):
            if cond():  # type: ignore[operator]
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached in time")

    async def first_run() -> bytes:
        fake = FakeTelegram(TOKEN)
        await fake.start()
        ch = TelegramChannel("default", cfg(fake), TOKEN, state_dir=tmp_path / "state", inbox_dir=tmp_path / "inbox",
                             policy=FAST, reconnect_max_delay=0.05)
        bus = Bus(AgentHost({"main": rt}), route=route_with(Router.from_config(loaded), access),
                  admit=admit_with(access, loaded), channels={("telegram", "default"): ch}, chunk=split_chunks)
        await ch.start(bus)
        try:
            fake.push_message(chat_id=-100777, from_id=7, chat_type="supergroup", topic_id=10, text="topic A: plan")
            await asyncio.to_thread(started.wait, 10)
            fake.push_message(chat_id=-100777, from_id=8, chat_type="supergroup", topic_id=20, text="topic B: hi")
            # topic B answered and its turn over (TurnEnd delivered) while topic A's still runs
            await until(lambda: len(fake.sent()) == 1 and bus.status()["since_start"]["turns"] == 2
                        and not bus.busy(topic_b))
            assert bus.running() == 1
            # the process dies now: this file is what the next start finds
            return (token_dir(tmp_path / "state", TOKEN) / "state.json").read_bytes()
        finally:
            release.set()
            await bus.drain(20)
            await ch.stop()
            await fake.stop()

    async def restart(journal: bytes) -> InboundMessage:
        path = token_dir(tmp_path / "restarted", TOKEN) / "state.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(journal)
        fake = FakeTelegram(TOKEN)
        await fake.start()
        ch = TelegramChannel("default", cfg(fake), TOKEN, state_dir=tmp_path / "restarted",
                             inbox_dir=tmp_path / "inbox", policy=FAST, reconnect_max_delay=0.05)
        sink = QueueSink()
        await ch.start(sink)
        try:
            return await sink.next()
        finally:
            await ch.stop()
            await fake.stop()

    journal = run(first_run)
    tmp_state = tmp_path / "crash.json"
    tmp_state.write_bytes(journal)
    assert [(m.topic_id, m.text) for m in PollState(tmp_state).inflight.values()] == [("10", "topic A: plan")]
    replayed = run(lambda: restart(journal))
    assert (replayed.topic_id, replayed.text) == ("10", "topic A: plan")
