"""Tool-output pruning: the request changes, the input never does; trim, clear, protection, cache TTL."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from hermit.config.schema import AgentSettings, ContextPruningConfig
from hermit.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from hermit.sessions.pruning import (
    PruneResult,
    cleared_text,
    message_tokens,
    prunable_indexes,
    prune_for_request,
    resolve_pruning_mode,
    soft_trim_text,
    tool_prunable,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CFG = ContextPruningConfig()
CACHE_TTL = 300.0  # an Anthropic-like profile


def call(call_id: str, tool: str = "exec") -> AssistantMessage:
    return AssistantMessage((ToolCallPart(call_id, tool, {"cmd": "x"}),), stop_reason="tool_use")


def result(
    call_id: str, content: str, tool: str = "exec", images: tuple[ImagePart, ...] = ()
) -> ToolResultMessage:
    return ToolResultMessage(call_id, tool, content, images=images)


def big(n: int, tag: str = "") -> str:
    """n chars with a recognisable head and tail."""
    assert n >= 3000
    return ("A" * 1500 + tag + "M" * (n - 3000 - len(tag)) + "Z" * 1500)[:n]


def protected_tail() -> list[Message]:
    """Three assistant turns that are always protected (keep_last_assistants 3)."""
    return [
        AssistantMessage((TextPart("done"),)),
        UserMessage("thanks"),
        AssistantMessage((TextPart("welcome"),)),
        UserMessage("one more"),
        AssistantMessage((TextPart("sure"),)),
    ]


def conversation(results: Sequence[tuple[str, str, str]]) -> list[Message]:
    """A user message, then one tool call + result per (id, tool, content), then the protected tail."""
    msgs: list[Message] = [UserMessage("please investigate")]
    for call_id, tool, content in results:
        msgs += [call(call_id, tool), result(call_id, content, tool)]
    return msgs + protected_tail()


def run(messages: Sequence[Message], window: int, **kw: Any) -> PruneResult:
    args: dict[str, Any] = {
        "cfg": CFG,
        "context_window_tokens": window,
        "profile_cache_ttl": CACHE_TTL,
        "last_cache_touch": None,
        "now": NOW,
    }
    args.update(kw)
    return prune_for_request(messages, **args)


def serialized(messages: Sequence[Message]) -> str:
    return json.dumps([m.to_dict() for m in messages], sort_keys=True)


def total_tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


# --- soft trim -----------------------------------------------------------------------------------


def test_soft_trim_keeps_exact_head_and_tail_with_a_note_naming_the_call_id() -> None:
    content = big(10_000, tag="middle")
    msgs = conversation([("call_1", "exec", content), ("call_2", "exec", "short output")])
    res = run(msgs, window=6_000)  # ~2,540 tokens: ratio ≈ 0.42, between soft (0.3) and hard (0.5)

    trimmed = res.messages[2]
    assert isinstance(trimmed, ToolResultMessage)
    assert trimmed.content == (
        "A" * 1500
        + "\n...\n"
        + "Z" * 1500
        + "\n\n[Tool result trimmed: kept first 1500 and last 1500 of 10000 chars; "
        "full output: call tool_output with toolCallId=call_1]"
    )
    assert trimmed.tool_call_id == "call_1" and trimmed.tool_name == "exec" and not trimmed.is_error
    assert res.soft_trimmed == ["call_1"] and res.cleared == []
    assert res.reason == "pruned" and res.changed
    assert res.messages[4] is msgs[4]  # short result untouched
    assert res.chars_after < res.chars_before and res.tokens_after < res.tokens_before
    assert res.tokens_after == total_tokens(res.messages)


def test_input_messages_are_never_mutated() -> None:
    msgs = conversation([(f"c{i}", "exec", big(20_000)) for i in range(6)])
    before_copy = copy.deepcopy(msgs)
    before_json = serialized(msgs)
    ids_before = [id(m) for m in msgs]

    res = run(msgs, window=20_000)

    assert res.changed
    assert msgs == before_copy
    assert serialized(msgs) == before_json
    assert [id(m) for m in msgs] == ids_before
    assert isinstance(res.messages, tuple) and serialized(res.messages) != before_json


def test_user_and_assistant_messages_are_never_modified() -> None:
    huge_user = UserMessage("U" * 50_000)
    huge_assistant = AssistantMessage((TextPart("T" * 50_000), ToolCallPart("c1", "exec", {"a": "b" * 9000})))
    msgs: list[Message] = [huge_user, huge_assistant, result("c1", big(30_000)), *protected_tail()]
    res = run(msgs, window=10_000)
    for before, after in zip(msgs, res.messages, strict=True):
        if not isinstance(before, ToolResultMessage):
            assert after is before
    assert res.soft_trimmed == ["c1"]


def test_under_the_soft_ratio_nothing_changes() -> None:
    msgs = conversation([("c1", "exec", big(10_000))])
    res = run(msgs, window=200_000)
    assert res.reason == "under-threshold" and not res.changed
    assert all(a is b for a, b in zip(msgs, res.messages, strict=True))
    assert res.chars_before == res.chars_after


def test_system_prompt_counts_toward_the_ratio() -> None:
    msgs = conversation([("c1", "exec", big(8_000))])  # ~2,030 tokens
    assert run(msgs, window=10_000).reason == "under-threshold"
    res = run(msgs, window=10_000, system_prompt="s" * 8_000)  # +2,000 tokens → ratio ≈ 0.4
    assert res.soft_trimmed == ["c1"]


def test_results_at_or_below_max_chars_are_not_soft_trimmed() -> None:
    msgs = conversation([("c1", "exec", "x" * 4_000), ("c2", "exec", "y" * 4_001)])
    res = run(msgs, window=4_000)
    assert res.soft_trimmed == ["c2"]
    assert res.messages[2] is msgs[2]


def test_cjk_output_is_measured_in_tokens_not_chars() -> None:
    # 6,000 CJK chars ≈ 6,000 tokens; as chars/4 it would look like 1,500 and stay under 0.3 of 10,000.
    msgs = conversation([("c1", "exec", "記" * 6_000)])
    res = run(msgs, window=10_000)
    assert res.soft_trimmed == ["c1"]


# --- hard clear ----------------------------------------------------------------------------------


def test_hard_clear_clears_oldest_first_until_under_the_ratio() -> None:
    # 20 results of 3,900 chars (not soft-trimmable): 78,000 prunable chars, ~19,600 tokens.
    ids = [f"call_{i:02d}" for i in range(20)]
    msgs = conversation([(i, "exec", "r" * 3_900) for i in ids])
    window = 30_000
    res = run(msgs, window=window)

    assert res.reason == "pruned" and res.soft_trimmed == []
    n = len(res.cleared)
    assert 0 < n < 20
    assert res.cleared == ids[:n]  # oldest first, contiguous
    assert res.tokens_after / window <= 0.5
    # Minimal: without the last clear the request would still be over the ratio.
    last = ids[n - 1]
    index = next(
        i for i, m in enumerate(res.messages) if isinstance(m, ToolResultMessage) and m.tool_call_id == last
    )
    undone = list(res.messages)
    undone[index] = msgs[index]
    assert total_tokens(undone) / window > 0.5

    first = res.messages[2]
    assert isinstance(first, ToolResultMessage)
    assert (
        first.content
        == "[Old tool result content cleared; call tool_output with toolCallId=call_00 to re-read it]"
    )
    # Everything not cleared is untouched.
    for before, after in zip(msgs, res.messages, strict=True):
        if not (isinstance(before, ToolResultMessage) and before.tool_call_id in res.cleared):
            assert after is before


def test_hard_clear_after_soft_trim_moves_ids_from_trimmed_to_cleared() -> None:
    ids = [f"c{i:02d}" for i in range(20)]
    msgs = conversation([(i, "exec", big(12_000)) for i in ids])  # trimmed to ~3,130 chars each: 62k
    window = 20_000
    res = run(msgs, window=window)
    assert res.cleared and res.soft_trimmed
    assert not set(res.cleared) & set(res.soft_trimmed)
    assert res.cleared + res.soft_trimmed == ids  # oldest cleared, the rest trimmed
    assert res.tokens_after / window <= 0.5


def test_hard_clear_needs_enough_prunable_chars() -> None:
    ids = [f"c{i}" for i in range(20)]
    msgs = conversation([(i, "exec", "r" * 3_900) for i in ids])
    cfg = CFG.model_copy(update={"min_prunable_tool_chars": 100_000})
    res = run(msgs, window=30_000, cfg=cfg)
    assert res.cleared == [] and res.reason == "nothing-prunable"


def test_hard_clear_can_be_disabled() -> None:
    msgs = conversation([(f"c{i}", "exec", "r" * 3_900) for i in range(20)])
    cfg = ContextPruningConfig.model_validate({"hard_clear": {"enabled": False}})
    assert run(msgs, window=30_000, cfg=cfg).cleared == []


def test_custom_placeholder() -> None:
    assert cleared_text("[gone]", "x1") == "[gone; call tool_output with toolCallId=x1 to re-read it]"
    assert cleared_text("gone", "x1") == "gone (call tool_output with toolCallId=x1 to re-read it)"
    msgs = conversation([(f"c{i}", "exec", "r" * 3_900) for i in range(20)])
    cfg = ContextPruningConfig.model_validate({"hard_clear": {"placeholder": "[pruned]"}})
    res = run(msgs, window=30_000, cfg=cfg)
    first = res.messages[2]
    assert isinstance(first, ToolResultMessage)
    assert first.content == "[pruned; call tool_output with toolCallId=c0 to re-read it]"


# --- protection ----------------------------------------------------------------------------------


def test_last_three_assistant_turns_and_what_follows_are_protected() -> None:
    msgs: list[Message] = [
        UserMessage("go"),
        call("old"),
        result("old", big(10_000)),
        call("p1"),  # third assistant from the end: protection starts here
        result("p1", big(10_000)),
        call("p2"),
        result("p2", big(10_000)),
        UserMessage("and?"),
        call("p3"),
        result("p3", big(10_000)),
    ]
    res = run(msgs, window=10_000)
    assert res.soft_trimmed == ["old"]
    assert res.messages[3:] == tuple(msgs[3:])
    assert all(a is b for a, b in zip(msgs[3:], res.messages[3:], strict=True))


def test_fewer_assistant_turns_than_kept_means_nothing_is_pruned() -> None:
    msgs: list[Message] = [UserMessage("go"), call("a"), result("a", big(40_000)), call("b")]
    res = run(msgs, window=10_000)
    assert res.reason == "nothing-prunable" and not res.changed


def test_keep_last_assistants_zero_protects_nothing_after_the_first_user() -> None:
    msgs: list[Message] = [UserMessage("go"), call("a"), result("a", big(40_000))]
    cfg = CFG.model_copy(update={"keep_last_assistants": 0})
    assert run(msgs, window=20_000, cfg=cfg).soft_trimmed == ["a"]


def test_nothing_before_the_first_user_message_is_touched() -> None:
    early = result("boot", big(30_000))
    msgs: list[Message] = [
        call("boot"),
        early,
        UserMessage("hi"),
        call("later"),
        result("later", big(30_000)),
    ]
    msgs += protected_tail()
    res = run(msgs, window=20_000)
    assert res.messages[1] is early
    assert res.soft_trimmed == ["later"]
    assert prunable_indexes(msgs, CFG) == [4]


def test_no_user_message_means_nothing_is_prunable() -> None:
    msgs: list[Message] = [call("a"), result("a", big(40_000)), *protected_tail()[::2]]
    assert prunable_indexes(msgs, CFG) == []


def test_results_with_images_are_never_pruned() -> None:
    image = ImagePart("image/png", "iVBORw0KGgo=")
    msgs: list[Message] = [
        UserMessage("look"),
        call("shot", "screenshot"),
        result("shot", big(30_000), tool="screenshot", images=(image,)),
        call("txt"),
        result("txt", big(30_000)),
        *protected_tail(),
    ]
    res = run(msgs, window=20_000)
    assert res.messages[2] is msgs[2]
    assert res.soft_trimmed == ["txt"]


# --- tool allow / deny ---------------------------------------------------------------------------


def test_tool_allow_and_deny_globs() -> None:
    tools = ContextPruningConfig.model_validate(
        {"tools": {"allow": ["read*", "exec"], "deny": ["exec"]}}
    ).tools
    assert tool_prunable("read_file", tools)
    assert tool_prunable("READ", tools)
    assert not tool_prunable("exec", tools)  # deny wins over allow
    assert not tool_prunable("web_fetch", tools)  # not in a non-empty allow list
    everything = ContextPruningConfig().tools
    assert tool_prunable("anything", everything)
    deny_only = ContextPruningConfig.model_validate({"tools": {"deny": ["memory_*"]}}).tools
    assert not tool_prunable("memory_get", deny_only) and tool_prunable("exec", deny_only)


def test_allow_deny_select_which_results_are_pruned() -> None:
    msgs = conversation(
        [("r1", "read_file", big(10_000)), ("e1", "exec", big(10_000)), ("w1", "web_fetch", big(10_000))]
    )
    cfg = ContextPruningConfig.model_validate({"tools": {"allow": ["read*", "exec"], "deny": ["exec"]}})
    res = run(msgs, window=20_000, cfg=cfg)
    assert res.soft_trimmed == ["r1"]


# --- modes and the prompt-cache TTL --------------------------------------------------------------


def test_mode_resolution() -> None:
    assert resolve_pruning_mode("auto", 300.0) == "cache-ttl"
    assert resolve_pruning_mode("auto", None) == "off"
    assert resolve_pruning_mode("cache-ttl", None) == "cache-ttl"
    assert resolve_pruning_mode("off", 300.0) == "off"


def test_warm_cache_means_no_pruning_and_cold_cache_prunes() -> None:
    msgs = conversation([("c1", "exec", big(10_000))])
    warm = run(msgs, window=6_000, last_cache_touch=NOW - timedelta(seconds=60))
    assert warm.reason == "cache-warm" and not warm.changed
    assert warm.messages == tuple(msgs)
    cold = run(msgs, window=6_000, last_cache_touch=NOW - timedelta(seconds=301))
    assert cold.soft_trimmed == ["c1"]
    at_ttl = run(msgs, window=6_000, last_cache_touch=NOW - timedelta(seconds=300))
    assert at_ttl.soft_trimmed == ["c1"]
    unknown = run(msgs, window=6_000, last_cache_touch=None)
    assert unknown.soft_trimmed == ["c1"]


def test_ttl_is_configurable() -> None:
    msgs = conversation([("c1", "exec", big(10_000))])
    cfg = CFG.model_copy(update={"ttl_seconds": 3600.0})
    res = run(msgs, window=6_000, cfg=cfg, last_cache_touch=NOW - timedelta(minutes=30))
    assert res.reason == "cache-warm"


def test_mode_off_and_auto_without_a_cache_ttl_never_prune() -> None:
    msgs = conversation([("c1", "exec", big(40_000))])
    off = ContextPruningConfig.model_validate({"mode": "off"})
    assert run(msgs, window=6_000, cfg=off).reason == "off"
    auto_uncached = run(msgs, window=6_000, profile_cache_ttl=None)
    assert auto_uncached.reason == "off" and auto_uncached.messages == tuple(msgs)


def test_explicit_cache_ttl_on_a_model_without_prompt_cache_prunes_when_idle() -> None:
    msgs = conversation([("c1", "exec", big(10_000))])
    cfg = ContextPruningConfig.model_validate({"mode": "cache-ttl"})
    res = run(msgs, window=6_000, cfg=cfg, profile_cache_ttl=None)
    assert res.soft_trimmed == ["c1"]


def test_warm_cache_reapplies_previous_decisions_so_the_prefix_stays_identical() -> None:
    msgs = conversation([(f"c{i}", "exec", big(12_000)) for i in range(20)])
    first = run(msgs, window=20_000, last_cache_touch=None)
    assert first.cleared and first.soft_trimmed

    # The next request, 30 s later, adds a turn; the cache written by `first` is warm.
    later = [
        *msgs,
        UserMessage("next"),
        call("new"),
        result("new", big(12_000)),
        AssistantMessage((TextPart("ok"),)),
    ]
    second = run(later, window=20_000, last_cache_touch=NOW, now=NOW + timedelta(seconds=30), previous=first)
    assert second.reason == "cache-warm"
    assert second.messages[: len(msgs)] == first.messages
    assert second.cleared == first.cleared and second.soft_trimmed == first.soft_trimmed

    without_previous = run(later, window=20_000, last_cache_touch=NOW, now=NOW + timedelta(seconds=30))
    assert not without_previous.changed


def test_context_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="context_window_tokens"):
        run(conversation([]), window=0)


# --- helpers and config --------------------------------------------------------------------------


def test_soft_trim_text_with_zero_tail() -> None:
    text = soft_trim_text("abcdefghij", "id1", 3, 0)
    assert text.startswith("abc\n...\n\n\n[Tool result trimmed: kept first 3 and last 0 of 10 chars;")


def test_trim_that_would_not_shorten_is_skipped() -> None:
    cfg = ContextPruningConfig.model_validate(
        {"soft_trim": {"max_chars": 3001, "head_chars": 1500, "tail_chars": 1500}}
    )
    msgs = conversation([("c1", "exec", "q" * 3_050)])
    res = run(msgs, window=2_000, cfg=cfg)
    assert res.soft_trimmed == [] and res.messages[2] is msgs[2]


def test_config_defaults_and_validation() -> None:
    cfg = ContextPruningConfig()
    assert (cfg.mode, cfg.ttl_seconds, cfg.keep_last_assistants) == ("auto", 300.0, 3)
    assert (cfg.soft_trim_ratio, cfg.hard_clear_ratio, cfg.min_prunable_tool_chars) == (0.3, 0.5, 50_000)
    assert (cfg.soft_trim.max_chars, cfg.soft_trim.head_chars, cfg.soft_trim.tail_chars) == (4000, 1500, 1500)
    assert cfg.hard_clear.enabled and cfg.hard_clear.placeholder == "[Old tool result content cleared]"
    assert cfg.tools.allow == () and cfg.tools.deny == ()
    with pytest.raises(ValidationError, match="head_chars"):
        ContextPruningConfig.model_validate({"soft_trim": {"max_chars": 3000}})
    with pytest.raises(ValidationError, match="soft_trim_ratio"):
        ContextPruningConfig.model_validate({"soft_trim_ratio": 0.6})
    with pytest.raises(ValidationError):
        ContextPruningConfig.model_validate({"mode": "aggressive"})
    with pytest.raises(ValidationError):
        ContextPruningConfig.model_validate({"keepLastAssistants": 2})  # snake_case only
    settings = AgentSettings.model_validate({"context_pruning": {"mode": "off", "keep_last_assistants": 5}})
    assert settings.context_pruning.mode == "off" and settings.context_pruning.keep_last_assistants == 5


def test_result_messages_are_new_objects_only_where_pruned() -> None:
    msgs = conversation([("c1", "exec", big(10_000)), ("c2", "exec", "small")])
    res = run(msgs, window=6_000)
    changed = [i for i, (a, b) in enumerate(zip(msgs, res.messages, strict=True)) if a is not b]
    assert changed == [2]
    before, after = msgs[2], res.messages[2]
    assert isinstance(before, ToolResultMessage) and isinstance(after, ToolResultMessage)
    assert after == replace(before, content=after.content)
