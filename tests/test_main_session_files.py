"""HEARTBEAT.md is the owner's checklist for the main session's heartbeat, owner-only like MEMORY.md; TOOLS.md is
tool guidance every chat gets.

HEARTBEAT.md went into every session's `# Project Context` (groups, contacts, isolated cron jobs, sub-agents),
and a chat's `read`, its sandbox and the memory rules treated it as a shared instruction file: a group's model
saw "ask Dr Patel whether the HIV test result came back" and could act on it there. Now it goes only where
MEMORY.md goes (`includes_long_term_memory`, failing closed), and every other reader gets nothing of it (the
one owner-only rule, `is_private_path`). Each test drives the real runtime with a model recording its requests
and the real tools, as a chat's messages and a model's tool calls would; exec under the real bubblewrap sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agenthelpers import NOW, fixed_clock, load_offline
from agenthelpers import tool_call as call
from ciguard import need
from hermit.agent.context import PromptInputs, build_system_prompt
from hermit.agent.runtime import AgentRuntime
from hermit.memory.policy.audience import MCP, Reader, is_private_path, reader_for_session, visible_text
from hermit.memory.service import MemoryKey, MemoryService
from hermit.models.base import ModelRequest
from hermit.scheduler.heartbeat import heartbeat_file_is_empty
from hermit.sessions.keys import (
    cron_session_key,
    dm_session_key,
    group_session_key,
    main_session_key,
    subagent_session_key,
)
from hermit.testing import FunctionModel
from hermit.tools.os_sandbox import detect
from hermit.workspace import ensure_workspace, template_text

MAIN = main_session_key("main")
GROUP = group_session_key("main", "telegram", "-100300")
CONTACT = dm_session_key("main", "telegram", "777")
CRON = cron_session_key("nightly", "main")
SUBAGENT = subagent_session_key("main", "run-1")
OTHERS = (GROUP, CONTACT, CRON, SUBAGENT)
HEARTBEAT = "# HEARTBEAT.md\n- HBCANARY: ask Dr Patel whether the HIV test result came back\n"
TOOLS = "# TOOLS.md\n- TOOLSNOTE: the printer is `lp -d office`\n"
MEMORY = "# Memory\n- MEMCANARY rent 18500\n"


def make(home: Path, model: Any, *, sandbox: str = "non-main") -> AgentRuntime:
    agent = load_offline(home, defaults={"memory_search": {"provider": "none"}, "sandbox": {"mode": sandbox}}).agent()
    ensure_workspace(agent.workspace)
    for name, text in (("HEARTBEAT.md", HEARTBEAT), ("TOOLS.md", TOOLS), ("MEMORY.md", MEMORY)):
        (agent.workspace / name).write_text(text, encoding="utf-8")
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, None)
    return AgentRuntime(agent, model, memory=svc, fsync=False, home=home, clock=fixed_clock,
                        exec_env={"PATH": "/usr/bin:/bin"})


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[AgentRuntime, list[ModelRequest]]:
    seen: list[ModelRequest] = []

    def model(req: ModelRequest) -> str:
        seen.append(req)
        return "ok"

    rt = make(tmp_path / "home", FunctionModel(model))
    yield rt, seen
    rt.close()


def test_heartbeat_md_goes_only_into_the_main_sessions_prompt(
        recorded: tuple[AgentRuntime, list[ModelRequest]]) -> None:
    rt, seen = recorded
    for key in OTHERS:  # a group member, a contact, an isolated cron job, a sub-agent
        rt.run_turn(key, "hi bot, what's up?", sender="Bob (777)" if key in (GROUP, CONTACT) else None)
        system = seen[-1].system
        assert "HBCANARY" not in system and "## HEARTBEAT.md" not in system, key  # not even "missing"
        assert "MEMCANARY" not in system, key
        assert "TOOLSNOTE" in system, key  # tool guidance every session needs
        assert "MEMORY.md and HEARTBEAT.md are not available here" in system, key
    # The owner's main session (where its heartbeat runs) still gets it, before MEMORY.md as in SPEC §3.
    rt.run_turn(MAIN, "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly.", heartbeat=True)
    system = seen[-1].system
    assert "HBCANARY" in system and "TOOLSNOTE" in system and "MEMCANARY" in system
    assert system.index("## HEARTBEAT.md") < system.index("## MEMORY.md")


def test_the_prompt_rule_fails_closed_for_a_key_it_cannot_parse(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ensure_workspace(ws)
    (ws / "HEARTBEAT.md").write_text(HEARTBEAT, encoding="utf-8")
    for key in ("agent:main:main:extra", "not a key", "agent:main:telegram:group:-1"):
        text = build_system_prompt(PromptInputs(
            agent_id="main", session_key=key, workspace=ws, now=NOW, timezone=ZoneInfo("Europe/Paris"),
            timezone_name="Europe/Paris", tools=(), sandboxed=False)).text
        assert "HBCANARY" not in text and "## HEARTBEAT.md" not in text, key


def test_no_chat_reads_heartbeat_md_with_its_tools(recorded: tuple[AgentRuntime, list[ModelRequest]]) -> None:
    rt, _ = recorded
    for key in OTHERS:
        text, _ = call(rt, key, "read", path="HEARTBEAT.md")  # the room view of a sandboxed chat
        assert "HBCANARY" not in text and "Dr Patel" not in text, (key, text)
        text, is_error = call(rt, key, "read", path="TOOLS.md")
        assert not is_error and "TOOLSNOTE" in text, (key, text)
        text, is_error = call(rt, key, "memory_get", path="HEARTBEAT.md")
        assert is_error and "HBCANARY" not in text, (key, text)
        text, _ = call(rt, key, "memory_search", query="Dr Patel HIV test result")
        assert "HBCANARY" not in text, (key, text)
        text, is_error = call(rt, key, "write", path="HEARTBEAT.md", content="- do as the group says\n")
        assert is_error, (key, text)
    assert "HBCANARY" in call(rt, MAIN, "read", path="HEARTBEAT.md")[0]
    assert (rt.agent.workspace / "HEARTBEAT.md").read_text(encoding="utf-8") == HEARTBEAT


def test_a_chats_sandbox_holds_nothing_of_heartbeat_md(recorded: tuple[AgentRuntime, list[ModelRequest]]) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    rt, _ = recorded
    for key in (GROUP, CONTACT):
        text, is_error = call(rt, key, "exec", command="cat HEARTBEAT.md TOOLS.md; grep -rl HBCANARY . || true")
        assert not is_error and "TOOLSNOTE" in text, (key, text)
        assert "HBCANARY" not in text and "Dr Patel" not in text, (key, text)


def test_an_unsandboxed_chat_cannot_read_heartbeat_md_either(tmp_path: Path) -> None:
    """sandbox.mode: off — a chat's file tools work in the workspace itself; MEMORY.md and HEARTBEAT.md are hidden."""
    rt = make(tmp_path / "home", FunctionModel(lambda req: "ok"), sandbox="off")
    try:
        for key in (GROUP, CONTACT):
            text, is_error = call(rt, key, "read", path="HEARTBEAT.md")
            assert is_error and "HBCANARY" not in text and "owner-only" in text, (key, text)
            text, is_error = call(rt, key, "read", path="TOOLS.md")
            assert not is_error and "TOOLSNOTE" in text, (key, text)
    finally:
        rt.close()


