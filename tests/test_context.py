"""Context assembly: system prompt sections, project context rules, history repair, the /context report,
and the fixed-prompt budget."""

from __future__ import annotations

import re
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agenthelpers import NOW, fixed_clock, load_offline
from conftest import write
from hermit.agent.context import (
    INTERRUPTED_RESULT,
    MEMORY_RECALL,
    PromptInputs,
    build_system_prompt,
    includes_long_term_memory,
    is_silent,
    load_history,
    repair_tool_pairs,
)
from hermit.agent.runtime import AgentRuntime
from hermit.errors import ConfigError
from hermit.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from hermit.models.base import ToolSchema
from hermit.sessions.keys import (
    channel_session_key,
    cron_session_key,
    dm_session_key,
    group_session_key,
    main_session_key,
    subagent_session_key,
)
from hermit.sessions.transcript import Transcript
from hermit.testing import ScriptedModel
from hermit.tokens import estimate_tokens
from hermit.workspace import ensure_workspace

MEMORY_TOOLS = (ToolSchema("memory_search", "Mandatory recall step: search."), ToolSchema("memory_get", "Read lines."))


def inputs(ws: Path, key: str = "agent:main:main", tools: tuple[ToolSchema, ...] = MEMORY_TOOLS,
           **kw: object) -> PromptInputs:
    base: dict[str, object] = dict(agent_id="main", session_key=key, workspace=ws, now=NOW,
                                   timezone=ZoneInfo("Europe/Paris"), timezone_name="Europe/Paris", tools=tools,
                                   sandboxed=False, model_ref="anthropic/claude-x")
    base.update(kw)
    return PromptInputs(**base)  # type: ignore[arg-type]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    ensure_workspace(w)
    write(w / "MEMORY.md", "# MEMORY\n- PRIVATE-FACT-1\n")
    return w


def test_system_prompt_sections(ws: Path) -> None:
    text = build_system_prompt(inputs(ws)).text
    assert text.startswith("You are a personal assistant running inside Hermit")
    assert "- memory_search: Mandatory recall step: search" in text
    assert "## Memory Recall\n" + MEMORY_RECALL in text
    assert "run memory_search; then memory_get only the lines you need; if confidence is low after searching, say " \
           "you checked" in text
    assert "today's daily log is memory/2026-01-20.md" in text
    assert f"Your working directory is {ws}" in text
    assert "2026-01-20 14:05 (Tuesday), time zone Europe/Paris (UTC+01:00)" in text
    assert "reply with exactly NO_REPLY and nothing else" in text
    assert "sandboxed" not in text


def test_no_memory_recall_without_memory_tools(ws: Path) -> None:
    text = build_system_prompt(inputs(ws, tools=(ToolSchema("read", "Read a text file."),))).text
    assert "Memory Recall" not in text and "- read: Read a text file" in text
    assert "## Tools" not in build_system_prompt(inputs(ws, tools=())).text


def test_project_context_order_missing_and_memory(ws: Path) -> None:
    (ws / "USER.md").unlink()
    text = build_system_prompt(inputs(ws)).text
    project = text[text.index("# Project Context"):]
    order = re.findall(r"^## (\S+\.md)$", project, flags=re.M)
    assert order == ["AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "HEARTBEAT.md", "BOOTSTRAP.md",
                     "MEMORY.md"]
    assert "## USER.md\n[missing: USER.md does not exist in the workspace]" in project
    assert "PRIVATE-FACT-1" in project


@pytest.mark.parametrize("key", [
    group_session_key("main", "telegram", "-100123"),
    channel_session_key("main", "slack", "C024BE91L"),
    dm_session_key("main", "telegram", "4242"),
    subagent_session_key("main", "run1"),
    cron_session_key("daily-brief"),
    group_session_key("main", "discord", "g1", thread_id="t1"),
    "agent:main:main:extra", "agent:main", "garbage", "",
])
def test_memory_md_never_injected_outside_the_main_session(ws: Path, key: str) -> None:
    assert not includes_long_term_memory(key)
    prompt = build_system_prompt(inputs(ws, key=key))
    assert "PRIVATE-FACT-1" not in prompt.text and "## MEMORY.md" not in prompt.text
    assert "not the main session" in prompt.text
    assert all("MEMORY" not in b.name for b in prompt.blocks)


def test_main_session_of_any_agent_gets_memory(ws: Path) -> None:
    assert includes_long_term_memory(main_session_key("work"))


def test_bootstrap_caps(ws: Path) -> None:
    write(ws / "SOUL.md", "H" * 20_000 + "M" * 5_000 + "T" * 5_000)
    prompt = build_system_prompt(inputs(ws, bootstrap_max_chars=10_000))
    assert "[… SOUL.md truncated: kept the first 7,000 and last 2,000 of 30,000 chars" in prompt.text
    block = next(b for b in prompt.blocks if b.name == "project: SOUL.md")
    assert block.note == "truncated from 30,000 chars" and block.chars < 10_000


