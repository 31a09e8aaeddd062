"""One sessions.json entry (SessionRecord) and its JSON form (camelCase names, as in the original)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hermit.sessions.transcript import format_timestamp, parse_timestamp

# Python field name -> sessions.json (camelCase, as in the original) name.
_JSON_NAMES: dict[str, str] = {
    "session_id": "sessionId",
    "created_at": "createdAt",
    "updated_at": "updatedAt",
    "origin_channel": "originChannel",
    "chat_type": "chatType",
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "total_tokens": "totalTokens",
    "context_tokens": "contextTokens",
    "compaction_count": "compactionCount",
    "memory_flush_compaction_count": "memoryFlushCompactionCount",
    "previous_session_id": "previousSessionId",
}
COUNTERS = ("input_tokens", "output_tokens", "total_tokens", "context_tokens", "compaction_count")


@dataclass(frozen=True)
class SessionRecord:
    """One sessions.json entry.

    input/output/total tokens are cumulative over the session; `context_tokens` is the size of the
    context at the last model request as the provider reported it (after a compaction: the estimated
    size of the compacted context). Compaction and the memory flush compare Hermit's own estimate of
    the next request to the window, which also accounts for pruning and the new message.
    `memory_flush_compaction_count` is the compaction count at the last flush (None: never flushed),
    so the flush runs at most once per compaction cycle. `extra` keeps fields this version does not
    know, so a newer Hermit's data survives a round trip through an older one.
    """

    key: str
    session_id: str
    created_at: datetime
    updated_at: datetime
    origin_channel: str | None = None
    chat_type: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    context_tokens: int = 0
    compaction_count: int = 0
    memory_flush_compaction_count: int | None = None
    previous_session_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for name, json_name in _JSON_NAMES.items():
            value = getattr(self, name)
            obj[json_name] = format_timestamp(value) if isinstance(value, datetime) else value
        for name, value in self.extra.items():
            obj.setdefault(name, value)
        return obj

    @classmethod
    def from_json(cls, key: str, obj: Any) -> SessionRecord:
        """Parse one entry; raises ValueError saying what is wrong."""
        if not isinstance(obj, dict):
            raise ValueError("entry is not a JSON object")
        session_id = obj.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("missing 'sessionId'")
        created = parse_timestamp(obj.get("createdAt", ""))
        updated = parse_timestamp(obj.get("updatedAt", ""))
        if created is None or updated is None:
            raise ValueError("missing or malformed 'createdAt'/'updatedAt'")
        values: dict[str, Any] = {}
        for name in COUNTERS:
            value = obj.get(_JSON_NAMES[name], 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"'{_JSON_NAMES[name]}' is not a non-negative integer")
            values[name] = value
        for name in ("origin_channel", "chat_type", "previous_session_id"):
            value = obj.get(_JSON_NAMES[name])
            values[name] = value if isinstance(value, str) else None
        flush = obj.get("memoryFlushCompactionCount")
        values["memory_flush_compaction_count"] = (
            flush if isinstance(flush, int) and not isinstance(flush, bool) else None
        )
        known = set(_JSON_NAMES.values())
        extra = {k: v for k, v in obj.items() if k not in known}
        return cls(
            key=key, session_id=session_id, created_at=created, updated_at=updated, extra=extra, **values
        )
