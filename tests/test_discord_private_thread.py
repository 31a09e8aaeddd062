"""A Discord private thread (channel type 12) is a group of its own: only the people invited see it, so its
session, memory audience and room are not its parent channel's, while the parent channel's `groups` entry and
bindings still decide who may use it and which agent answers. A public thread still shares its channel's.

Real parts: DiscordChannel (discord.py) against the fake Discord gateway on 127.0.0.1, the gateway's own
route/admit (Router + AccessControl), AgentRuntime with its real tools over a real SQLite index.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agenthelpers import NOW, TODAY
from channelhelpers import FAST, QueueSink, run
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL, THREAD, FakeDiscord, _now, patch_discord, unpatch
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import InboundMessage, OutboundMessage, Target
from hermit.channels.discord import DiscordChannel
from hermit.channels.pairing import PairingStore
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import DiscordAccountConfig
from hermit.gateway.supervisor import admit_with, route_with
from hermit.memory.policy.audience import audience_of_session
from hermit.messages import ToolResultMessage, UserMessage
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from sessionhelpers import Clock, memory_service

TOKEN = "discord-test-token"
BOT = "900000000000000001"
OWNER = "600000000000000001"     # in the private thread
OUTSIDER = "600000000000000003"  # in the public parent channel only
SECRET = "Bob is on a performance improvement plan (PIP-CANARY-77)"


class PrivateThreadDiscord(FakeDiscord):
    """The fake guild's thread, made a private thread (type 12) with two members."""

    def _guild(self) -> dict[str, Any]:
        g = super()._guild()
        g["threads"][0].update({"type": 12, "name": "bob-review", "member_count": 2,
                                "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                                    "archive_timestamp": _now(), "locked": False,
                                                    "invitable": False}})
        return g


def inbound(tmp: Path, fake_cls: type[FakeDiscord], *says: dict[str, Any]) -> tuple[list[InboundMessage],
                                                                                     list[dict[str, Any]]]:
    """What the adapter publishes for each `fake.say(**kwargs)`, and what it sends back to each message."""
    async def main() -> tuple[list[InboundMessage], list[dict[str, Any]]]:
        fake = fake_cls(TOKEN)
        await fake.start()
        old = patch_discord(fake)
        ch = DiscordChannel("default", DiscordAccountConfig(), TOKEN, state_dir=tmp / "dstate", policy=FAST,
                            reconnect_max_delay=0.1)
        sink = QueueSink()
        try:
            await ch.start(sink)
            await fake.wait_for(lambda: ch.status().connected)
            got = []
            for kw in says:
                await fake.say(**kw)
                got.append(await sink.next())
            for m in got:
                await ch.send(OutboundMessage(Target.of(m), "answer"))
            return got, fake.sent()
        finally:
            await ch.stop()
            unpatch(old)
            await fake.stop()
    return run(main)


def config(home: Path, groups: list[str], bindings: list[dict[str, Any]] | None = None) -> LoadedConfig:
    return build_config({
        "agents": {"defaults": {"timezone": "Europe/Paris"}, "list": [{"id": "main"}, {"id": "work"}]},
        "bindings": bindings or [],
        "channels": {"discord": {"accounts": {"default": {
            "token": TOKEN, "owners": [OWNER], "group_policy": "allowlist", "groups": groups}}}},
    }, StatePaths(home))


def in_thread(text: str = f"<@{BOT}> note this", author: str = OWNER) -> dict[str, Any]:
    return {"text": text, "author": author, "thread": True, "mention_bot": True}


def in_channel(text: str, author: str = OUTSIDER) -> dict[str, Any]:
    return {"text": text, "author": author, "guild": True, "mention_bot": True}


def test_a_private_thread_is_its_own_group_and_is_answered_in_the_thread(tmp_path: Path) -> None:
    (msg,), sent = inbound(tmp_path, PrivateThreadDiscord, in_thread())
    assert (msg.peer_kind, msg.peer_id, msg.thread_id, msg.guild_id) == ("group", THREAD, None, GUILD_ID)
    assert TEXT_CHANNEL in msg.meta.values()  # the parent channel, for access and bindings
    assert [s["channel_id"] for s in sent] == [THREAD]


def test_a_public_thread_still_shares_its_channels_group(tmp_path: Path) -> None:
    (msg,), _ = inbound(tmp_path, FakeDiscord, in_thread())
    assert (msg.peer_id, msg.thread_id) == (TEXT_CHANNEL, THREAD)
    loaded = config(tmp_path / "home", [TEXT_CHANNEL])
    access = AccessControl(loaded.config.channels, PairingStore(tmp_path / "home"))
    routed = route_with(Router.from_config(loaded), access)(msg)
    assert routed.session_key == f"agent:main:discord:group:{TEXT_CHANNEL}:thread:{THREAD}"
    assert audience_of_session(routed.session_key) == f"discord:group:{TEXT_CHANNEL}"


