"""A contact's DM in ordinary use (audit: normal use, no attacker): the model is told who it is talking to.

A contact's DM session was told "You are a personal assistant … on your user's own machine" and, through AGENTS.md,
"Read USER.md — who you are helping" and "read today's and yesterday's daily log": the model took the contact for
the owner. What chats may read of the owner's — the hand-typed lines of USER.md, hand-written daily-log lines —
then came back as the contact's own ("what's on my calendar today?" → the owner's dentist appointment, "what's my
name?" → the owner's). Now a DM that is not the owner's says, in the system prompt, that the writer is a contact and
not the user, and that the user's details, plans and notes are not theirs. The owner's own DMs (the main session,
and under dm_scope per-peer a DM session of their own) and groups (which name each sender) get no such note.

Also a guard for the owner's own message in a group (the audit's first angle): answered in the group, it reads
only what the group may read.

Real parts: the gateway's bus with the real routing and owner check from a config, the agent runtime with its memory
service and tools (the real SQLite index), a model double recording every request.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock
from gatewayhelpers import RecordingChannel, inbound
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import InboundMessage
from hermit.channels.pairing import PairingStore
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Admission, Bus
from hermit.gateway.supervisor import route_with, split_chunks
from hermit.memory.service import MemoryKey, MemoryService
from hermit.messages import ToolResultMessage
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply, request_text
from hermit.workspace import ensure_workspace

OWNER, CONTACT = "1001", "42"
NOTE = "a contact of your user, not your user"
MEMORY_CANARY, PRIVATE_CANARY = "MEMCANARY-8812", "PRIVCANARY-5530"


class Prompts(dict[str, str]):
    """What each session's requests carried, by the session key the bus ran the turn for; `of` finds a session
    by the end of its key."""

    def of(self, end: str) -> str:
        [text] = [t for k, t in self.items() if k == end or k.endswith(":" + end)]
        return text


class KeyedRuntime(AgentRuntime):
    """The runtime the bus drives, noting in the worker thread of each turn which session it is for: the model's
    requests are filed by the key the bus asked for, not by what the prompt shows (a chat's prompt names its
    session without the channel account)."""

    turn = threading.local()

    def run_turn(self, session_key: str, text: str, *args: Any, **kwargs: Any) -> Any:
        self.turn.key = session_key
        try:
            return super().run_turn(session_key, text, *args, **kwargs)
        finally:
            self.turn.key = None


def chat(home: Path, dm_scope: str, *messages: InboundMessage,
         model: Callable[[ModelRequest], Reply] | None = None, bootstrap: bool = False) -> Prompts:
    """Each message's turn through the bus; the system prompt each session's request carried, by session key.
    `model` answers instead of "ok" (the runtime then has its memory service and tools)."""
    raw: dict[str, Any] = {
        "agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"},
                                "session": {"dm_scope": dm_scope}}},
        "channels": {"telegram": {"accounts": {"default": {"owners": [OWNER], "group_policy": "open",
                                                           "require_mention": False}}}}}
    loaded = build_config(raw, StatePaths(home))
    ws = loaded.agent().workspace
    if bootstrap:  # a brand-new workspace, as `hermit init` leaves it
        ensure_workspace(ws)
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "USER.md").write_text("# USER.md\n\n- Name: Ann Example\n- Notes: dentist on Friday\n")
    (ws / "MEMORY.md").write_text(f"# MEMORY\n\n- {MEMORY_CANARY}: the bank PIN is 4471\n")
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "memory" / "private" / "bank.md").write_text(f"- {PRIVATE_CANARY}: bank PIN 4471, kept private\n")
    seen = Prompts()

    def reply(request: ModelRequest) -> Reply:
        key = KeyedRuntime.turn.key
        assert isinstance(key, str), "a model call outside a turn"
        seen[key] = seen.get(key, "") + request_text(request)
        return "ok" if model is None else model(request)

    access = AccessControl(loaded.config.channels, PairingStore(home))
    agent = loaded.agent()
    svc = (MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, None)
           if model is not None else None)
    rt = KeyedRuntime(agent, FunctionModel(reply), memory=svc, clock=fixed_clock, fsync=False, home=home,
                      owner_check=access.is_owner)
    channel = RecordingChannel()
    bus = Bus(AgentHost({"main": rt}), route=route_with(Router.from_config(loaded), access),
              admit=lambda _m, _a: Admission(True), channels={(channel.name, channel.account_id): channel},
              chunk=split_chunks, queue_limit=8)

    async def main() -> None:
        for m in messages:
            assert await bus.publish(m) == "queued"
        await bus.drain(20)

    try:
        asyncio.run(main())
    finally:
        rt.close()
    return seen


def test_a_contacts_dm_says_the_writer_is_a_contact_not_the_user(tmp_path: Path) -> None:
    seen = chat(tmp_path, "main", inbound("what's on my calendar?", CONTACT), inbound("hi", OWNER),
                inbound("hello all", "-100", kind="group"))
    contact = seen.of(f"dm:{CONTACT}")
    assert f"You are talking with the telegram user {CONTACT}: {NOTE}" in contact
    assert "Ann Example" in contact  # USER.md's hand-typed lines are still shown: now as the user's, not theirs
    assert NOTE not in seen.of("agent:main:main")
    assert NOTE not in seen.of("group:-100")


def test_the_owners_own_dm_outside_the_main_session_gets_no_such_note(tmp_path: Path) -> None:
    """dm_scope per-peer: the owner's DMs have a session of their own that is not the main one."""
    seen = chat(tmp_path, "per-peer", inbound("hi", OWNER), inbound("hi", CONTACT))
    assert NOTE not in seen.of(f"dm:{OWNER}")
    assert f"You are talking with the telegram user {CONTACT}: {NOTE}" in seen.of(f"dm:{CONTACT}")


