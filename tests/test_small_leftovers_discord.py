"""Discord updates that are no edits, and a purge's order (small-leftovers 1).

Discord sends MESSAGE_UPDATE for an embed unfurled under a link and for a pin as well as for an edit; only an edit
sets (or moves) `edited_timestamp`. Hermit took each update with text as an edit: a forwarded message waiting for
its turn, pinned or unfurled, ran with the forwarder's own text (maybe none) instead of the framed quote. A purge
(MESSAGE_DELETE_BULK) was handled oldest first, so the message just posted — the one the purge is for — was
retracted last.

Real parts: DiscordChannel (discord.py, its message cache) against the fake Discord gateway on 127.0.0.1, the
gateway's Bus with its real route/admit (Router + AccessControl), an AgentRuntime with its transcripts.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock
from channelhelpers import FAST, run, until
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL, _now, patch_discord, unpatch, user
from gatewayhelpers import last_user_text
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import InboundMessage, PublishOutcome
from hermit.channels.discord import DiscordChannel
from hermit.channels.pairing import PairingStore
from hermit.config.schema import DiscordAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import admit_with, route_with, split_chunks
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from test_discord_private_thread import BOT, OWNER, TOKEN, PrivateThreadDiscord, config

PIN = "4711-2290"
QUOTED = "Invoice 88: pay to the new account"
FRAMED = "[forwarded message from someone — quoted, not the sender's own words]\n> " + QUOTED
EARLIER_EDIT = "2026-01-20T09:32:00.000000+00:00"



def forward(mid: str, *, edited: str | None = None, **changes: Any) -> dict[str, Any]:
    """A forward into the channel, as Discord sends it: the forwarder's own words (the bot's mention) and the
    original as a message snapshot."""
    snapshot = {"type": 0, "content": QUOTED, "embeds": [], "attachments": [], "timestamp": _now(),
                "edited_timestamp": None, "flags": 0, "mentions": [], "mention_roles": []}
    return {"id": mid, "channel_id": TEXT_CHANNEL, "guild_id": GUILD_ID, "content": f"<@{BOT}>",
            "author": user(OWNER, "ann"), "timestamp": _now(), "edited_timestamp": edited, "tts": False,
            "mention_everyone": False, "mentions": [user(BOT, "hermit", bot=True)], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": False, "type": 0, "flags": 1 << 14,
            "message_reference": {"type": 1, "message_id": "700000000000000111",
                                  "channel_id": "800000000000000099", "guild_id": "800000000000000098"},
            "message_snapshots": [{"message": snapshot}]} | changes


class Recorded:
    """The bus as the channel's sink, with what the channel handed it in order (the bus decides everything)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.got: list[InboundMessage] = []

    async def publish(self, msg: InboundMessage) -> PublishOutcome:
        self.got.append(msg)
        return await self.bus.publish(msg)


def scenario(tmp: Path, act: Any, *, waiting: int, changes: int) -> tuple[list[str], str, list[InboundMessage]]:
    """A first message holds the channel's turn; `act(fake)` posts `waiting` messages that wait behind it and
    then changes them on Discord (`changes` updates or deletes, each handled before publish returns). Returns
    what the model was asked, the transcripts and what the channel handed the gateway."""
    home = tmp / "home"
    loaded = config(home, [TEXT_CHANNEL])
    started, release = threading.Event(), threading.Event()
    asked: list[str] = []

    def answer(req: ModelRequest) -> str:
        asked.append(last_user_text(req))
        started.set()
        release.wait(20)
        return "ok"

    rt = AgentRuntime(loaded.agent("main"), FunctionModel(answer), clock=fixed_clock, fsync=False, home=home)
    access = AccessControl(loaded.config.channels, PairingStore(home))
    got: list[InboundMessage] = []

    async def main() -> None:
        fake = PrivateThreadDiscord(TOKEN)
        await fake.start()
        old = patch_discord(fake)
        ch = DiscordChannel("default", DiscordAccountConfig(), TOKEN, state_dir=tmp / "dstate", policy=FAST,
                            reconnect_max_delay=0.1)
        bus = Bus(AgentHost({"main": rt}), route=route_with(Router.from_config(loaded), access),
                  admit=admit_with(access, loaded), channels={(ch.name, ch.account_id): ch}, chunk=split_chunks)
        sink = Recorded(bus)
        try:
            await ch.start(sink)
            await fake.wait_for(lambda: ch.status().connected)
            await fake.say(f"<@{BOT}> first", author=OWNER, mention_bot=True, guild=True)
            await until(started.is_set)
            await act(fake, lambda n: until(lambda: bus.counts["queued"] == 1 + n))
            await until(lambda: len(sink.got) == 1 + waiting + changes)
            release.set()
            assert await bus.drain(20)
        finally:
            release.set()
            await ch.stop()
            unpatch(old)
            await fake.stop()
            rt.close()
            got.extend(sink.got)

    run(main)
    transcripts = "".join(p.read_text() for p in rt.agent.sessions_dir.glob("*.jsonl"))
    return asked, transcripts, got


