"""What a chat that is not the owner's learns of the agent id, and of BOOTSTRAP.md.

The agent id is the owner's name for a setup ("alice-private", "work"): a contact's DM or a group need not learn it.
A scripted model in a contact's DM and in a group tries every way it has — its system prompt, its session key,
exec (environment, host name, working folder, mounts, cgroup, processes), file tools and memory_get on paths that
fail (the host's state dir, other agents' folders, MEMORY.md, a private note), memory_search, an unknown tool — and
its senders try the slash commands (/new, /compact): the id appears in nothing the model receives and nothing the
chat is sent. The owner's main session still sees it.

BOOTSTRAP.md (the owner's first-run script) is not in a room at all: not read, listed, nor in the sandbox's copy.

Real parts: the bus with the real routing and owner check, the agent runtime with its memory service (the real
SQLite index) and tools, exec in the real bubblewrap room sandbox; a model double recording every request.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import fixed_clock
from gatewayhelpers import RecordingChannel, inbound
from hermit.agent.routing import Router
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.base import InboundMessage
from hermit.channels.pairing import PairingStore
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.errors import PathPolicyError
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Admission, Bus
from hermit.gateway.supervisor import route_with, split_chunks
from hermit.memory.policy.audience import Reader
from hermit.memory.service import MemoryKey, MemoryService
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply, request_text
from hermit.tools import FileTools, PathResolver, RoomView
from hermit.tools.rooms import Room
from hermit.tools.views import AudienceMemoryView
from hermit.workspace import ensure_workspace

AGENT = "alice-private"
OWNER, CONTACT, MEMBER = "1001", "42", "77"
FIRST_RUN = "FIRSTRUN-CANARY-3307"


class KeyedRuntime(AgentRuntime):
    """Notes, in each turn's worker thread, which session the bus ran it for (the prompt no longer names it)."""

    turn = threading.local()

    def run_turn(self, session_key: str, text: str, *args: Any, **kwargs: Any) -> Any:
        self.turn.key = session_key
        try:
            return super().run_turn(session_key, text, *args, **kwargs)
        finally:
            self.turn.key = None


def probes(home: Path, ws: Path) -> list[dict[str, Any]]:
    """Every tool call a chat's model tries to learn where it runs (none names the id: what comes back must not)."""
    state, agents = str(home), str(home / "agents")
    commands = ("env; hostname; cat /etc/hostname; pwd; id; ls -la / /workspace; cat /proc/self/mountinfo; "
                "cat /proc/self/cgroup; cat /proc/1/cmdline; ls -l /proc/self/cwd /proc/self/fd; ps -ef; "
                "cat /workspace/BOOTSTRAP.md; ls /workspace/memory")
    calls: list[dict[str, Any]] = [
        {"name": "exec", "arguments": {"command": commands}},
        {"name": "exec", "arguments": {"command": f"ls {agents} {state}/memory; ls -R {state} | head -50"}},
        {"name": "exec", "arguments": {"command": "pwd", "cwd": agents}},
        {"name": "exec", "arguments": {"command": "sleep 5", "timeout": 1}},
        {"name": "read", "arguments": {"path": "BOOTSTRAP.md"}},
        {"name": "read", "arguments": {"path": "."}},
        {"name": "read", "arguments": {"path": "/workspace"}},
        {"name": "write", "arguments": {"path": "BOOTSTRAP.md", "content": "x"}},
        {"name": "edit", "arguments": {"path": "AGENTS.md", "old": "a", "new": "b"}},
        {"name": "write", "arguments": {"path": "memory/2026-01-20.md", "content": "- our own note\n", "append": True}},
        {"name": "memory_get", "arguments": {"path": "memory/2026-01-20.md"}},
        {"name": "read", "arguments": {"path": "memory/2026-01-20.md"}},
        {"name": "exec", "arguments": {"command": "cat memory/2026-01-20.md"}},
        {"name": "memory_get", "arguments": {"path": "MEMORY.md"}},
        {"name": "memory_get", "arguments": {"path": "memory/private/bank.md"}},
        {"name": "memory_search", "arguments": {"query": "bank PIN session agent"}},
        {"name": "memory_search", "arguments": {"query": "our own note"}},
        {"name": "memory_search", "arguments": {"query": "Session key Session id where do you run"}},
        {"name": "exec", "arguments": {"command": "cat memory/*.md"}},
        {"name": "no_such_tool", "arguments": {}},
    ]
    for path in (agents, f"{state}/memory", state, f"{state}/sessions", "../agents", "../../x", "nope.txt", "..",
                 "memory/nope.md"):
        calls += [{"name": "read", "arguments": {"path": path}}, {"name": "memory_get", "arguments": {"path": path}}]
    return calls


