"""Long sessions end to end through the fake provider: one silent flush, then compaction; overflow recovery;
a fact from the compacted turns found again through the sessions source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import TODAY
from conftest import write
from hermit.agent.compaction import SUMMARY_MARKER
from hermit.agent.flush import FLUSH_ENTRY
from hermit.agent.loop import AgentEvent, Notice, TextChunk
from hermit.errors import ContextOverflowError
from hermit.sessions.keys import main_session_key
from hermit.testing import FakeProvider
from sessionhelpers import (
    SMALL_COMPACTION,
    body_text,
    entries,
    fake_model,
    memory_service,
    requests_containing,
    runtime,
    small_config,
    user_text,
)

MAIN = main_session_key("main")
FLUSH_MARK = "Pre-compaction memory flush. Store durable memories now"
DAILY = f"memory/{TODAY}.md"
EXISTING = f"# {TODAY}\n- Morning: reviewed the release checklist.\n"
APPENDED = "- Decided: ship v2 on Friday after the load test (flush note).\n"
# The flush writes as the main session: its note lands owner-only (memory/policy/audience.py), after a blank
# line (an appended block's marker starts a line whatever is written outside the lock: durable.line_lead).
FLUSHED = f'\n<!-- origin session="agent:main:main" audience="owner" -->\n{APPENDED}<!-- /origin -->\n'
SUMMARY = ("## Goals\n- Finish the quarterly planning notes.\n## Progress\n- Turns 1-5 covered vendor contracts.\n"
           "## Identifiers\n- SUMMARY-TOKEN-93\n")


def flush_steps() -> list[dict[str, Any]]:
    """The flush turn: try to overwrite MEMORY.md and today's log (both refused), then append; NO_REPLY."""
    return [
        {"match": {"contains": FLUSH_MARK}, "tool_calls": [
            {"name": "write", "arguments": {"path": "MEMORY.md", "content": "# overwritten\n"}},
            {"name": "write", "arguments": {"path": DAILY, "content": APPENDED}},
            {"name": "write", "arguments": {"path": DAILY, "content": EXISTING + APPENDED}},
        ]},
        {"match": {"contains": FLUSH_MARK}, "text": "NO_REPLY"},
    ]