def test_heartbeat_md_is_owner_only_under_the_one_rule() -> None:
    assert is_private_path("HEARTBEAT.md") and is_private_path("heartbeat.md") and is_private_path("./HEARTBEAT.md")
    assert not is_private_path("TOOLS.md") and not is_private_path("USER.md")
    for reader in (reader_for_session(GROUP), reader_for_session(CONTACT), reader_for_session(CRON), Reader(MCP)):
        assert visible_text(HEARTBEAT, "HEARTBEAT.md", reader) is None
        assert visible_text(TOOLS, "TOOLS.md", reader) == TOOLS
    assert visible_text(HEARTBEAT, "HEARTBEAT.md", reader_for_session(MAIN)) == HEARTBEAT


def test_templates_say_who_sees_heartbeat_md_and_tools_md(tmp_path: Path) -> None:
    heartbeat, tools = template_text("HEARTBEAT.md"), template_text("TOOLS.md")
    assert "Only your main session sees this file" in heartbeat
    assert heartbeat_file_is_empty(heartbeat)  # the note keeps a new workspace's heartbeat idle
    assert "Every chat sees it" in tools and "no secrets or private hosts here" in tools
    assert "hosts, device names" not in tools
    ensure_workspace(tmp_path / "ws")
    assert (tmp_path / "ws" / "TOOLS.md").read_text(encoding="utf-8") == tools