def test_repair_tool_pairs() -> None:
    call_a, call_b = ToolCallPart("a", "read", {}), ToolCallPart("b", "exec", {})
    msgs = [
        UserMessage("hi"),
        AssistantMessage((call_a, call_b), "tool_use"),
        ToolResultMessage("b", "exec", "ok"),
        ToolResultMessage("zzz", "read", "orphan"),
        UserMessage("next"),
        AssistantMessage((ToolCallPart("c", "read", {}),), "tool_use"),
    ]
    out = repair_tool_pairs(msgs)
    kinds = [(type(m).__name__, getattr(m, "tool_call_id", "")) for m in out]
    assert kinds == [("UserMessage", ""), ("AssistantMessage", ""), ("ToolResultMessage", "b"),
                     ("ToolResultMessage", "a"), ("UserMessage", ""), ("AssistantMessage", ""),
                     ("ToolResultMessage", "c")]
    synthetic = out[3]
    assert isinstance(synthetic, ToolResultMessage) and synthetic.is_error and synthetic.content == INTERRUPTED_RESULT
    assert repair_tool_pairs(out) == out


def test_history_skips_and_reports_bad_entries(tmp_path: Path) -> None:
    t = Transcript.create(tmp_path / "s1.jsonl", cwd=tmp_path, fsync=False)
    t.append_message(UserMessage("hello").to_dict())
    t.append_message({"role": "wizard", "content": []})
    with (tmp_path / "s1.jsonl").open("a") as f:
        f.write("{not json\n")
    t.append_message(AssistantMessage().to_dict())
    t.append_compaction(summary="we talked about Lisbon", first_kept_entry_id=None, tokens_before=100)
    t.append_message(UserMessage("after").to_dict())
    h = load_history(Transcript.open(tmp_path / "s1.jsonl"))
    assert [m.text for m in h.messages if isinstance(m, UserMessage)][0].endswith("we talked about Lisbon")
    assert h.summary == "we talked about Lisbon"
    assert [m.text for m in h.messages][-1] == "after"
    t2 = Transcript.create(tmp_path / "s2.jsonl", cwd=tmp_path, fsync=False)
    t2.append_message(UserMessage("hello").to_dict())
    t2.append_message({"role": "wizard", "content": []})
    with (tmp_path / "s2.jsonl").open("a") as f:
        f.write("{not json\n")
    h3 = load_history(Transcript.open(tmp_path / "s2.jsonl"))
    assert [m.text for m in h3.messages] == ["hello"]
    assert any(":3: unreadable message" in p for p in h3.problems)
    assert any(":4:" in p and "not valid JSON" in p for p in h3.problems)


@pytest.mark.parametrize("text, silent", [("NO_REPLY", True), ("  NO_REPLY\n", True), ("NO_REPLY — quiet", True),
                                          ("ok then. NO_REPLY", True), ("No reply needed", False), ("", False),
                                          ("say NO_REPLY to skip", False)])
def test_is_silent(text: str, silent: bool) -> None:
    assert is_silent(text) is silent


def test_context_report_and_fixed_prompt_budget(tmp_path: Path) -> None:
    """The fixed prompt (system + tool schemas) with default templates stays ≤ 4,000 tokens."""
    loaded = load_offline(tmp_path / "home")
    rt = AgentRuntime(loaded.agent(), ScriptedModel(["hi"]), clock=fixed_clock, fsync=False)
    rt.run_turn("agent:main:main", "What's on my calendar tomorrow?")
    report = rt.context_report("agent:main:main", "What's on my calendar tomorrow?")
    names = [b.name for b in report.blocks]
    # No memory service here: the owner's session still reads the daily logs, so it is told what origin marks are,
    # and what its tools bring in is material, not its user's words (agent/untrusted_words.py).
    assert names[:9] == ["system: identity", "system: tools", "system: memory notes", "system: tool results",
                         "system: workspace", "system: date and time", "system: silent replies", "project: heading",
                         "project: AGENTS.md"]
    turn = rt.prepare("agent:main:main")
    system_tokens = sum(b.tokens for b in report.blocks if b.name.startswith(("system:", "project:")))
    assert abs(system_tokens - estimate_tokens(turn.system.text)) <= len(turn.system.blocks)
    assert "project: MEMORY.md" in names and "tool schemas (4)" in names
    assert names[-2:] == ["history (2 messages)", "current message"]
    assert 1000 < report.fixed_tokens <= 4000
    assert report.total_tokens == sum(b.tokens for b in report.blocks)
    rendered = report.render(200_000)
    assert "fixed prompt (system + tools)" in rendered and "200,000-token window" in rendered


def test_timezone_errors_are_config_errors(tmp_path: Path) -> None:
    loaded = load_offline(tmp_path / "home", defaults={"timezone": "Mars/Olympus"})
    with pytest.raises(ConfigError, match="unknown time zone"):
        AgentRuntime(loaded.agent(), ScriptedModel([]), fsync=False)