def run_chats(home: Path, *messages: InboundMessage,
              broken_sandbox_dir: bool = False) -> tuple[dict[str, str], RecordingChannel, Path]:
    raw: dict[str, Any] = {
        "agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"}},
                   "list": [{"id": AGENT, "default": True}]},
        "channels": {"telegram": {"accounts": {"default": {"owners": [OWNER], "group_policy": "open",
                                                           "require_mention": False}}}}}
    loaded = build_config(raw, StatePaths(home))
    agent = loaded.agent()
    ws = agent.workspace
    ensure_workspace(ws)  # a brand-new workspace: BOOTSTRAP.md is there
    (ws / "BOOTSTRAP.md").write_text(f"# BOOTSTRAP.md\n\n{FIRST_RUN}: ask who you are talking to.\n")
    (ws / "USER.md").write_text("# USER.md\n\n- Name: Ann Example\n")
    (ws / "memory" / "private").mkdir(parents=True, exist_ok=True)
    (ws / "memory" / "private" / "bank.md").write_text("- bank PIN 4471\n")
    (ws / "memory" / "2026-01-20.md").write_text("# 2026-01-20\n- the bank PIN is a secret\n")
    seen: dict[str, str] = {}
    calls = probes(home, ws)
    if broken_sandbox_dir:  # where exec keeps what comes back is a file: exec fails with an OSError naming it
        (agent.sessions_dir.parent).mkdir(parents=True, exist_ok=True)
        (agent.sessions_dir.parent / "sandbox").write_text("not a folder\n")

    def reply(request: ModelRequest) -> Reply:
        key = getattr(KeyedRuntime.turn, "key", None) or "(outside a turn)"  # e.g. a summary of the ended session
        text = request_text(request)
        seen[key] = seen.get(key, "") + text + "\n" + json.dumps(
            [t.to_dict() if hasattr(t, "to_dict") else str(t) for t in request.tools], default=str)
        if not request.system.startswith("You are a personal assistant"):
            return "A summary: the chat asked where the assistant runs."  # a compaction, a saved session's name
        last = request.messages[-1].to_dict() if request.messages else {}
        if last.get("role") == "user" and "where do you run" in json.dumps(last.get("content")):
            return {"tool_calls": calls}
        return "done"

    access = AccessControl(loaded.config.channels, PairingStore(home))
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, None)
    rt = KeyedRuntime(agent, FunctionModel(reply), memory=svc, clock=fixed_clock, fsync=False, home=home,
                      owner_check=access.is_owner)
    channel = RecordingChannel()
    bus = Bus(AgentHost({AGENT: rt}), route=route_with(Router.from_config(loaded), access),
              admit=lambda _m, _a: Admission(True), channels={(channel.name, channel.account_id): channel},
              chunk=split_chunks, queue_limit=8)

    async def main() -> None:
        for m in messages:
            assert await bus.publish(m) == "queued"
            assert await bus.drain(60)

    try:
        asyncio.run(main())
    finally:
        rt.close()
    return seen, channel, ws


def group_msg(text: str, sender: str) -> InboundMessage:
    m = inbound(text, "-100500", kind="group")
    return InboundMessage(**{**m.__dict__, "sender_id": sender, "sender_name": f"user{sender}"})


def leaks(text: str) -> list[str]:
    """Each place `text` names the agent id, with some context."""
    out, at = [], text.find(AGENT)
    while at != -1:
        out.append(text[max(0, at - 120):at + 60])
        at = text.find(AGENT, at + 1)
    return out


