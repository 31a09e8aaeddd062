"""Session lifecycle on an inbound message (SPEC §11): expiry by the reset policy and the chat commands.

Decisions:

- Expiry is evaluated when a message arrives, against the session's `updatedAt` in sessions.json
  (every turn updates it), with the injected clock and the agent's time zone. The chat type comes from
  the record (else from the key) and the channel from the record's origin channel, so per-type and
  per-channel overrides apply.
- `/new` and `/reset` (the configured triggers) and `/compact [focus]` are recognised at the start of a
  message, case-insensitively, with an optional Telegram-style `@botname`; the text after a reset
  trigger becomes the first message of the new session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path

from hermit.config.schema import SessionConfig
from hermit.sessions.keys import ChatType, chat_type_of
from hermit.sessions.record import SessionRecord
from hermit.sessions.reset import ResetCheck, ResetPolicy, is_expired, resolve_reset_policy

_COMPACT_RE = re.compile(r"/compact(?:@[A-Za-z0-9_]+)?(?=\s|$)", re.IGNORECASE)


@dataclass(frozen=True)
class SessionStart:
    """A session started by a reset command or by expiry."""

    session_id: str
    previous_session_id: str | None
    reason: str  # "/new", "/reset", "daily", "idle"
    memory_file: Path | None = None  # the session-memory hook's file, workspace-absolute

    def describe(self, workspace: Path) -> str:
        text = f"✨ Started a new session ({self.session_id})."
        if self.memory_file is not None:
            text += f" The last one was saved to {self.memory_file.relative_to(workspace).as_posix()}."
        return text


def parse_compact_command(text: str) -> str | None:
    """The focus of a `/compact [focus]` message ("" without one); None for other messages."""
    stripped = text.lstrip()
    match = _COMPACT_RE.match(stripped)
    return stripped[match.end():].strip() if match else None


def chat_type(record: SessionRecord) -> ChatType | None:
    types: dict[str | None, ChatType] = {"dm": "dm", "group": "group", "thread": "thread"}
    return types.get(record.chat_type) or chat_type_of(record.key)


def reset_policy(record: SessionRecord, cfg: SessionConfig) -> ResetPolicy:
    return resolve_reset_policy(cfg, chat_type(record), record.origin_channel)


def check_expiry(record: SessionRecord, cfg: SessionConfig, now: datetime, tz: tzinfo) -> ResetCheck:
    """Whether the session expired since its last activity (daily / idle / both, with overrides)."""
    return is_expired(reset_policy(record, cfg), record.updated_at, now, tz)