def test_a_pin_or_an_embed_of_a_waiting_forward_is_no_edit_and_changes_nothing(tmp_path: Path) -> None:
    """A pin sends the whole message again (`pinned` true), an embed unfurled under a link the message with its
    embeds; neither sets `edited_timestamp`. Taken as edits, the forward ran as the forwarder's bare mention."""
    async def act(fake: PrivateThreadDiscord, queued: Any) -> None:
        await fake._dispatch("MESSAGE_CREATE", forward("700000000000000500"))
        await queued(1)
        await fake._dispatch("MESSAGE_UPDATE", forward("700000000000000500", pinned=True))
        await fake._dispatch("MESSAGE_UPDATE", forward("700000000000000500", embeds=[
            {"type": "link", "url": "https://example.org/invoice", "title": "Invoice"}]))

    asked, _, got = scenario(tmp_path, act, waiting=1, changes=0)
    assert asked == ["first", FRAMED]
    assert [m.change for m in got] == [None, None]  # no update was handed on as an edit


def test_a_pin_of_a_message_edited_before_keeps_its_edit_time_and_changes_nothing(tmp_path: Path) -> None:
    """A message edited earlier carries that edit's time on every later update: only a new time is an edit."""
    async def act(fake: PrivateThreadDiscord, queued: Any) -> None:
        await fake._dispatch("MESSAGE_CREATE", forward("700000000000000501", edited=EARLIER_EDIT))
        await queued(1)
        await fake._dispatch("MESSAGE_UPDATE", forward("700000000000000501", edited=EARLIER_EDIT, pinned=True))

    asked, _, got = scenario(tmp_path, act, waiting=1, changes=0)
    assert asked == ["first", FRAMED]
    assert [m.change for m in got] == [None, None]


def test_a_real_edit_of_a_waiting_message_still_changes_it(tmp_path: Path) -> None:
    async def act(fake: PrivateThreadDiscord, queued: Any) -> None:
        mid = await fake.say(f"<@{BOT}> my PIN is {PIN}", author=OWNER, mention_bot=True, guild=True)
        await queued(1)
        await fake._dispatch("MESSAGE_UPDATE", {
            "id": mid, "channel_id": TEXT_CHANNEL, "guild_id": GUILD_ID, "content": f"<@{BOT}> never mind",
            "author": user(OWNER, "ann"), "mentions": [user(BOT, "hermit", bot=True)], "type": 0,
            "timestamp": _now(), "edited_timestamp": _now(), "tts": False, "mention_everyone": False,
            "mention_roles": [], "attachments": [], "embeds": [], "pinned": False})

    asked, transcripts, got = scenario(tmp_path, act, waiting=1, changes=1)
    assert asked == ["first", "never mind"]
    assert PIN not in transcripts
    assert got[-1].change == "edited"


def test_a_purge_retracts_the_newest_message_first(tmp_path: Path) -> None:
    """The message just posted (the one a moderator purges the channel for) is the likeliest to start its turn
    while the purge's other deletes are handled: it goes first."""
    mids: list[str] = []

    async def act(fake: PrivateThreadDiscord, queued: Any) -> None:
        for text in ("older one", "older two", f"my PIN is {PIN}"):
            mids.append(await fake.say(f"<@{BOT}> {text}", author=OWNER, mention_bot=True, guild=True))
        await queued(3)
        await fake._dispatch("MESSAGE_DELETE_BULK", {"ids": mids, "channel_id": TEXT_CHANNEL, "guild_id": GUILD_ID})

    asked, transcripts, got = scenario(tmp_path, act, waiting=3, changes=3)
    assert [m.message_id for m in got if m.change == "deleted"] == mids[::-1]
    assert asked == ["first"]
    assert PIN not in transcripts
