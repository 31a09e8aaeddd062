"""Pruning wired into every request: the request changes once the prompt cache is cold, the JSONL never does,
and the agent re-reads a cleared result with tool_output."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agenthelpers import tool_results
from conftest import write
from hermit.messages import ToolCallPart
from hermit.sessions.keys import main_session_key
from hermit.testing import FakeProvider, ScriptedModel
from hermit.tools.base import ToolRunner
from sessionhelpers import Clock, entries, fake_model, runtime, small_config, transcript_bytes

MAIN = main_session_key("main")
LOG = "HEAD-MARKER\n" + "".join(f"line {i}: build step ok\n" for i in range(200)) + "MIDDLE-SECRET-7781\n" + \
    "".join(f"line {i}: test passed\n" for i in range(200, 400)) + "TAIL-MARKER\n"
PRUNING = {"soft_trim_ratio": 0.1, "hard_clear_ratio": 0.2, "min_prunable_tool_chars": 1000}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_cold_cache_prunes_the_request_not_the_jsonl_and_tool_output_rereads(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "workspace" / "logs" / "build.log", LOG)
    script = [
        {"tool_calls": [{"name": "read", "arguments": {"path": "logs/build.log"}, "id": "toolu_read1"}]},
        "The build log looks fine.", "two", "three", "four",
        {"tool_calls": [{"name": "tool_output", "arguments": {"toolCallId": "toolu_read1"}, "id": "toolu_again"}]},
        "The middle line says MIDDLE-SECRET-7781.",
    ]
    clock = Clock()
    with FakeProvider(script) as fake:
        defaults = {"compaction": {"enabled": False}, "context_pruning": PRUNING}
        loaded = small_config(home, fake, "anthropic", window=12_000, defaults=defaults)
        rt = runtime(loaded, fake_model(loaded), clock=clock)
        assert rt.pruning_mode() == "cache-ttl"  # auto: the Anthropic profile has a prompt-cache TTL
        for text in ("check the build log", "ok", "and?", "fine"):
            rt.run_turn(MAIN, text)
            clock.advance(minutes=1)  # the cache stays warm: nothing is pruned
        assert all(LOG.rstrip("\n") in tool_results(r)[0][0] for r in fake.requests[1:5])
        # Building a request does not touch the transcript, even when it prunes.
        before = transcript_bytes(rt, MAIN)
        clock.advance(minutes=10)
        turn = rt.prepare(MAIN)
        preview = rt.build_request(turn, turn.history.messages)
        assert transcript_bytes(rt, MAIN) == before
        rt._prune_memo.clear()  # forget the preview: the turn below must find the cache cold on its own
        result = rt.run_turn(MAIN, "what was in the middle of that log?")
    cleared = [m for m in preview.messages if getattr(m, "tool_call_id", "") == "toolu_read1"]
    assert cleared and "toolCallId=toolu_read1" in cleared[0].content
    first, second = fake.requests[5], fake.requests[6]
    old_result, err = tool_results(first)[0]
    assert not err and "Old tool result content cleared" in old_result and "MIDDLE-SECRET" not in old_result
    assert "call tool_output with toolCallId=toolu_read1" in old_result
    # The second request of the turn is inside the cache TTL: the same decision is re-applied…
    assert tool_results(second)[0][0] == old_result
    # …and the agent got the full original back from the transcript.
    reread, err = tool_results(second)[1]
    assert not err and reread == LOG.rstrip("\n") and result.reply.endswith("MIDDLE-SECRET-7781.")
    after = transcript_bytes(rt, MAIN)
    assert after.startswith(before) and sha(after[: len(before)]) == sha(before)  # append-only, not a byte changed
    stored = [e["message"] for e in entries(rt, MAIN) if e["type"] == "message"
              and e["message"].get("toolCallId") == "toolu_read1"]
    assert stored[0]["content"][0]["text"] == LOG.rstrip("\n")  # read drops the final newline


def test_tool_output_pages_and_unknown_ids(tmp_path: Path) -> None:
    from hermit.models.base import ModelProfile

    home = tmp_path / "home"
    write(home / "workspace" / "big.txt", "x" * 30_000 + "END")
    profile = ModelProfile("scripted", "cached", context_window=200_000, cache_ttl_seconds=300)
    model = ScriptedModel([{"tool_calls": [{"name": "read", "arguments": {"path": "big.txt"}, "id": "c1"}]}, "ok"],
                          profile=profile)
    rt = runtime(small_config(home), model)
    rt.run_turn(MAIN, "read big.txt")
    tools: ToolRunner = rt.prepare(MAIN).tools
    assert "tool_output" in tools.names
    page = tools.run(ToolCallPart("x", "tool_output", {"toolCallId": "c1"})).result
    assert not page.is_error and page.content.startswith("x" * 100)
    assert "chars 0-20000 of 30003" in page.content and "offset=20000" in page.content
    rest = tools.run(ToolCallPart("y", "tool_output", {"toolCallId": "c1", "offset": 20000})).result
    assert "xEND\n\n[read output of c1: chars 20000-30003 of 30003]" in rest.content and not rest.is_error
    assert "offset=" not in rest.content
    missing = tools.run(ToolCallPart("z", "tool_output", {"toolCallId": "nope"})).result
    assert missing.is_error and "no tool result with toolCallId 'nope'" in missing.content
    # Without a prompt-cache TTL nothing is pruned (mode auto = off), so tool_output is not offered.
    plain = runtime(small_config(tmp_path / "h2"), ScriptedModel(["hi"]))
    assert "tool_output" not in plain.prepare(MAIN).tools.names
    assert json.dumps([t.name for t in tools.tools]).count("tool_output") == 1
