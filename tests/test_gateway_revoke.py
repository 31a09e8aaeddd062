"""A contact revoked while their messages wait in the queue gets none of them run: access is checked again
when a queued message's turn is about to start, and the turn running at the revoke has its reply withheld (access is
asked again before a reply is sent) (real config, pairing store, access control, router and bus)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock
from channelhelpers import FAST, run
from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import RecordingChannel, last_user_text
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import Channel, InboundMessage, OutboundMessage
from hermit.channels.pairing import PairingStore
from hermit.channels.telegram import TelegramChannel
from hermit.channels.telegram_state import PollState, token_dir
from hermit.config import StatePaths, load_config
from hermit.config.schema import TelegramAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import admit_with, route_with, split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions.transcript import MessageEntry, read_transcript
from hermit.testing.scripted import FunctionModel

TOKEN = "123:TEST"
CONFIG = """
channels:
  telegram:
    accounts:
      personal: {owners: ["42"], dm_policy: pairing}
      family: {dm_policy: allowlist}
"""


class Setup:
    """A gateway's bus over the real access control; the model holds the first turn until `release`."""

    def __init__(self, home: Path, account: str) -> None:
        (home / "hermit.yaml").write_text(CONFIG, encoding="utf-8")
        loaded = load_config(StatePaths(home))
        self.store = PairingStore(home)
        access = AccessControl(loaded.config.channels, self.store)
        self.started, self.release = threading.Event(), threading.Event()
        self.asked: list[str] = []

        def model(request: ModelRequest) -> str:
            text = last_user_text(request)
            self.asked.append(text)
            if text == "first":
                self.started.set()
                self.release.wait(20)
            return f"answer to {text}"

        self.rt = AgentRuntime(loaded.agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
        self.route, self.admit = route_with(Router.from_config(loaded), access), admit_with(access, loaded)
        self.account = account
        self.key = f"agent:main:telegram:{account}:dm:555"

    def bus_over(self, channel: Channel) -> Bus:
        return Bus(AgentHost({"main": self.rt}), route=self.route, admit=self.admit,
                   channels={("telegram", self.account): channel}, chunk=split_chunks)

    def approve_contact(self) -> None:
        request = self.store.request("telegram", self.account, "555", "Mallory", None)
        assert request is not None
        self.store.approve("telegram", request.code)


def test_messages_queued_before_a_revoke_run_no_turn_and_the_sender_gets_a_fresh_code(tmp_path: Path) -> None:
    """Through the real Telegram adapter (its journal, its staged files) against the fake Bot API."""
    s = Setup(tmp_path, "personal")
    s.approve_contact()
    journal = token_dir(tmp_path / "state", TOKEN) / "state.json"

    async def main() -> list[dict[str, Any]]:
        fake = FakeTelegram(TOKEN)
        await fake.start()
        cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
        channel = TelegramChannel("personal", cfg, TOKEN, state_dir=tmp_path / "state", inbox_dir=tmp_path / "inbox",
                                  policy=FAST, reconnect_max_delay=0.05)
        bus = s.bus_over(channel)
        await channel.start(bus)
        try:
            fake.push_message(chat_id=555, text="first")
            await asyncio.to_thread(s.started.wait, 10)  # the first turn is inside the model
            fake.push_message(chat_id=555, text="second", document=("plans.txt", b"the plan"))
            fake.push_message(chat_id=555, text="third")
            await until(lambda: bus.status()["waiting"] == 2)
            # what `hermit pairing revoke telegram 555` does, while the gateway runs
            assert [a.sender_id for a in await asyncio.to_thread(s.store.revoke, "telegram", "555")] == ["555"]
            s.release.set()
            assert await bus.drain(20)
            return fake.sent()
        finally:
            await channel.stop()
            await fake.stop()

    sent = run(main)
    assert s.asked == ["first"]  # the queued messages never reached the model
    texts = [m["text"] for m in sent]
    # The first turn ran, but its answer is not sent: the sender lost access while it ran (kept in the transcript).
    # They are now a stranger's messages: one pairing code (the one the owner sees), never two.
    [pending] = s.store.pending("telegram")
    assert len(texts) == 1 and pending.code in texts[0] and pending.sender_id == "555"
    # The file that came with a dropped message is deleted, never filed into the contact's room.
    assert list((tmp_path / "inbox").iterdir()) == []
    room_inbox = s.rt.confinement.room(s.key).path / "inbox"
    assert not room_inbox.exists() or list(room_inbox.iterdir()) == []
    # Every message is finished for the channel: nothing is left in Telegram's journal to replay.
    assert PollState(journal).inflight == {}
    record = s.rt.session(s.key)
    assert record is not None
    said = [e.message for e in read_transcript(s.rt.store.transcript_path(record.session_id)).entries
            if isinstance(e, MessageEntry)]
    assert [d["role"] for d in said] == ["user", "assistant"]  # the first message and its answer only


def test_under_allowlist_a_revoked_contacts_queued_messages_are_dropped_without_a_word(tmp_path: Path) -> None:
    s = Setup(tmp_path, "family")
    s.approve_contact()
    channel = RecordingChannel("telegram", "family")
    bus = s.bus_over(channel)

    def message(text: str, mid: str) -> InboundMessage:
        return InboundMessage("telegram", "family", "dm", "555", "555", text, message_id=mid)

    async def main() -> None:
        assert await bus.publish(message("first", "1")) == "queued"
        await asyncio.to_thread(s.started.wait, 10)
        assert await bus.publish(message("second", "2")) == "queued"
        assert await bus.publish(message("third", "3")) == "queued"
        await asyncio.to_thread(s.store.revoke, "telegram", "555")
        s.release.set()
        assert await bus.drain(20)

    run(main)
    assert s.asked == ["first"]
    # The first turn ran, but its answer is not sent: revoked while it ran.
    assert [m.text for m in channel.items if isinstance(m, OutboundMessage)] == []
    assert s.store.pending("telegram") == []
    # each dropped message still ends (silently) for the channel
    assert [(e.target.reply_to, e.status) for e in channel.ends()] == [("1", "silent"), ("2", "silent"),
                                                                       ("3", "silent")]
    assert bus.status()["since_start"]["turns"] == 1


async def until(cond: Callable[[], bool]) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")