def test_access_and_bindings_are_the_parent_channels(tmp_path: Path) -> None:
    msgs, _ = inbound(tmp_path, PrivateThreadDiscord, in_thread(), in_channel(f"<@{BOT}> hi"))
    thread_msg, channel_msg = msgs
    home = tmp_path / "home"

    def decide(groups: list[str], msg: InboundMessage, bindings: list[dict[str, Any]] | None = None
               ) -> tuple[bool, str, str]:
        loaded = config(home, groups, bindings)
        access = AccessControl(loaded.config.channels, PairingStore(home))
        routed = route_with(Router.from_config(loaded), access)(msg)
        return admit_with(access, loaded)(msg, routed.agent_id).allowed, routed.agent_id, routed.session_key

    own_key = f"agent:main:discord:group:{THREAD}"
    assert decide([TEXT_CHANNEL], thread_msg) == (True, "main", own_key)
    assert decide([], thread_msg)[0] is False
    # Naming the thread alone lets nothing in: the parent channel's entry decides.
    assert decide([THREAD], thread_msg)[0] is False
    # Fail closed: a private-thread message that does not name its parent is checked on its own id.
    orphan = dataclasses.replace(thread_msg, meta={"channel_id": THREAD})
    assert decide([TEXT_CHANNEL], orphan)[0] is False
    # A binding for the parent channel answers its private thread too, in the thread's own session.
    work = [{"match": {"channel": "discord", "peer": {"kind": "group", "id": TEXT_CHANNEL}}, "agent_id": "work"}]
    assert decide([TEXT_CHANNEL], thread_msg, work) == (True, "work", f"agent:work:discord:group:{THREAD}")
    assert decide([TEXT_CHANNEL], channel_msg, work) == (True, "work", f"agent:work:discord:group:{TEXT_CHANNEL}")


def _user_text(req: ModelRequest) -> str:
    """The last user message's own text: a group's turn starts with its sender's line (agent/speakers.py)."""
    text = next(m for m in reversed(req.messages) if isinstance(m, UserMessage)).text
    return text.split("\n", 1)[1] if text.startswith("[") else text


def brain(req: ModelRequest) -> Any:
    """Notes the secret in memory and in a room file when told to; reads both back when asked."""
    text = _user_text(req)
    last = req.messages[-1]
    results = [m for m in req.messages if isinstance(m, ToolResultMessage)]
    if text.startswith("note"):
        if not results:
            return {"tool_calls": [
                {"name": "write", "arguments": {"path": f"memory/{TODAY}.md", "content": f"- {SECRET}\n",
                                                "append": True}},
                {"name": "write", "arguments": {"path": "bob-review.txt", "content": SECRET}}]}
        return "noted"
    if "what do you know" in text:
        if isinstance(last, ToolResultMessage):
            return "\n".join(r.content for r in results[-2:])
        return {"tool_calls": [{"name": "memory_get", "arguments": {"path": f"memory/{TODAY}.md"}},
                               {"name": "read", "arguments": {"path": "bob-review.txt"}}]}
    return "ok"


def test_the_public_channel_never_reads_what_the_private_thread_noted(tmp_path: Path,
                                                                        fake_embedder: object) -> None:
    msgs, _ = inbound(tmp_path, PrivateThreadDiscord, in_thread(),
                      in_channel(f"<@{BOT}> what do you know about Bob?"))
    home = tmp_path / "home"
    loaded = config(home, [TEXT_CHANNEL])
    access = AccessControl(loaded.config.channels, PairingStore(home))
    route, admit = route_with(Router.from_config(loaded), access), admit_with(access, loaded)
    (t, thread_key), (c, channel_key) = [(m, route(m).session_key) for m in msgs]
    assert admit(t, "main").allowed and admit(c, "main").allowed
    assert audience_of_session(thread_key) != audience_of_session(channel_key)

    rt = AgentRuntime(loaded.agent(), FunctionModel(brain), memory=memory_service(loaded, fake_embedder),  # type: ignore[arg-type]
                      clock=Clock(NOW), fsync=False, home=home)
    rt.run_turn(thread_key, t.text, sender=f"ann ({OWNER})")
    assert SECRET in (rt.agent.workspace / f"memory/{TODAY}.md").read_text()
    assert rt.confinement.room(thread_key).path != rt.confinement.room(channel_key).path
    assert (rt.confinement.room(thread_key).path / "bob-review.txt").read_text() == SECRET

    reply = rt.run_turn(channel_key, c.text, sender=f"eve ({OUTSIDER})").reply
    assert "PIP-CANARY-77" not in reply
    # The thread itself still reads its own notes back.
    again = rt.run_turn(thread_key, "what do you know about Bob?", sender=f"ann ({OWNER})").reply
    assert again.count("PIP-CANARY-77") == 2
