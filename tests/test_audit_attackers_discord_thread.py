"""A deleted or edited message in a Discord private thread whose parent channel a binding gives to another agent.

A private thread is a group of its own, answered by the agent its parent channel's bindings name
(`access.PARENT_GROUP`, test_discord_private_thread.py). The adapter named the parent on a new message but not
on its delete or edit, so the change was routed by the thread's own id: to the default agent, in a session that
never had the message. A member's message deleted while it waited (a PIN pasted into the wrong chat) was still
answered by the bound agent, its text in the model's context and the thread's transcript for good; an edit ran
with the first text. (audit-attackers: edits and reactions as text carriers.)

Real parts: DiscordChannel (discord.py) against the fake Discord gateway on 127.0.0.1, the gateway's Bus with its
real route/admit (Router + AccessControl), two AgentRuntimes with their own transcripts.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock
from channelhelpers import FAST, run, until
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL, THREAD, _now, patch_discord, unpatch, user
from gatewayhelpers import last_user_text
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
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
WORK = [{"match": {"channel": "discord", "peer": {"kind": "group", "id": TEXT_CHANNEL}}, "agent_id": "work"}]



def scenario(tmp: Path, change: str, *, thread: bool = True) -> tuple[list[str], list[str], str]:
    """A first message holds the turn of the private thread (or, `thread=False`, of its parent channel); a
    second (the PIN) waits behind it and is then deleted (`deleted`, or by a moderator's purge: `purged`) or
    edited on Discord. Returns what the bound agent's model was asked, what the default agent's model was
    asked, and the bound agent's transcripts."""
    home = tmp / "home"
    loaded = config(home, [TEXT_CHANNEL], WORK)
    started, release = threading.Event(), threading.Event()
    asked: dict[str, list[str]] = {"main": [], "work": []}

    def model(agent: str) -> Any:
        def answer(req: ModelRequest) -> str:
            asked[agent].append(last_user_text(req))
            started.set()
            release.wait(20)
            return "ok"
        return answer

    runtimes = {a: AgentRuntime(loaded.agent(a), FunctionModel(model(a)), clock=fixed_clock, fsync=False, home=home)
                for a in ("main", "work")}
    access = AccessControl(loaded.config.channels, PairingStore(home))

    async def main() -> None:
        fake = PrivateThreadDiscord(TOKEN)
        await fake.start()
        old = patch_discord(fake)
        ch = DiscordChannel("default", DiscordAccountConfig(), TOKEN, state_dir=tmp / "dstate", policy=FAST,
                            reconnect_max_delay=0.1)
        bus = Bus(AgentHost(runtimes), route=route_with(Router.from_config(loaded), access),
                  admit=admit_with(access, loaded), channels={(ch.name, ch.account_id): ch}, chunk=split_chunks)
        try:
            await ch.start(bus)
            await fake.wait_for(lambda: ch.status().connected)
            where = {"thread": True} if thread else {"guild": True}
            chat = THREAD if thread else TEXT_CHANNEL
            await fake.say(f"<@{BOT}> first", author=OWNER, mention_bot=True, **where)
            await until(started.is_set)
            mid = await fake.say(f"<@{BOT}> my PIN is {PIN}", author=OWNER, mention_bot=True, **where)
            await until(lambda: bus.counts["queued"] == 2)
            if change == "deleted":
                await fake._dispatch("MESSAGE_DELETE", {"id": mid, "channel_id": chat, "guild_id": GUILD_ID})
            elif change == "purged":  # a moderator's bot removing many messages at once
                await fake._dispatch("MESSAGE_DELETE_BULK", {"ids": [mid], "channel_id": chat, "guild_id": GUILD_ID})
            else:
                await fake._dispatch("MESSAGE_UPDATE", {
                    "id": mid, "channel_id": chat, "guild_id": GUILD_ID, "content": f"<@{BOT}> never mind",
                    "author": user(OWNER, "ann"), "mentions": [user(BOT, "hermit", bot=True)], "type": 0,
                    "timestamp": _now(), "edited_timestamp": _now(), "tts": False, "mention_everyone": False,
                    "mention_roles": [], "attachments": [], "embeds": [], "pinned": False})
            await until(lambda: bus.counts["ignored"] == 1)  # the change is handled before publish returns
            release.set()
            assert await bus.drain(20)
        finally:
            release.set()
            await ch.stop()
            unpatch(old)
            await fake.stop()
            for rt in runtimes.values():
                rt.close()

    run(main)
    transcripts = "".join(p.read_text() for p in runtimes["work"].agent.sessions_dir.glob("*.jsonl"))
    return asked["work"], asked["main"], transcripts


def test_a_message_deleted_while_it_waits_in_a_bound_private_thread_is_never_answered(tmp_path: Path) -> None:
    work, main, transcripts = scenario(tmp_path, "deleted")
    assert work == ["first"]  # the PIN's turn never ran
    assert main == []
    assert PIN not in transcripts


def test_a_message_edited_while_it_waits_in_a_bound_private_thread_runs_as_edited(tmp_path: Path) -> None:
    work, main, transcripts = scenario(tmp_path, "edited")
    assert work == ["first", "never mind"]
    assert main == []
    assert PIN not in transcripts


def test_a_message_a_moderator_purges_while_it_waits_is_never_answered(tmp_path: Path) -> None:
    """Discord sends a purge (a moderation bot's bulk delete) as MESSAGE_DELETE_BULK, which Hermit ignored:
    someone's address posted into a channel and purged at once was still answered and kept."""
    for thread in (False, True):
        work, main, transcripts = scenario(tmp_path / str(thread), "purged", thread=thread)
        assert work == ["first"]
        assert main == []
        assert PIN not in transcripts