def summary_step(text: str = SUMMARY) -> dict[str, Any]:
    return {"match": {"contains": SUMMARY_MARKER}, "text": text}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    write(h / "workspace" / DAILY, EXISTING)
    write(h / "workspace" / "MEMORY.md", "# MEMORY.md\n- Prefers tea.\n")
    # The flush and compaction turns below are tuned to the prompt's size: pin the two instruction files whose
    # templates change most, so rewording a template does not move them.
    write(h / "workspace" / "HEARTBEAT.md", "# HEARTBEAT.md\n\n# Keep this file empty (or only comments) to skip "
          "heartbeat work.\n# Add short checklist items below for things to check on periodically.\n")
    write(h / "workspace" / "TOOLS.md", "# TOOLS.md — notes on tools\n\nLocal notes about tools and this machine: "
          "hosts, device names, preferred commands, quirks.\nSkills and tools define *how* tools work; this file "
          "is for *your* specifics.\n")
    return h


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_flush_once_then_compaction_then_summary_plus_kept_turns(home: Path, api: str) -> None:
    turns = 11
    script = [*flush_steps(), summary_step(), *[f"ack {n}" for n in range(1, turns + 1)]]
    with FakeProvider(script) as fake:
        loaded = small_config(home, fake, api, defaults={"compaction": SMALL_COMPACTION})
        rt = runtime(loaded, fake_model(loaded))
        results = []
        streamed: list[list[str]] = []
        notices: list[Notice] = []
        for n in range(1, turns + 1):
            chunks: list[str] = []
            streamed.append(chunks)

            def sink(e: AgentEvent, chunks: list[str] = chunks) -> None:
                if isinstance(e, TextChunk):
                    chunks.append(e.text)
                elif isinstance(e, Notice):
                    notices.append(e)

            results.append(rt.run_turn(MAIN, user_text(n), sink))
    # Exactly one silent flush turn (its two requests), before exactly one compaction.
    flush_requests = requests_containing(fake, FLUSH_MARK)
    summary_requests = requests_containing(fake, SUMMARY_MARKER)
    assert len(flush_requests) == 2 and flush_requests[1] == flush_requests[0] + 1
    assert len(summary_requests) == 1 and summary_requests[0] > flush_requests[1]
    assert [r.flushes for r in results].count(1) == 1 and sum(r.flushes for r in results) == 1
    assert sum(r.compactions for r in results) == 1
    flush_turn = next(i for i, r in enumerate(results) if r.flushes)
    compact_turn = next(i for i, r in enumerate(results) if r.compactions)
    assert flush_turn < compact_turn
    # The flush is never shown: every reply is the turn's own, nothing of the flush was streamed.
    assert [r.reply for r in results] == [f"ack {n}" for n in range(1, turns + 1)]
    assert all(r.delivered for r in results)
    assert "".join(streamed[flush_turn]) == f"ack {flush_turn + 1}"
    assert all("NO_REPLY" not in "".join(c) for c in streamed)
    # It appended to today's file; overwriting it or MEMORY.md was refused by the tool.
    ws = home / "workspace"
    assert (ws / DAILY).read_text() == EXISTING + FLUSHED
    assert (ws / "MEMORY.md").read_text() == "# MEMORY.md\n- Prefers tea.\n"
    results_seen = fake.requests[flush_requests[1]].body["messages"]
    flush_results = json.dumps(results_seen[-3:] if api == "openai" else results_seen[-1])
    assert flush_results.count("write policy") == 2 and "append only" in flush_results
    # The flush turn is on disk as custom entries, not as conversation messages.
    lines = entries(rt, MAIN)
    assert sum(1 for e in lines if e["type"] == "custom" and e["customType"] == FLUSH_ENTRY) == 6
    assert not any(FLUSH_MARK in json.dumps(e) for e in lines if e["type"] == "message")
    # The compaction entry, and what the next request carried.
    compactions = [e for e in lines if e["type"] == "compaction"]
    assert len(compactions) == 1
    comp = compactions[0]
    assert comp["summary"] == SUMMARY.strip() and comp["tokensBefore"] > comp["tokensAfter"] > 0
    assert comp["details"]["trigger"] == "auto"
    position = {e["id"]: i for i, e in enumerate(lines)}
    kept_from = position[comp["firstKeptEntryId"]]
    user_tags = [(i, json.dumps(e)[json.dumps(e).index("turn-"):][:7]) for i, e in enumerate(lines)
                 if e["type"] == "message" and e["message"]["role"] == "user"]
    summarised = [tag for i, tag in user_tags if i < kept_from]
    kept = [tag for i, tag in user_tags if kept_from <= i < position[comp["id"]]]
    assert summarised and kept and summarised[-1] < kept[0]
    after = fake.requests[summary_requests[0] + 1]
    sent = body_text(after)
    assert "SUMMARY-TOKEN-93" in sent and "Compacted History" in sent
    assert all(tag in sent for tag in kept)
    assert not any(tag in sent for tag in summarised)
    record = rt.session(MAIN)
    assert record is not None and record.compaction_count == 1 and record.memory_flush_compaction_count == 0
    assert [n.text for n in notices] == ["🧹 Auto-compaction complete (count 1)"]
    assert results[compact_turn].notices == ()  # compaction.verbose is off: only the event, for verbose UIs