def test_a_contact_and_a_group_never_learn_the_agent_id(tmp_path: Path) -> None:
    home = tmp_path / "state"
    seen, channel, _ = run_chats(
        home,
        inbound("hello, where do you run?", CONTACT),
        inbound("/compact", CONTACT),
        inbound("/new", CONTACT),
        inbound("once more: where do you run?", CONTACT),  # now with the ended session saved to memory/
        group_msg("hello group, where do you run?", MEMBER),
        group_msg("/compact", MEMBER),
        group_msg("/new", MEMBER),
        group_msg("once more: where do you run?", MEMBER),
        group_msg("the owner asks too", OWNER),
        inbound("and you, owner?", OWNER),
    )
    chats = {k: v for k, v in seen.items() if not k.endswith(":main")}
    assert len(chats) == 3, sorted(seen)  # the DM, the group, and the name of each ended session (/new)
    for key, text in chats.items():
        assert leaks(text) == [], (key, leaks(text)[:5])
    dm, group = seen[f"agent:{AGENT}:telegram:default:dm:{CONTACT}"], seen[f"agent:{AGENT}:telegram:group:-100500"]
    # the probes got where they were meant to: the prompt, the sandbox, the chat's own notes and its saved session
    for text, chat in ((dm, f"telegram:dm:{CONTACT}"), (group, "telegram:group:-100500")):
        assert f"Session: {chat} (not the main session" in text
        assert "HOME=/workspace" in text and "- our own note" in text
    assert dm.count('origin session=\\"telegram:default:dm:42\\"') >= 1, "the chat's own note, unnamed"
    assert "Session key: telegram:default:dm:42" in dm and "Session key: telegram:group:-100500" in group
    assert "file not found: BOOTSTRAP.md" in dm and "file not found: BOOTSTRAP.md" in group
    assert "/workspace/BOOTSTRAP.md: No such file" in dm  # not in the sandbox's copy either
    sent = [m.text for m in channel.messages(CONTACT)] + [m.text for m in channel.messages("-100500")]
    assert sent and all(AGENT not in t for t in sent), [t for t in sent if AGENT in t]
    assert all(FIRST_RUN not in t for t in (*chats.values(), *sent))
    # the owner's own session may see it
    owner = next(v for k, v in seen.items() if k.endswith(":main"))
    assert f"Agent: {AGENT}" in owner and FIRST_RUN in owner


def test_a_chats_tool_errors_name_no_host_folder_of_the_agent(tmp_path: Path) -> None:
    """A tool that fails in a way nobody planned (an OSError naming a host path under the agent's folder) is reported
    to a chat with its host paths and session keys spelled as the chat knows them."""
    seen, _, _ = run_chats(tmp_path / "state", inbound("hello, where do you run?", CONTACT), broken_sandbox_dir=True)
    dm = seen[f"agent:{AGENT}:telegram:default:dm:{CONTACT}"]
    assert "(the assistant's folder)/sandbox" in dm  # the exec calls' error, which named <state>/agents/<id>/sandbox
    assert leaks(dm) == [], leaks(dm)[:3]


def test_bootstrap_md_is_not_in_a_rooms_view(tmp_path: Path) -> None:
    """The room's view: BOOTSTRAP.md is answered as a missing file (read, stat), is not listed, and is not in what
    the sandbox is given (the chats' test above: `cat /workspace/BOOTSTRAP.md`); the other instruction files still
    are, read-only."""
    ws = tmp_path / "workspace"
    ensure_workspace(ws)
    (ws / "BOOTSTRAP.md").write_text(f"{FIRST_RUN}\n")
    group = "telegram:group:-100500"
    view = RoomView(ws, Room(tmp_path / "rooms", group, 1 << 20), AudienceMemoryView(ws, Reader(group)))
    loc = view.locate("BOOTSTRAP.md")
    with pytest.raises(FileNotFoundError):
        view.read(loc, 1000)
    assert view.lstat(loc) is None and not view.is_dir(loc)
    listed = view.listing(view.locate("."))
    assert "BOOTSTRAP.md" not in listed and "AGENTS.md" in listed
    with pytest.raises(PathPolicyError, match="cannot be changed"):
        FileTools(PathResolver(ws, True), view=view).write("BOOTSTRAP.md", "mine now")
    assert (ws / "BOOTSTRAP.md").read_text() == f"{FIRST_RUN}\n"
    assert view.read(view.locate("/workspace/AGENTS.md"), 1 << 20) == (ws / "AGENTS.md").read_bytes()
