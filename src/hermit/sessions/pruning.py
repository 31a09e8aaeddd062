"""Tool-output pruning: trim or clear old, large tool results in the request sent to the model (SPEC §10).

`prune_for_request` is a pure function. It returns a new message tuple for one request and never
mutates its input, so the JSONL transcript (and the in-memory history it was read into) keeps every
byte. Each trimmed or cleared result names its tool-call id and the `tool_output` tool, which reads
the original output back from the transcript (SPEC §14.10).

Decisions:

- Size is measured in estimated tokens (`hermit.tokens.estimate_tokens`, CJK-aware) against the
  context window in tokens. For English and code that is the original's "chars / (window × 4)";
  for Chinese or Japanese tool output it does not under-count fourfold. Inline images count
  IMAGE_TOKEN_ESTIMATE tokens each (the original's 8,000 chars / 4). Character counts are reported
  too (`chars_before`/`chars_after`) and `min_prunable_tool_chars` is in characters, as configured.
- Mode `auto` is `cache-ttl` for models whose profile has a prompt-cache TTL and `off` otherwise:
  other providers cache prefixes without a known lifetime (OpenAI, llama.cpp), pruning would only
  make them miss, and compaction keeps their requests bounded anyway. `cache-ttl` set explicitly on
  a model without a cache TTL prunes once `ttl_seconds` have passed since the last request.
- Cache-ttl: prune only when the last cache touch is unknown or at least `ttl_seconds` old. While
  the cache is warm, the decisions of `previous` (the result used for the request that warmed it)
  are re-applied so the request prefix stays byte-identical and keeps hitting the cache; without
  `previous` a warm cache means no pruning at all.
- Thresholds are strict: soft trim when ratio > soft_trim_ratio; hard clear when, after soft trim,
  ratio > hard_clear_ratio and the prunable results hold ≥ min_prunable_tool_chars characters;
  results are then cleared oldest first while ratio > hard_clear_ratio.
- Protected: everything before the first user message; the last `keep_last_assistants` assistant
  messages and everything after the first of them (with fewer assistant messages than that, nothing
  is pruned); results with images. User and assistant messages are never modified.
- A soft trim or clear that would not make a result shorter is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Literal, TypeAlias

from hermit.config.schema import ContextPruningConfig, PruningToolsConfig
from hermit.messages import (
    FORWARD_OPEN,
    AssistantMessage,
    AssistantPart,
    Message,
    TextPart,
    ToolResultMessage,
    UserMessage,
)
from hermit.tokens import estimate_tokens

# The tool that re-reads a pruned result from the transcript; named in every trim/clear note.
TOOL_OUTPUT_TOOL = "tool_output"
IMAGE_TOKEN_ESTIMATE = 2_000
IMAGE_CHAR_ESTIMATE = IMAGE_TOKEN_ESTIMATE * 4
TRIM_SEPARATOR = "\n...\n"

PruningMode: TypeAlias = Literal["off", "cache-ttl"]
PruneReason: TypeAlias = Literal["off", "cache-warm", "under-threshold", "nothing-prunable", "pruned"]


@dataclass(frozen=True)
class PruneResult:
    """The messages to send and what was done to them.

    `soft_trimmed` and `cleared` are tool-call ids in message order (a result is in at most one);
    `reason` says why nothing (more) was pruned, or "pruned". Pass the result back as `previous`
    for the next request of the session so a warm prompt cache keeps hitting.
    """

    messages: tuple[Message, ...]
    soft_trimmed: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    chars_before: int = 0
    chars_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    reason: PruneReason = "off"

    @property
    def changed(self) -> bool:
        return bool(self.soft_trimmed or self.cleared)


def resolve_pruning_mode(mode: str, profile_cache_ttl: float | None) -> PruningMode:
    """The effective mode: `auto` is cache-ttl for models with a prompt-cache TTL, off otherwise."""
    if mode == "auto":
        return "cache-ttl" if profile_cache_ttl is not None else "off"
    if mode == "cache-ttl":
        return "cache-ttl"
    return "off"


def is_cache_warm(last_cache_touch: datetime | None, now: datetime, ttl_seconds: float) -> bool:
    """True while the provider's prompt cache from the last request is still alive."""
    if last_cache_touch is None:
        return False
    return (now - last_cache_touch).total_seconds() < ttl_seconds


