"""Contacts' turns that never end do not keep the owner waiting (gateway/turn_slots.py).

The bound on an agent's concurrent turns gave a freed slot to the owner first, but nothing freed one: a turn has
no time limit (25 rounds of tool calls, each model call up to deadline_seconds, a sandboxed command up to 30
minutes), so contacts — or one contact in as many sessions as the bound (their DM, groups, threads) — whose turns
ran long held every slot, and the owner's message waited for hours. Through a real gateway and the real
OpenAI-compatible adapter over HTTP to the fake provider, each turn's answer held until the test lets it go.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import hermit.gateway.turn_slots as turn_slots
from channelhelpers import run
from hermit.channels.base import InboundMessage
from hermit.gateway.turn_slots import TurnSlots
from test_turn_bound import CONTACTS, OWNER, HeldProvider, arrives, dm, gateway, lined_up, until


def test_the_owner_starts_once_contacts_have_held_every_slot_too_long(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_slots, "OVERDUE_SECONDS", 0.5, raising=False)
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3", "tag-own", "tag-next"))

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)  # two contacts' turns that do not end: both slots
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            await gw.bus.publish(dm("me? tag-own", OWNER))
            # The contacts' turns still hold their slots; once they have for OVERDUE_SECONDS, the owner starts.
            await arrives(provider, "tag-own")
            assert not provider.arrived["tag-c3"].is_set()  # a contact never goes past the bound
            status = gw.bus.status()["turn_slots"]["main"]
            assert status["running"] == 3 and status["waiting"]["contact"] == 1, status
            # The contacts' turns are still overdue: the owner's next message starts too (one per overdue turn).
            provider.go["tag-own"].set()
            await gw.bus.publish(dm("and? tag-next", OWNER))
            await arrives(provider, "tag-next")
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert len(ch.messages(OWNER)) == 2 and ch.messages(OWNER)[0].text == "re tag-own"
        assert provider.started.index("tag-own") < provider.started.index("tag-c3")

    with provider:
        run(main)


def test_an_overdue_turn_lets_one_owners_turn_past_the_bound_not_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_slots, "OVERDUE_SECONDS", 0.2, raising=False)

    async def main() -> None:
        slots = TurnSlots(lambda agent: 1)
        contact = slots.place("main", "contact", "c")
        assert await contact.wait()
        first, second = slots.place("main", "owner", "o1"), slots.place("main", "owner", "o2")
        job = slots.place("main", "scheduled", "j")
        assert await asyncio.wait_for(first.wait(), 5)  # past the bound, once the contact's turn is overdue
        await asyncio.sleep(0)
        assert second.state == "waiting" and job.state == "waiting"
        first.release()
        assert await asyncio.wait_for(second.wait(), 5)  # the contact's turn still overdue: the next owner's
        assert job.state == "waiting"  # never anyone else's
        contact.release()
        second.release()
        assert await asyncio.wait_for(job.wait(), 5)
        job.release()
        assert slots.status()["main"]["running"] == 0

    asyncio.run(main())


def test_a_members_turn_the_owners_message_waits_behind_in_its_group_takes_the_owners_place(tmp_path: Path) -> None:
    """One turn at a time per session: the owner's message in a group waits for the member's message before it in
    that group, which waited in the contacts' line — behind every contact's turn that came first. The member's
    turn now goes ahead in the owner's place (the owner's message waits on it), as the owner's would."""
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-c3", "tag-member", "tag-own"))

    def group(text: str, sender: str) -> InboundMessage:
        return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="-100",
                              sender_id=sender, text=text)

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)
            await gw.bus.publish(dm("hi tag-c3", CONTACTS[2]))
            assert await gw.bus.publish(group("hi tag-member", "3001")) == "queued"
            await lined_up(gw, provider, 2)
            assert await gw.bus.publish(group("hi all tag-own", OWNER)) == "queued"  # behind the member's
            await until(lambda: gw.bus.status()["turn_slots"]["main"]["waiting"]["owner"] == 1, "promoted")
            provider.go["tag-c1"].set()
            await arrives(provider, "tag-member")  # not c3's, who came first
            assert not provider.arrived["tag-c3"].is_set()
            provider.go["tag-member"].set()
            await arrives(provider, "tag-own")
            provider.let_all_go()
            assert await gw.bus.drain(20)
        finally:
            provider.let_all_go()
        assert provider.started[2:] == ["tag-member", "tag-own", "tag-c3"], provider.started

    with provider:
        run(main)


def test_a_members_flood_of_a_group_never_turns_the_owners_message_away(tmp_path: Path) -> None:
    """A session's queue is bounded (`queue_max_per_session`); a member who filled the group's queue had the owner's
    message there answered "busy" and dropped. The owner's messages have a bound of their own."""
    provider = HeldProvider(("tag-m0", "tag-own"))

    def group(text: str, sender: str) -> InboundMessage:
        return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="-100",
                              sender_id=sender, text=text)

    async def main() -> None:
        gw, ch = gateway(tmp_path, provider)
        try:
            assert await gw.bus.publish(group("hi tag-m0", "3001")) == "queued"
            await arrives(provider, "tag-m0")  # running: the queue holds the next ones
            outcomes = [await gw.bus.publish(group(f"flood {i}", "3001")) for i in range(gw.bus.status()["queue_limit"] + 1)]
            assert outcomes[-1] == "queue_full"  # the member's own bound
            assert await gw.bus.publish(group("hi all tag-own", OWNER)) == "queued"
            provider.let_all_go()
            assert await gw.bus.drain(30)
        finally:
            provider.let_all_go()
        assert "tag-own" in provider.started

    with provider:
        run(main)
