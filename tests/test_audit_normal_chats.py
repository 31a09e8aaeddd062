"""A contact's DM in ordinary use (audit: normal use, no attacker): the model is told who it is talking to.

A contact's DM session was told "You are a personal assistant … on your user's own machine" and, through AGENTS.md,
"Read USER.md — who you are helping" and "read today's and yesterday's daily log": the model took the contact for
the owner. What chats may read of the owner's — the hand-typed lines of USER.md, hand-written daily-log lines —
then came back as the contact's own ("what's on my calendar today?" → the owner's dentist appointment, "what's my
name?" → the owner's). Now a DM that is not the owner's says, in the system prompt, that the writer is a contact and
not the user, and that the user's details, plans and notes are not theirs. The owner's own DMs (the main session,
and under dm_scope per-peer a DM session of their own) and groups (which name each sender) get no such note.

Real parts: the gateway's bus with the real routing and owner check from a config, the agent runtime, a model
double recording every request.
"""

from __future__ import annotations

import asyncio
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
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel

OWNER, CONTACT = "1001", "42"
NOTE = "a contact of your user, not your user"


def chat(home: Path, dm_scope: str, *messages: InboundMessage) -> dict[str, str]:
    """Each message's turn through the bus; the system prompt each session's request carried, by session key."""
    raw: dict[str, Any] = {
        "agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"},
                                "session": {"dm_scope": dm_scope}}},
        "channels": {"telegram": {"accounts": {"default": {"owners": [OWNER], "group_policy": "open",
                                                           "require_mention": False}}}}}
    loaded = build_config(raw, StatePaths(home))
    ws = loaded.agent().workspace
    ws.mkdir(parents=True)
    (ws / "USER.md").write_text("# USER.md\n\n- Name: Ann Example\n- Notes: dentist on Friday\n")
    seen: dict[str, str] = {}

    def reply(request: ModelRequest) -> str:
        key = request.system.split("· session: ", 1)[1].split(" ", 1)[0]
        seen[key] = request.system
        return "ok"

    access = AccessControl(loaded.config.channels, PairingStore(home))
    rt = AgentRuntime(loaded.agent(), FunctionModel(reply), clock=fixed_clock, fsync=False, home=home,
                      owner_check=access.is_owner)
    channel = RecordingChannel()
    bus = Bus(AgentHost({"main": rt}), route=route_with(Router.from_config(loaded), access),
              admit=lambda _m, _a: Admission(True), channels={(channel.name, channel.account_id): channel},
              chunk=split_chunks, queue_limit=8)

    async def main() -> None:
        for m in messages:
            assert await bus.publish(m) == "queued"
        await bus.drain(20)

    asyncio.run(main())
    return seen


def test_a_contacts_dm_says_the_writer_is_a_contact_not_the_user(tmp_path: Path) -> None:
    seen = chat(tmp_path, "main", inbound("what's on my calendar?", CONTACT), inbound("hi", OWNER),
                inbound("hello all", "-100", kind="group"))
    contact = seen[f"agent:main:telegram:default:dm:{CONTACT}"]
    assert f"You are talking with the telegram user {CONTACT}: {NOTE}" in contact
    assert "Ann Example" in contact  # USER.md's hand-typed lines are still shown: now as the user's, not theirs
    assert NOTE not in seen["agent:main:main"]
    assert NOTE not in seen["agent:main:telegram:group:-100"]


def test_the_owners_own_dm_outside_the_main_session_gets_no_such_note(tmp_path: Path) -> None:
    """dm_scope per-peer: the owner's DMs have a session of their own that is not the main one."""
    seen = chat(tmp_path, "per-peer", inbound("hi", OWNER), inbound("hi", CONTACT))
    assert NOTE not in seen[f"agent:main:dm:{OWNER}"]
    assert f"You are talking with the telegram user {CONTACT}: {NOTE}" in seen[f"agent:main:telegram:dm:{CONTACT}"]