def tool_prunable(tool_name: str, tools: PruningToolsConfig) -> bool:
    """Whether results of `tool_name` may be pruned: deny globs win; an empty allow list allows all."""
    name = tool_name.lower()
    if any(fnmatchcase(name, pattern.lower()) for pattern in tools.deny):
        return False
    if not tools.allow:
        return True
    return any(fnmatchcase(name, pattern.lower()) for pattern in tools.allow)


# Labels that say whose text follows: a note's origin (`[written from …]` before a snippet, an origin block),
# another chat's transcript line (`User (telegram DM 42): …`) or a forwarded message's header (its quoted
# lines follow it: messages.FORWARD_OPEN). Each stands before the text it labels.
_ATTRIBUTED = re.compile(r"\[written from |<!-- origin |\b(?:User|Assistant) \(|" + re.escape(FORWARD_OPEN))


def labelled_cut(content: str, head_chars: int, tail_chars: int) -> tuple[int, int]:
    """The (head, tail) to keep of `content` when it is cut in the middle. Text holding other chats' labels
    keeps only its head (both budgets): a tail could start inside a labelled snippet whose label fell in
    the cut, and that chat's words would then read as nobody's (as the owner's, to a summary or a flush)."""
    if tail_chars and _ATTRIBUTED.search(content):
        return head_chars + tail_chars, 0
    return head_chars, tail_chars


def soft_trim_text(content: str, tool_call_id: str, head_chars: int, tail_chars: int) -> str:
    """First head_chars + `...` + last tail_chars of `content`, and a note naming how to re-read it
    (only the head when other chats' labels are in it: `labelled_cut`)."""
    head_chars, tail_chars = labelled_cut(content, head_chars, tail_chars)
    n = len(content)
    head = content[:head_chars]
    tail = content[n - tail_chars :] if tail_chars else ""
    note = (
        f"[Tool result trimmed: kept first {head_chars} and last {tail_chars} of {n} chars; "
        f"full output: call {TOOL_OUTPUT_TOOL} with toolCallId={tool_call_id}]"
    )
    return f"{head}{TRIM_SEPARATOR}{tail}\n\n{note}"


def cleared_text(placeholder: str, tool_call_id: str) -> str:
    """The placeholder with the tool-call id and the re-read tool named inside its brackets."""
    hint = f"call {TOOL_OUTPUT_TOOL} with toolCallId={tool_call_id} to re-read it"
    if placeholder.endswith("]"):
        return f"{placeholder[:-1]}; {hint}]"
    return f"{placeholder} ({hint})"


def message_chars(message: Message) -> int:
    """Characters of a message as sent: text, tool-call names and JSON arguments, images estimated."""
    if isinstance(message, ToolResultMessage):
        return len(message.content) + IMAGE_CHAR_ESTIMATE * len(message.images)
    if isinstance(message, UserMessage):
        return len(message.text) + IMAGE_CHAR_ESTIMATE * len(message.images)
    return sum(len(_part_text(p)) for p in message.content)


def message_tokens(message: Message) -> int:
    """Estimated tokens of a message as sent (CJK-aware), images estimated."""
    if isinstance(message, ToolResultMessage):
        return estimate_tokens(message.content) + IMAGE_TOKEN_ESTIMATE * len(message.images)
    if isinstance(message, UserMessage):
        return estimate_tokens(message.text) + IMAGE_TOKEN_ESTIMATE * len(message.images)
    return sum(estimate_tokens(_part_text(p)) for p in message.content)


def _part_text(part: AssistantPart) -> str:
    if isinstance(part, TextPart):
        return part.text
    return part.name + json.dumps(part.arguments, ensure_ascii=False)


def prunable_indexes(messages: Sequence[Message], cfg: ContextPruningConfig) -> list[int]:
    """Indexes of the tool results that may be pruned, oldest first (see the module's protection rules)."""
    first_user = next((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), None)
    if first_user is None:
        return []
    keep = cfg.keep_last_assistants
    if keep == 0:
        cutoff = len(messages)
    else:
        assistants = [i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)]
        if len(assistants) < keep:
            return []
        cutoff = assistants[-keep]
    return [
        i
        for i in range(first_user + 1, cutoff)
        if isinstance(m := messages[i], ToolResultMessage)
        and not m.has_image
        and tool_prunable(m.tool_name, cfg.tools)
    ]