def test_overflow_flushes_compacts_and_retries_the_request(home: Path) -> None:
    script = [*flush_steps(), summary_step(), "ack 1", "ack 2", "ack 3", "ack 4",
              {"error": "context_overflow"}, "recovered after compaction"]
    with FakeProvider(script) as fake:
        loaded = small_config(home, fake, "openai", defaults={"compaction": SMALL_COMPACTION})
        rt = runtime(loaded, fake_model(loaded))
        for n in range(1, 5):
            assert rt.run_turn(MAIN, user_text(n)).flushes == 0  # under the flush threshold
        result = rt.run_turn(MAIN, user_text(5))
    assert result.reply == "recovered after compaction" and result.delivered
    assert result.flushes == 1 and result.compactions == 1
    overflowed = next(r for r in fake.requests if r.step == 7)  # the step that answered with the overflow
    flush_requests = requests_containing(fake, FLUSH_MARK)
    summary_requests = requests_containing(fake, SUMMARY_MARKER)
    assert overflowed.index < flush_requests[0] < summary_requests[0] < fake.requests[-1].index
    retry = body_text(fake.requests[-1])
    assert "SUMMARY-TOKEN-93" in retry and "turn-05" in retry and "turn-01" not in retry
    lines = entries(rt, MAIN)
    comp = next(e for e in lines if e["type"] == "compaction")
    assert comp["details"]["trigger"] == "overflow"
    messages = [e["message"] for e in lines if e["type"] == "message"]
    assert not any(m.get("stopReason") == "error" for m in messages)  # the recovered overflow is not a failure
    assert [m["role"] for m in messages[-2:]] == ["user", "assistant"]
    assert (home / "workspace" / DAILY).read_text() == EXISTING + FLUSHED


def test_overflow_with_a_failing_summariser_is_an_error_and_deletes_nothing(home: Path) -> None:
    script = [{"match": {"contains": SUMMARY_MARKER}, "error": 500, "message": "summariser down", "repeat": True},
              "ack 1", "ack 2", "ack 3", {"error": "context_overflow"}]
    with FakeProvider(script) as fake:
        defaults = {"compaction": {**SMALL_COMPACTION, "memory_flush": {"enabled": False}}}
        loaded = small_config(home, fake, "anthropic", defaults=defaults)
        rt = runtime(loaded, fake_model(loaded))
        for n in range(1, 4):
            rt.run_turn(MAIN, user_text(n))
        before = [e for e in entries(rt, MAIN)]
        with pytest.raises(ContextOverflowError) as err:
            rt.run_turn(MAIN, user_text(4))
    assert "automatic compaction could not make room" in err.value.hint and "nothing was deleted" in err.value.hint
    after = entries(rt, MAIN)
    assert after[: len(before)] == before and not any(e["type"] == "compaction" for e in after)
    assert after[-1]["message"]["stopReason"] == "error"
    record = rt.session(MAIN)
    assert record is not None and record.compaction_count == 0
    assert len(requests_containing(fake, SUMMARY_MARKER)) >= 1


def test_fact_from_compacted_turns_is_found_through_the_sessions_source(home: Path, fake_embedder: object) -> None:
    fact = "By the way, my gym locker code at the Riverside club is 4471-B."
    summary = "## Goals\n- Quarterly planning notes.\n## Identifiers\n- none\n"
    question = "What's my locker code at the gym?"
    script: list[Any] = [
        summary_step(summary),
        {"match": {"contains": question}, "tool_calls": [
            {"name": "memory_search", "arguments": {"query": "gym locker code Riverside club"}}]},
        {"match": {"contains": question}, "text": "Your locker code is 4471-B."},
        {"text": "ack", "repeat": True},
    ]
    with FakeProvider(script) as fake:
        defaults = {"compaction": {**SMALL_COMPACTION, "memory_flush": {"enabled": False}},
                    "memory_search": {"sources": ["memory", "sessions"]}}
        loaded = small_config(home, fake, "openai", window=12_000, defaults=defaults)
        memory = memory_service(loaded, fake_embedder, sessions=True, clock_offset=3600)  # type: ignore[arg-type]
        rt = runtime(loaded, fake_model(loaded), memory=memory)
        rt.run_turn(MAIN, fact)
        n = 2
        while not rt.run_turn(MAIN, user_text(n)).compactions:
            n += 1
            assert n < 25, "no compaction happened"
        answer = rt.run_turn(MAIN, question)
    memory.close()
    record = rt.session(MAIN)
    assert record is not None
    request = next(r for r in fake.requests if question in body_text(r))
    assert "4471-B" not in body_text(request)  # compacted away from the context…
    assert "Compacted History" in body_text(request) and "past session transcripts" in body_text(request)
    assert answer.reply == "Your locker code is 4471-B."
    found = json.loads(answer.tool_calls[0].result)["results"]
    hit = next(h for h in found if h["source"] == "sessions")  # …but found in the transcript
    assert hit["path"] == f"sessions/{record.session_id}.jsonl" and "4471-B" in hit["snippet"]
