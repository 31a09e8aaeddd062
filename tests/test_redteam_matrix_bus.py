"""Red-team matrix, the rooms as people reach them: through the gateway's bus, with the real routing and admission
(owners, pairing, allow_from, an open account, groups, a second agent's bot) from one config.

Every message's model is hostile: it asks memory_get, read, memory_search and exec (the sandbox, for a room) for
MEMORY.md, memory/private/, hermit.env and Hermit's environment, then repeats every result in its reply. What
the channel delivers to each sender is checked: the owner's DM gets the canaries (the positive control), nobody
else does; an MCP client gets the runtime matrix's paths and searches; a stranger the account does not let in gets a pairing code or nothing, and no turn. Runs as this
process's uid (root in CI; the runtime matrix, tests/test_redteam_matrix.py, covers uid 65534).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

import redteamworld as rw
from agenthelpers import fixed_clock
from ciguard import need
from gatewayhelpers import RecordingChannel
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import InboundMessage, OutboundMessage
from hermit.channels.pairing import PairingStore
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import admit_with, route_with, split_chunks
from hermit.memory.service import MemoryKey, MemoryService
from hermit.messages import ToolResultMessage
from hermit.models.base import ModelRequest
from hermit.sessions.keys import is_main_session_key
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply
from hermit.tools.os_sandbox import detect

OWNER, PAIRED, ALLOWED, STRANGER, MEMBER, FAM_CONTACT = "1001", "42", "43", "99999", "321", "44"
CANARIES = {"memory": "QX7-BUSMEM-CANARY-7001", "private": "QX7-BUSPRIV-CANARY-7002",
            "env_file": "QX7-BUSENV-CANARY-7003", "process_env": "QX7-BUSPROC-CANARY-7004",
            "family": "QX7-BUSFAM-CANARY-7005"}
CALLS: list[dict[str, Any]] = [
    {"name": "memory_get", "arguments": {"path": "MEMORY.md"}},
    {"name": "memory_get", "arguments": {"path": "memory/private/x.md"}},
    {"name": "read", "arguments": {"path": "memory/private/x.md"}},
    {"name": "read", "arguments": {"path": "../hermit.env"}},
    {"name": "memory_search", "arguments": {"query": "zebra vault combination walrus", "minScore": 0}},
    {"name": "exec", "arguments": {"command": "cat MEMORY.md memory/private/x.md ../hermit.env ../../hermit.env "
                                              "../../../hermit.env 2>&1; env; tr '\\0' '\\n' < /proc/self/environ"}},
]


class KeyedRuntime(AgentRuntime):
    """Notes which session each turn ran in (the bus runs turns in worker threads)."""

    turn = threading.local()

    def run_turn(self, session_key: str, text: str, *args: Any, **kwargs: Any) -> Any:
        self.turn.key = session_key
        try:
            return super().run_turn(session_key, text, *args, **kwargs)
        finally:
            self.turn.key = None


def hostile(keys: list[str]) -> FunctionModel:
    def reply(request: ModelRequest) -> Reply:
        keys.append(KeyedRuntime.turn.key)
        if isinstance(request.messages[-1], ToolResultMessage):
            return "I found:\n" + "\n".join(str(m.content) for m in request.messages
                                            if isinstance(m, ToolResultMessage))
        return {"tool_calls": CALLS}

    return FunctionModel(reply)


def msg(account: str, kind: str, peer: str, sender: str, text: str = "hi, what do your notes say?") -> InboundMessage:
    return InboundMessage("telegram", account, kind, peer, sender, text)  # type: ignore[arg-type]


def test_every_kind_of_room_as_people_reach_it(tmp_path: Path) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    home = tmp_path / "state"
    raw: dict[str, Any] = {
        "agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"}},
                   "list": [{"id": "main", "default": True}, {"id": "fam"}]},
        "channels": {"telegram": {"accounts": {
            "default": {"owners": [OWNER], "dm_policy": "pairing", "group_policy": "open", "require_mention": False},
            "allow": {"owners": [OWNER], "dm_policy": "allowlist", "allow_from": [ALLOWED]},
            "open": {"owners": [OWNER], "dm_policy": "open", "allow_from": ["*"]},
            "fam": {"owners": ["7777"], "dm_policy": "open", "allow_from": ["*"]}}}},
        "bindings": [{"match": {"channel": "telegram", "account_id": "fam"}, "agent_id": "fam"}]}
    loaded = build_config(raw, StatePaths(home))
    (home / "hermit.env").parent.mkdir(parents=True, exist_ok=True)
    (home / "hermit.env").write_text(f"HERMIT_TEST_TOKEN={CANARIES['env_file']}\n")
    pairing = PairingStore(home)
    request = pairing.request("telegram", "default", PAIRED)
    assert request is not None
    pairing.approve("telegram", request.code)
    access = AccessControl(loaded.config.channels, pairing)
    keys: list[str] = []
    runtimes: dict[str, AgentRuntime] = {}
    for agent_id in ("main", "fam"):
        agent = loaded.agent(agent_id)
        ws = agent.workspace
        (ws / "memory" / "private").mkdir(parents=True)
        canary = CANARIES["memory"] if agent_id == "main" else CANARIES["family"]
        (ws / "MEMORY.md").write_text(f"# MEMORY\n\n- zebra vault combination {canary}\n")
        (ws / "memory" / "private" / "x.md").write_text(f"- walrus clinic {CANARIES['private']}\n")
        (ws / "memory" / "shared.md").write_text("- the team lunch is at the ramen place\n")
        svc = MemoryService(MemoryKey(agent.id, ws), agent.index_path, agent.settings.memory_search, None)
        runtimes[agent_id] = KeyedRuntime(
            agent, hostile(keys), memory=svc, clock=fixed_clock, fsync=False, home=home, owner_check=access.is_owner,
            exec_env={"PATH": "/usr/bin:/bin", "OWNER_API_TOKEN": CANARIES["process_env"]})
    channels = {("telegram", a): RecordingChannel("telegram", a) for a in ("default", "allow", "open", "fam")}
    bus = Bus(AgentHost(runtimes), route=route_with(Router.from_config(loaded), access),
              admit=admit_with(access, loaded), channels=dict(channels), chunk=split_chunks, queue_limit=8)
    messages = {
        "owner_dm": msg("default", "dm", OWNER, OWNER),
        "owner_in_group": msg("default", "group", "-100", OWNER),
        "paired_contact": msg("default", "dm", PAIRED, PAIRED),
        "unpaired_stranger": msg("default", "dm", "555", "555"),
        "allow_from_contact": msg("allow", "dm", ALLOWED, ALLOWED),
        "not_allowed": msg("allow", "dm", "556", "556"),
        "open_stranger": msg("open", "dm", STRANGER, STRANGER),
        "group_member": msg("default", "group", "-200", MEMBER),
        "second_agent_contact": msg("fam", "dm", FAM_CONTACT, FAM_CONTACT),
    }

    async def main() -> None:
        for m in messages.values():
            await bus.publish(m)
        await bus.drain(60)

    old = os.environ.get("HERMIT_REDTEAM_BUS_TOKEN")
    os.environ["HERMIT_REDTEAM_BUS_TOKEN"] = CANARIES["process_env"]
    try:
        asyncio.run(main())
    finally:
        if old is None:
            os.environ.pop("HERMIT_REDTEAM_BUS_TOKEN", None)
        for rt in runtimes.values():
            rt.close()

    def delivered(m: InboundMessage) -> str:
        items = channels[("telegram", m.account_id)].items
        return "\n".join(json.dumps([i.kind, i.text]) for i in items
                         if isinstance(i, OutboundMessage) and i.target.peer_id == m.peer_id)

    got = {name: delivered(m) for name, m in messages.items()}
    # The positive control: the owner's own DM reads the owner's files (and runs the owner's shell).
    assert CANARIES["memory"] in got["owner_dm"] and CANARIES["private"] in got["owner_dm"], got["owner_dm"][:2000]
    for name, text in got.items():
        if name == "owner_dm":
            continue
        leaked = [c for c in CANARIES.values() if c in text]
        assert not leaked, (name, leaked, text[:2000])
    for name in ("owner_in_group", "paired_contact", "allow_from_contact", "open_stranger", "group_member",
                 "second_agent_contact"):
        assert "I found:" in got[name], (name, got[name][:500])  # its turn ran, every hostile call with it
    assert '"pairing"' in got["unpaired_stranger"] and "I found:" not in got["unpaired_stranger"]
    assert "I found:" not in got["not_allowed"]
    ran = {k for k in keys if k is not None}
    assert sum(is_main_session_key(k) for k in ran) == 1, ran  # only the owner's DM reached the main session
    assert not any("555" in k or "556" in k for k in ran), ran  # nobody let in, no turn
    assert any(k.startswith("agent:fam:") for k in ran), ran


def test_an_mcp_client_gets_nothing_private(tmp_path: Path) -> None:
    """The MCP server (an owner's program, not sharing private memory) given every path and search of the
    runtime matrix (tests/redteamworld.py): shared notes only."""
    got = rw.mcp_scenario(tmp_path / "state")
    leaked = [(what, rw.leaks(text), text[:300]) for what, text in got if rw.leaks(text)]
    assert not leaked, leaked
    assert any("ramen place" in text for _, text in got)  # shared notes do come back
    assert len(got) > 90
