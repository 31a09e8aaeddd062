"""The bound on an agent's concurrent turns (gateway/turn_slots.py, `max_concurrent_turns`): through a real
gateway (config, live access and routing, the bus) and the real OpenAI-compatible adapter over HTTP to the fake
provider on 127.0.0.1, whose answers are held per turn until the test lets each go."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import fixed_clock
from channelhelpers import run
from gatewayhelpers import RecordingChannel, inbound
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.cli.gateway import slot_lines
from hermit.config.load import build_config, load_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError
from hermit.gateway.replies import APOLOGY, NOT_PROCESSED
from hermit.gateway.supervisor import Gateway
from hermit.gateway.turn_slots import TurnSlots
from hermit.models.registry import build_model
from hermit.testing import FakeProvider

OWNER = "1000"
CONTACTS = ("2001", "2002", "2003", "2004")


class HeldProvider(FakeProvider):
    """The fake provider with each turn's answer held: a request whose last message names `tag` sets
    `arrived[tag]` and is answered ("re <tag>", or the step given for it) once `go[tag]` is set. `held` counts
    requests held now; `peak` the most held at once; `started` the tags in the order they came."""

    def __init__(self, tags: tuple[str, ...], errors: tuple[str, ...] = ()) -> None:
        super().__init__([{"error": 500, "message": "boom", "repeat": True, "match": {"contains": t}} if t in errors
                          else {"text": f"re {t}", "repeat": True, "match": {"contains": t}} for t in tags])
        self.tags = tags
        self.arrived = {t: threading.Event() for t in tags}
        self.go = {t: threading.Event() for t in tags}
        self.started: list[str] = []
        self.held = self.peak = 0
        self._count = threading.Lock()

    def _take_step(self, api: str, raw: str, model: str) -> Any:
        last = json.dumps(json.loads(raw)["messages"][-1])
        tag = next((t for t in self.tags if t in last), None)
        if tag is not None:
            with self._count:
                self.started.append(tag)
                self.held += 1
                self.peak = max(self.peak, self.held)
            self.arrived[tag].set()
            self.go[tag].wait(60)
            with self._count:
                self.held -= 1
        return super()._take_step(api, raw, model)

    def let_all_go(self) -> None:
        for ev in self.go.values():
            ev.set()


def gateway(home: Path, provider: FakeProvider, bound: int = 2) -> tuple[Gateway, RecordingChannel]:
    loaded = build_config({
        "agents": {"defaults": {"model": "fake/model-x", "timezone": "Europe/Paris", "max_concurrent_turns": bound,
                                "memory_search": {"provider": "none"}}},
        "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url,
                                          "max_retries": 0}}},
        "channels": {"telegram": {"accounts": {"default": {"owners": [OWNER], "allow_from": list(CONTACTS),
                                                           "group_policy": "open", "require_mention": False}}}},
    }, StatePaths(home))
    model = build_model("fake/model-x", loaded.config.models, {}, sleep=lambda s: None)
    rt = AgentRuntime(loaded.agent(), model, clock=fixed_clock, fsync=False, home=home)
    ch = RecordingChannel()
    gw = Gateway(loaded, home, {}, {"main": rt}, "t" * 40, host="127.0.0.1", port=0, channels=[ch],
                 service_factories=[])
    return gw, ch


async def until(cond: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in time: {what}")
        await asyncio.sleep(0.01)


async def arrives(provider: HeldProvider, tag: str) -> None:
    if not await asyncio.to_thread(provider.arrived[tag].wait, 20):
        raise AssertionError(f"{tag}'s turn never reached the model (started: {provider.started})")


def waiting(gw: Gateway) -> int:
    """Turns waiting for one of the agent's slots now (none before the bound existed)."""
    slots = gw.bus.status().get("turn_slots", {}).get("main")
    return sum(slots["waiting"].values()) if slots else 0


async def lined_up(gw: Gateway, provider: HeldProvider, n: int, bound: int = 2) -> None:
    """Until `n` turns wait for a slot — or more than `bound` reached the model at once, which fails."""
    await until(lambda: waiting(gw) == n or provider.held > bound, f"{n} turns waiting for a slot")
    assert provider.held <= bound, f"{provider.started} all started at once: no bound on concurrent turns"


def dm(text: str, sender: str, message_id: str = "") -> InboundMessage:
    return inbound(text, sender, message_id=message_id)


def test_a_third_contacts_turn_waits_until_one_of_two_finishes(tmp_path: Path) -> None:
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                assert await gw.bus.publish(dm(f"hello {tag}", who)) == "queued"
                await arrives(provider, tag)
            assert await gw.bus.publish(dm("hello tag-c3", CONTACTS[2])) == "queued"
            await lined_up(gw, provider, 1)
            assert not provider.arrived["tag-c3"].is_set() and gw.bus.running() == 2
            # the wait is visible: `hermit gateway status --json` shows it by kind
            assert gw.bus.status()["turn_slots"]["main"] == {
                "limit": 2, "running": 2, "past_overdue": 0, "past_lowered": 0, "overdue": 0,
                "waiting": {"owner": 0, "scheduled": 0, "contact": 1}}
            assert slot_lines(gw.bus.status()) == [  # and `hermit gateway status` in words
                "  agent main: 2 of 2 turn slots in use, waiting: owner 0, scheduled 0, contacts 1"]
            provider.go["tag-c1"].set()
            await arrives(provider, "tag-c3")
            # c3's model call started only once c1's turn was over (its reply sent, its turn ended)
            assert [m.text for m in ch.messages(CONTACTS[0])] == ["re tag-c1"] and ch.ends()[0].status == "done"
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert provider.peak == 2
        assert [m.text for m in ch.messages(CONTACTS[2])] == ["re tag-c3"]

    with provider:
        run(main)


