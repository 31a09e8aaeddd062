"""The pre-compaction memory flush: the append-only rule in the tool layer, prompts, once per cycle, skips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenthelpers import TODAY
from conftest import write
from hermit.agent.compaction import SUMMARY_MARKER
from hermit.agent.flush import flush_policy, flush_prompts, flush_system
from hermit.config.schema import (
    DEFAULT_MEMORY_FLUSH_PROMPT,
    DEFAULT_MEMORY_FLUSH_SYSTEM_PROMPT,
    MemoryFlushConfig,
)
from hermit.errors import ProviderError
from hermit.messages import AssistantMessage, ToolCallPart
from hermit.models.base import ModelProfile, ModelRequest
from hermit.sessions.keys import main_session_key
from hermit.testing import FunctionModel
from sessionhelpers import SMALL_COMPACTION, SMALL_WINDOW, runtime, small_config, user_text

MAIN = main_session_key("main")
PROFILE = ModelProfile("scripted", "small", context_window=SMALL_WINDOW)
DAILY = f"memory/{TODAY}.md"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    write(home / "workspace" / DAILY, "# today\n- first note\n")
    return home


def test_flush_tools_only_append_to_todays_log(ws: Path) -> None:
    rt = runtime(small_config(ws), FunctionModel(lambda r: "ok", profile=PROFILE))
    workspace = rt.agent.workspace
    tools = rt.tools_for(MAIN, write_policy=flush_policy(workspace, TODAY), exec_enabled=False)
    assert "exec" not in tools.names

    def call(name: str, **args: Any) -> tuple[str, bool]:
        result = tools.run(ToolCallPart("c", name, args)).result
        return result.content, result.is_error

    refused = [
        call("write", path="MEMORY.md", content="# wiped\n"),
        call("write", path=DAILY, content="- replaced everything\n"),
        call("edit", path=DAILY, old="- first note", new="- rewritten note"),
        call("write", path=f"memory/{TODAY}-1430.md", content="- a fragment file\n"),
        call("write", path="SOUL.md", content="be evil"),
        call("edit", path="AGENTS.md", old="# AGENTS.md", new="# AGENTS.md (edited)"),
        call("write", path=f"memory/../memory/{TODAY}.md.bak", content="x"),
    ]
    assert all(err and "write policy" in text for text, err in refused), refused
    assert "append only" in refused[1][0] and "only appending to" in refused[0][0]
    assert call("write", path=DAILY, content="# today\n- first note\n- second note\n") == (
        f"overwrote {DAILY} (111 bytes)", False)
    # The flush's notes are the main session's: owner-only blocks (memory/policy/audience.py). Growing its own
    # block from inside is no longer an append, so the flush's rule refuses it; appending works.
    text, err = call("edit", path=DAILY, old="- second note\n", new="- second note\n- third note\n")
    assert err and "append only" in text
    assert call("write", path=DAILY, content="- third note\n", append=True)[1] is False
    owner = '<!-- origin session="agent:main:main" audience="owner" -->'
    # An appended block starts after a blank line (durable.line_lead: nothing written outside the lock
    # meanwhile can end up on its marker's line); the write that only added "- second note" appended it.
    assert (workspace / DAILY).read_text() == (f"# today\n- first note\n\n{owner}\n- second note\n<!-- /origin -->\n"
                                               f"\n{owner}\n- third note\n<!-- /origin -->\n")
    assert not (workspace / f"memory/{TODAY}-1430.md").exists()
    assert (workspace / "MEMORY.md").read_text().startswith("# MEMORY.md")
    # A missing daily log may be created (that is an append to an empty file).
    (workspace / DAILY).unlink()
    assert call("write", path=DAILY, content="- fresh\n")[1] is False


def test_prompts_default_custom_and_no_reply_hint() -> None:
    system, prompt = flush_prompts(MemoryFlushConfig(), "2026-03-04")
    assert system == DEFAULT_MEMORY_FLUSH_SYSTEM_PROMPT
    assert prompt == DEFAULT_MEMORY_FLUSH_PROMPT.replace("YYYY-MM-DD", "2026-03-04")
    assert "memory/2026-03-04.md" in prompt and prompt.endswith("reply with NO_REPLY.")
    _, custom = flush_prompts(MemoryFlushConfig(prompt="Write down what matters in memory/YYYY-MM-DD.md."),
                              "2026-03-04")
    assert custom == "Write down what matters in memory/2026-03-04.md. If nothing to store, reply with NO_REPLY."
    _, kept = flush_prompts(MemoryFlushConfig(prompt="Save notes, or answer NO_REPLY."), "2026-03-04")
    assert kept == "Save notes, or answer NO_REPLY."
    full = flush_system("BASE", MemoryFlushConfig(), "2026-03-04")
    assert full.startswith("BASE\n\n## Memory Flush\nPre-compaction memory flush turn.")
    assert "may only append to memory/2026-03-04.md" in full
    chat = flush_system("BASE", MemoryFlushConfig(), "2026-03-04", owner=False)  # a chat's edits are refused
    assert "only write with append: true adds to memory/2026-03-04.md" in chat and "edit is unavailable" in chat


def _model(log: list[str]) -> FunctionModel:
    def reply(request: ModelRequest) -> Any:
        last = request.messages[-1].to_dict()
        text = str(last.get("content"))
        if SUMMARY_MARKER in request.system:
            log.append("summary")
            return "## Goals\n- keep going"
        if "Pre-compaction memory flush" in text:
            log.append("flush")
            return "I saved nothing new. NO_REPLY"
        log.append("turn")
        return "ack"

    return FunctionModel(reply, profile=PROFILE)


@pytest.mark.parametrize("flags", [{"heartbeat": True}, {"read_only": True}, {}])
def test_flush_skipped_for_heartbeats_and_read_only_sessions(ws: Path, flags: dict[str, bool]) -> None:
    log: list[str] = []
    rt = runtime(small_config(ws, defaults={"compaction": SMALL_COMPACTION}), _model(log))
    results = [rt.run_turn(MAIN, user_text(n), **flags) for n in range(1, 12)]
    assert log.count("summary") == 1  # compaction happens in every case
    assert log.count("flush") == (0 if flags else 1)
    assert all(r.reply == "ack" for r in results)
    if flags.get("read_only"):
        write_attempt = rt.prepare(MAIN, read_only=True).tools.run(
            ToolCallPart("w", "write", {"path": "notes.md", "content": "x"})).result
        assert write_attempt.is_error and "read-only" in write_attempt.content


def test_once_per_cycle_and_again_after_the_next_compaction(ws: Path) -> None:
    log: list[str] = []
    rt = runtime(small_config(ws, defaults={"compaction": SMALL_COMPACTION}), _model(log))
    for n in range(1, 40):
        rt.run_turn(MAIN, user_text(n))
    record = rt.session(MAIN)
    assert record is not None and record.compaction_count >= 3
    # One flush per compaction cycle: before each compaction, never twice in a row.
    sequence = [x for x in log if x != "turn"]
    assert sequence[:2] == ["flush", "summary"]
    assert all(not (a == b == "flush") for a, b in zip(sequence, sequence[1:], strict=False))
    assert sequence.count("flush") == record.compaction_count + (1 if sequence[-1] == "flush" else 0)
    assert record.memory_flush_compaction_count in (record.compaction_count, record.compaction_count - 1)


def test_flush_disabled_and_failure_does_not_block_compaction(ws: Path) -> None:
    log: list[str] = []
    calls = {"flush": 0}

    def reply(request: ModelRequest) -> Any:
        if "Pre-compaction memory flush" in str(request.messages[-1].to_dict().get("content")):
            calls["flush"] += 1
            from hermit.errors import ProviderError

            raise ProviderError("flush request failed", "retry")
        return _model(log).fn(request)

    rt = runtime(small_config(ws, defaults={"compaction": SMALL_COMPACTION}), FunctionModel(reply, profile=PROFILE))
    results = [rt.run_turn(MAIN, user_text(n)) for n in range(1, 12)]
    assert calls["flush"] >= 1 and log.count("summary") == 1 and sum(r.compactions for r in results) == 1
    assert sum(r.flushes for r in results) == 0
    off = {**SMALL_COMPACTION, "memory_flush": {"enabled": False}}
    log2: list[str] = []
    rt2 = runtime(small_config(ws.parent / "h2", defaults={"compaction": off}), _model(log2))
    for n in range(1, 12):
        rt2.run_turn(MAIN, user_text(n))
    assert "flush" not in log2 and log2.count("summary") == 1


def test_flush_still_precedes_compaction_when_its_threshold_lies_above(ws: Path) -> None:
    # reserve_tokens above the floor: compaction (at 7,000) comes before the soft threshold (7,500).
    cfg = {**SMALL_COMPACTION, "reserve_tokens": 3000, "memory_flush": {"soft_threshold_tokens": 500}}
    log: list[str] = []
    rt = runtime(small_config(ws, defaults={"compaction": cfg}), _model(log))
    for n in range(1, 12):
        rt.run_turn(MAIN, user_text(n))
    events = [x for x in log if x != "turn"]
    assert events[:2] == ["flush", "summary"]
    assert log[log.index("flush") + 1] == "summary"  # in the same turn, right before the compaction


class Killed(BaseException):
    """The process dies here (kill -9): nothing in Hermit catches it, so nothing after this point runs."""


FACT = "- FLUSHED-FACT: the passport expires 2027-03-01\n"


def _writing_model(log: list[str], die: str | None) -> FunctionModel:
    """The flush writes FACT with append, then answers NO_REPLY. `die`: "before-write" kills the process in
    the flush's first model call, "after-write" in its follow-up (the note has landed), "error-after-write"
    makes that follow-up fail with a provider error."""
    def reply(request: ModelRequest) -> Any:
        last = request.messages[-1].to_dict()
        if SUMMARY_MARKER in request.system:
            log.append("summary")
            return "## Goals\n- keep going"
        if "Pre-compaction memory flush" in str(last.get("content")):
            log.append("flush")
            if die == "before-write":
                raise Killed
            return AssistantMessage([ToolCallPart("w1", "write", {"path": DAILY, "content": FACT, "append": True})])
        if last.get("role") == "toolResult":
            log.append("flush-followup")
            if die == "after-write":
                raise Killed
            if die == "error-after-write":
                raise ProviderError("the provider went away", "retry")
            return "NO_REPLY"
        log.append("turn")
        return "ack"

    return FunctionModel(reply, profile=PROFILE)


def _turns_until_killed(rt: Any, count: int) -> int:
    for n in range(1, count):
        try:
            rt.run_turn(MAIN, user_text(n))
        except Killed:
            return n
    raise AssertionError("the flush never ran")


def test_a_flush_killed_after_its_write_is_not_run_again_after_a_restart(ws: Path) -> None:
    """kill -9 while the flush's follow-up model call is in flight, its write(append) already done: the
    restarted process must not flush this cycle again (that appended the same notes twice)."""
    config = small_config(ws, defaults={"compaction": SMALL_COMPACTION})
    first: list[str] = []
    killed_at = _turns_until_killed(runtime(config, _writing_model(first, "after-write")), 12)
    assert first[-2:] == ["flush", "flush-followup"] and (ws / "workspace" / DAILY).read_text().count(FACT) == 1
    after: list[str] = []
    rt = runtime(small_config(ws, defaults={"compaction": SMALL_COMPACTION}), _writing_model(after, None))
    results = [rt.run_turn(MAIN, user_text(n)) for n in range(killed_at, killed_at + 4)]
    assert "flush" not in after and after.count("summary") == 1  # compaction still comes, without a 2nd flush
    assert sum(r.flushes for r in results) == 0 and sum(r.compactions for r in results) == 1
    assert (ws / "workspace" / DAILY).read_text().count(FACT) == 1


def test_a_flush_killed_before_writing_runs_again_after_a_restart(ws: Path) -> None:
    config = small_config(ws, defaults={"compaction": SMALL_COMPACTION})
    first: list[str] = []
    killed_at = _turns_until_killed(runtime(config, _writing_model(first, "before-write")), 12)
    assert first[-1] == "flush" and FACT not in (ws / "workspace" / DAILY).read_text()
    after: list[str] = []
    rt = runtime(small_config(ws, defaults={"compaction": SMALL_COMPACTION}), _writing_model(after, None))
    results = [rt.run_turn(MAIN, user_text(n)) for n in range(killed_at, killed_at + 4)]
    assert after.count("flush") == 1 and sum(r.flushes for r in results) == 1
    assert (ws / "workspace" / DAILY).read_text().count(FACT) == 1


def test_a_flush_failing_after_its_write_is_not_retried(ws: Path) -> None:
    log: list[str] = []
    rt = runtime(small_config(ws, defaults={"compaction": SMALL_COMPACTION}), _writing_model(log, "error-after-write"))
    for n in range(1, 14):
        rt.run_turn(MAIN, user_text(n))
    events = [x for x in log if x != "turn"]
    assert events[:3] == ["flush", "flush-followup", "summary"]  # not flushed again before the compaction
    assert (ws / "workspace" / DAILY).read_text().count(FACT) == events.count("flush")  # one note per cycle
