"""Recovering sessions.json entries from transcripts: token counters from recorded usage, and session keys
from what is still legible in a damaged header line or a damaged sessions.json."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from hermit.messages import Usage
from hermit.sessions.transcript import CompactionEntry, Entry, MessageEntry


class Counters(NamedTuple):
    """The token counters of a SessionRecord (same field names)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    context_tokens: int


def counters(entries: Sequence[Entry]) -> Counters:
    """Token counters as the runtime keeps them, summed from the usage on each assistant message:
    input = the prompt the model saw (cached or not), context = the last prompt plus its reply, or the
    compacted size when a compaction came after it."""
    inp = out = context = 0
    for entry in entries:
        if isinstance(entry, MessageEntry) and entry.message.get("role") == "assistant":
            raw = entry.message.get("usage")
            usage = Usage.from_dict(raw) if isinstance(raw, Mapping) else Usage()
            if usage.total_tokens:
                inp += usage.context_tokens
                out += usage.output_tokens
                context = usage.context_tokens + usage.output_tokens
        elif isinstance(entry, CompactionEntry) and entry.tokens_after is not None:
            context = entry.tokens_after
    return Counters(inp, out, inp + out, context)


_HEADER_KEY = re.compile(rb'"sessionKey"\s*:\s*"((?:[^"\\]|\\.)*)"')
_STORE_PAIR = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*\{\s*"sessionId"\s*:\s*"([^"\\]+)"')


def key_in_damaged_header(path: Path) -> str | None:
    """The sessionKey still legible in a damaged first line (a torn or garbled header)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(64_000)
    except OSError:
        return None
    match = _HEADER_KEY.search(first)
    return _json_string(match.group(1)) if match else None


def keys_in_damaged_store(data: bytes) -> dict[str, str]:
    """session id → key for every `"key": {"sessionId": "id"` still legible in a damaged sessions.json."""
    out: dict[str, str] = {}
    for match in _STORE_PAIR.finditer(data):
        key = _json_string(match.group(1))
        if key is not None:
            out.setdefault(match.group(2).decode("ascii", "replace"), key)
    return out


def _json_string(raw: bytes) -> str | None:
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) and value and value == value.strip() else None