def test_the_owners_turn_goes_ahead_of_contacts_already_waiting(tmp_path: Path) -> None:
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3", "tag-c4", "tag-own"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            await gw.bus.publish(dm("hi tag-c4", CONTACTS[3]))
            await lined_up(gw, provider, 2)
            await gw.bus.publish(dm("me first? tag-own", OWNER))  # the owner's DM: the main session
            await lined_up(gw, provider, 3)
            provider.go["tag-c1"].set()
            await arrives(provider, "tag-own")  # the freed slot went to the owner, not to c3 who came first
            assert not provider.arrived["tag-c3"].is_set()
            provider.go["tag-c2"].set()
            await arrives(provider, "tag-c3")  # then contacts, first come first served
            assert not provider.arrived["tag-c4"].is_set()
            provider.go["tag-own"].set()
            await arrives(provider, "tag-c4")
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert provider.started[2:] == ["tag-own", "tag-c3", "tag-c4"] and provider.peak == 2
        assert [m.text for m in ch.messages(OWNER)] == ["re tag-own"]

    with provider:
        run(main)


def test_the_owners_message_in_a_group_goes_ahead_of_its_other_members(tmp_path: Path) -> None:
    """Whose turn it is goes by the sender (hermit.yaml's owners), not by the chat: the owner's message in a
    group is admitted before a member's in another group and a contact's DM that came first."""
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-member", "tag-c3", "tag-own"))

    def group(text: str, chat: str, sender: str) -> InboundMessage:
        return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id=chat,
                              sender_id=sender, text=text)

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)
            assert await gw.bus.publish(group("hi tag-member", "-100", "3001")) == "queued"
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            await lined_up(gw, provider, 2)
            assert await gw.bus.publish(group("hi all tag-own", "-200", OWNER)) == "queued"
            await lined_up(gw, provider, 3)
            assert gw.bus.status()["turn_slots"]["main"]["waiting"] == {"owner": 1, "scheduled": 0, "contact": 2}
            provider.go["tag-c1"].set()
            await arrives(provider, "tag-own")
            provider.go["tag-c2"].set()
            await arrives(provider, "tag-member")
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert provider.started[2:] == ["tag-own", "tag-member", "tag-c3"] and provider.peak == 2

    with provider:
        run(main)


def test_a_waiting_turn_given_up_leaves_its_place_to_the_next(tmp_path: Path) -> None:
    """Deleted by its sender, or a scheduled run its scheduler gave up on (a job's timeout), a turn waiting for a
    slot leaves the line: it never reaches the model, and the next turn gets the slot."""
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3", "tag-c4", "tag-job"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)
            job = asyncio.create_task(gw.bus.run_turn("main", "cron:nightly", "run tag-job"))
            await lined_up(gw, provider, 1)
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2], message_id="m3"))
            await gw.bus.publish(dm("hi tag-c4", CONTACTS[3]))
            await lined_up(gw, provider, 3)
            job.cancel()
            deleted = InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id=CONTACTS[2],
                                     sender_id=CONTACTS[2], text="", message_id="m3", change="deleted")
            assert await gw.bus.publish(deleted) == "ignored"
            await lined_up(gw, provider, 1)  # both left the line at once; c4 waits alone
            assert gw.bus.status()["turn_slots"]["main"]["waiting"] == {"owner": 0, "scheduled": 0, "contact": 1}
            provider.go["tag-c1"].set()
            await arrives(provider, "tag-c4")
            provider.let_all_go()
            assert await gw.bus.drain(20)
            with pytest.raises(asyncio.CancelledError):
                await job
        finally:
            provider.let_all_go()
        assert sorted(provider.started) == ["tag-c1", "tag-c2", "tag-c4"]  # neither given-up turn ran
        assert ch.messages(CONTACTS[2]) == [] and [e.status for e in ch.ends() if e.target.peer_id == CONTACTS[2]] == [
            "silent"]
        assert gw.bus.status()["turn_slots"]["main"] == {
            "limit": 2, "running": 0, "past_overdue": 0, "past_lowered": 0, "overdue": 0,
            "waiting": {"owner": 0, "scheduled": 0, "contact": 0}}

    with provider:
        run(main)