def test_the_owner_speaking_in_a_group_gets_the_groups_memory_not_the_owners(tmp_path: Path) -> None:
    """Angle 1 of the audit: the owner's own message in a group (marked as the owner's to the model) is answered
    in the group, so its turn reads what the group may read — never MEMORY.md or owner-only notes, whoever asks.
    Guards against making the owner's mark a key to the owner's memory."""
    def model(request: ModelRequest) -> Reply:
        if "memory_search" not in {t.name for t in request.tools} or isinstance(request.messages[-1], ToolResultMessage):
            return "ok"
        return {"tool_calls": [{"name": "memory_search", "arguments": {"query": "bank PIN"}},
                               {"name": "memory_get", "arguments": {"path": "MEMORY.md"}},
                               {"name": "memory_get", "arguments": {"path": "memory/private/bank.md"}},
                               {"name": "read", "arguments": {"path": "MEMORY.md"}}]}

    seen = chat(tmp_path, "main", InboundMessage("telegram", "default", "group", "-100", OWNER,
                                                 "what's my bank PIN? check your notes"),
                inbound("and in here?", OWNER), model=model)
    group = seen.of("group:-100")
    assert f"[{OWNER} \u2014 the owner]" in group and "bank PIN" in group  # the owner's turn, its tools ran
    assert "MEMORY.md is not available in this session" in group and "nothing in it is shared with this chat" in group
    assert MEMORY_CANARY not in group and PRIVATE_CANARY not in group
    assert MEMORY_CANARY in seen.of("agent:main:main") and PRIVATE_CANARY in seen.of("agent:main:main")


def test_the_first_run_ritual_is_the_owners_only(tmp_path: Path) -> None:
    """A brand-new workspace's BOOTSTRAP.md ("ask who you are talking to, fill in USER.md together") went into every
    session's prompt: a contact who wrote before the owner's first chat was asked for their name and timezone and
    onboarded as the user. Now only the owner's main session gets it."""
    seen = chat(tmp_path, "main", inbound("hi", CONTACT), inbound("hello all", "-100", kind="group"),
                inbound("hi", OWNER), bootstrap=True)
    assert "## BOOTSTRAP.md" in seen.of("agent:main:main")
    assert "## BOOTSTRAP.md" not in seen.of(f"dm:{CONTACT}")
    assert "## BOOTSTRAP.md" not in seen.of("group:-100")