class _Request:
    """The copy being pruned, with running size totals."""

    def __init__(self, messages: tuple[Message, ...], system_prompt: str, window_tokens: int) -> None:
        self.messages = list(messages)
        self.window = window_tokens
        self.tokens = estimate_tokens(system_prompt) + sum(message_tokens(m) for m in messages)
        self.chars = len(system_prompt) + sum(message_chars(m) for m in messages)
        self.soft: dict[str, None] = {}  # insertion-ordered sets of tool-call ids
        self.cleared: dict[str, None] = {}

    @property
    def ratio(self) -> float:
        return self.tokens / self.window

    def _replace(self, i: int, text: str) -> bool:
        old = self.messages[i]
        assert isinstance(old, ToolResultMessage)
        if len(text) >= len(old.content):
            return False
        new = replace(old, content=text)
        self.tokens += message_tokens(new) - message_tokens(old)
        self.chars += message_chars(new) - message_chars(old)
        self.messages[i] = new
        return True

    def soft_trim(self, i: int, original: ToolResultMessage, cfg: ContextPruningConfig) -> None:
        st = cfg.soft_trim
        if len(original.content) <= st.max_chars or original.tool_call_id in self.cleared:
            return
        text = soft_trim_text(original.content, original.tool_call_id, st.head_chars, st.tail_chars)
        if self._replace(i, text):
            self.soft[original.tool_call_id] = None

    def clear(self, i: int, original: ToolResultMessage, cfg: ContextPruningConfig) -> None:
        if self._replace(i, cleared_text(cfg.hard_clear.placeholder, original.tool_call_id)):
            self.soft.pop(original.tool_call_id, None)
            self.cleared[original.tool_call_id] = None


def prune_for_request(
    messages: Sequence[Message],
    *,
    cfg: ContextPruningConfig,
    context_window_tokens: int,
    profile_cache_ttl: float | None,
    last_cache_touch: datetime | None,
    now: datetime,
    system_prompt: str = "",
    previous: PruneResult | None = None,
) -> PruneResult:
    """The messages to send for one request, with old tool results trimmed or cleared as configured.

    `system_prompt` (plus anything else sent with every request, e.g. tool schemas) counts toward the
    estimated context size. `previous` is the PruneResult of this session's last request.
    """
    if context_window_tokens <= 0:
        raise ValueError(f"context_window_tokens must be positive, got {context_window_tokens}")
    original = tuple(messages)
    req = _Request(original, system_prompt, context_window_tokens)
    tokens_before, chars_before = req.tokens, req.chars

    def result(reason: PruneReason) -> PruneResult:
        return PruneResult(
            messages=tuple(req.messages),
            soft_trimmed=list(req.soft),
            cleared=list(req.cleared),
            chars_before=chars_before,
            chars_after=req.chars,
            tokens_before=tokens_before,
            tokens_after=req.tokens,
            reason=reason,
        )

    if resolve_pruning_mode(cfg.mode, profile_cache_ttl) == "off":
        return result("off")
    candidates = prunable_indexes(original, cfg)

    if is_cache_warm(last_cache_touch, now, cfg.ttl_seconds):
        if previous is not None:
            _reapply(req, original, candidates, previous.cleared, previous.soft_trimmed, cfg)
        return result("cache-warm")

    if req.ratio <= cfg.soft_trim_ratio:
        return result("under-threshold")
    if not candidates:
        return result("nothing-prunable")

    for i in candidates:
        req.soft_trim(i, _tool_result(original[i]), cfg)

    if cfg.hard_clear.enabled and req.ratio > cfg.hard_clear_ratio:
        prunable_chars = sum(len(_tool_result(req.messages[i]).content) for i in candidates)
        if prunable_chars >= cfg.min_prunable_tool_chars:
            for i in candidates:
                if req.ratio <= cfg.hard_clear_ratio:
                    break
                req.clear(i, _tool_result(original[i]), cfg)

    reason: PruneReason = "pruned" if (req.soft or req.cleared) else "nothing-prunable"
    return result(reason)


def _reapply(
    req: _Request,
    original: tuple[Message, ...],
    candidates: list[int],
    cleared: Collection[str],
    soft_trimmed: Collection[str],
    cfg: ContextPruningConfig,
) -> None:
    cleared_ids, soft_ids = set(cleared), set(soft_trimmed)
    for i in candidates:
        msg = _tool_result(original[i])
        if msg.tool_call_id in cleared_ids:
            req.clear(i, msg, cfg)
        elif msg.tool_call_id in soft_ids:
            req.soft_trim(i, msg, cfg)


def _tool_result(message: Message) -> ToolResultMessage:
    assert isinstance(message, ToolResultMessage)
    return message