def test_stopping_the_gateway_lets_waiting_turns_go_unstarted(tmp_path: Path) -> None:
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            await lined_up(gw, provider, 1)
            gw.bus.close_intake()
            # told at once, while the two running turns still run: not after them
            await until(lambda: [m.text for m in ch.messages(CONTACTS[2])] == [NOT_PROCESSED], "c3 told")
            assert waiting(gw) == 0 and gw.bus.running() == 2
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert "tag-c3" not in provider.started

    with provider:
        run(main)


def test_a_failed_turn_gives_back_its_slot(tmp_path: Path) -> None:
    """A turn whose model call fails (a 500: the contact gets the apology, the scheduler the error) frees its
    slot for the next waiting turn, as one that finished does."""
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3", "tag-job"), errors=("tag-c1", "tag-job"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            job = asyncio.create_task(gw.bus.run_turn("main", "cron:nightly", "run tag-job"))
            await arrives(provider, "tag-job")
            await gw.bus.publish(dm("hi tag-c1", CONTACTS[0]))
            await arrives(provider, "tag-c1")
            await gw.bus.publish(dm("hi tag-c2", CONTACTS[1]))
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            await lined_up(gw, provider, 2)
            provider.go["tag-c1"].set()  # answered 500: the turn fails
            await arrives(provider, "tag-c2")
            assert [m.text for m in ch.messages(CONTACTS[0])] == [APOLOGY]
            provider.go["tag-job"].set()  # fails too: the error goes to the scheduler
            with pytest.raises(Exception, match="boom"):
                await job
            await arrives(provider, "tag-c3")
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert provider.peak == 2
        assert gw.bus.status()["turn_slots"]["main"]["running"] == 0

    with provider:
        run(main)


def test_scheduled_turns_never_take_every_slot(tmp_path: Path) -> None:
    """Cron jobs and the heartbeat are the owner's own work, so they go ahead of contacts, but hold at most all
    but one slot: a contact's (or the owner's) message arriving while jobs wait starts at once."""
    provider = HeldProvider(("tag-job1", "tag-job2", "tag-c1"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            jobs = [asyncio.create_task(gw.bus.run_turn("main", f"cron:{t}", f"run {t}")) for t in ("tag-job1",
                                                                                                 "tag-job2")]
            await until(lambda: provider.arrived["tag-job1"].is_set() or provider.arrived["tag-job2"].is_set(),
                        "a job started")
            await lined_up(gw, provider, 1)  # the second job waits though a slot is free
            assert provider.held == 1
            await gw.bus.publish(dm("hi tag-c1", CONTACTS[0]))
            await arrives(provider, "tag-c1")
            provider.let_all_go()
            assert [r.reply for r in await asyncio.gather(*jobs)] == ["re tag-job1", "re tag-job2"]
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert provider.started[1] == "tag-c1"  # ahead of the job that had waited

    with provider:
        run(main)


def test_a_waiter_cancelled_as_its_slot_is_given_keeps_nothing() -> None:
    """Async cancellation: a turn's task cancelled in the moment between being given a slot and taking it gives
    the slot back (to the next in line); one cancelled while running gives it back through `release`."""

    async def main() -> dict[str, Any]:
        slots = TurnSlots(lambda agent: 1)
        first = slots.place("main", "contact", "a")
        assert await first.wait()
        second = slots.place("main", "contact", "b")
        third = slots.place("main", "contact", "c")
        waiter = asyncio.create_task(second.wait())
        await asyncio.sleep(0)  # the task is awaiting its place
        first.release()  # the slot goes to `second`...
        waiter.cancel()  # ...whose task is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await asyncio.wait_for(third.wait(), 5)  # so the slot went on to `third`
        third.release()
        third.release()  # again: harmless
        return slots.status()

    assert asyncio.run(main()) == {"main": {"limit": 1, "running": 0, "past_overdue": 0, "past_lowered": 0,
                                            "overdue": 0, "waiting": {"owner": 0, "scheduled": 0, "contact": 0}}}


@pytest.mark.parametrize("value", [0, -1, "2", "four", 2.5, True, 1000])
def test_max_concurrent_turns_must_be_a_whole_number_from_one(tmp_path: Path, value: object) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    timezone: Europe/Paris\n" f"    max_concurrent_turns: {json.dumps(value)}\n",
        encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(StatePaths(tmp_path))
    assert "hermit.yaml:4: agents.defaults.max_concurrent_turns: must be a whole number from 1 to 256" in e.value.message
    assert f"(got {value!r})" in e.value.message
    assert "max_concurrent_turns: 4" in (e.value.hint or "")


def test_max_concurrent_turns_defaults_to_four_and_an_agent_may_set_its_own(tmp_path: Path) -> None:
    loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris"},
                                      "list": [{"id": "main"}, {"id": "work", "max_concurrent_turns": 1}]}},
                          StatePaths(tmp_path))
    assert {a.id: a.settings.max_concurrent_turns for a in loaded.agents} == {"main": 4, "work": 1}
    with pytest.raises(ConfigError, match=r"agents\.list\[1\]\.max_concurrent_turns"):
        build_config({"agents": {"list": [{"id": "main"}, {"id": "work", "max_concurrent_turns": "1"}]}},
                     StatePaths(tmp_path))
