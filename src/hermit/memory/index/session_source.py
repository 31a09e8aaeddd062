"""Session transcripts as a memory source: user/assistant text only, secrets redacted, JSONL line numbers kept.

A transcript is rendered as a virtual document whose line N is JSONL line N: a user or assistant
message becomes `User: …` / `Assistant: …` (newlines flattened), every other line (header, tool calls
and results, compactions) becomes an empty line. Chunk and snippet line numbers therefore point
straight into the JSONL, and `memory_get` on `sessions/<id>.jsonl` renders the same lines.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.errors import PathPolicyError
from hermit.memory.index.sources import SourceFile
from hermit.messages import valid_text

SESSIONS_PREFIX = "sessions/"
# Re-index a transcript once it grew by this much since it was last indexed...
REINDEX_BYTES = 100_000
REINDEX_MESSAGES = 50
# ...or once it has been quiet this long (a finished conversation is indexed even if short).
QUIET_SECONDS = 300
MAX_LINE_CHARS = 4000

_SECRET_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI / Anthropic keys
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub tokens
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack tokens
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),  # Google API keys
    re.compile(r"\b\d{8,10}:[A-Za-z0-9_\-]{35}\b"),  # Telegram bot tokens
    re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),  # JWTs
    re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._\-+/=]{16,}"),
]
_ASSIGNED_SECRET = re.compile(
    r"(?i)(\b(?:password|passwd|pwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token|token)|"
    r"密码|口令)(\s*[:=：]\s*|\s+is\s+)(\"[^\"]+\"|'[^']+'|\S+)"
)
REDACTED = "[REDACTED]"


def redact(text: str) -> str:
    """Replace things that look like credentials; keeps the label so the text still reads."""
    for pat in _SECRET_PATTERNS:
        repl = (lambda m: f"{m.group(1)} {REDACTED}") if pat.groups else (lambda m: REDACTED)
        text = pat.sub(repl, text)
    return _ASSIGNED_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def _message_text(message: Any) -> tuple[str, str] | None:
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    if role not in ("user", "assistant"):
        return None
    content = message.get("content")
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    else:
        return None
    text = " ".join(" ".join(p.split()) for p in parts if isinstance(p, str) and p.strip())
    if not text:
        return None
    return ("User" if role == "user" else "Assistant"), text


def render_transcript(raw: str) -> tuple[str, int]:
    """(virtual document with JSONL line numbers, number of message entries)."""
    out: list[str] = []
    messages = 0
    for line in raw.split("\n"):
        rendered = ""
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None  # a corrupt line stays an empty line: numbering is kept
            if isinstance(obj, dict) and obj.get("type") == "message":
                messages += 1
                got = _message_text(obj.get("message"))
                if got:
                    who, text = got
                    # valid_text: a "\ud800" escape in a transcript line must not break indexing
                    rendered = valid_text(redact(f"{who}: {text}")[:MAX_LINE_CHARS])
        out.append(rendered)
    if out and out[-1] == "":
        out.pop()
    return "\n".join(out), messages


def list_session_files(sessions_dir: Path | None) -> list[SourceFile]:
    if sessions_dir is None or not sessions_dir.is_dir():
        return []
    return [SourceFile(SESSIONS_PREFIX + p.name, str(p), "sessions")
            for p in sorted(sessions_dir.glob("*.jsonl")) if p.is_file() and not p.is_symlink()]


def count_messages(data: bytes) -> int:
    return data.count(b'"type":"message"') + data.count(b'"type": "message"')


@dataclass(frozen=True)
class SessionDelta:
    should_index: bool
    messages: int


def session_needs_index(
    *, indexed_size: int | None, indexed_messages: int | None, size: int, mtime_ns: int, data: bytes | None,
    now: float | None = None,
) -> SessionDelta:
    """The re-index rule: new, or grown by 100 kB / 50 messages, or changed and quiet for 5 minutes."""
    msgs = count_messages(data) if data is not None else 0
    if indexed_size is None:
        return SessionDelta(True, msgs)
    if size == indexed_size:
        return SessionDelta(False, msgs)
    quiet = ((now if now is not None else time.time()) - mtime_ns / 1e9) >= QUIET_SECONDS
    grown = size - indexed_size >= REINDEX_BYTES or msgs - (indexed_messages or 0) >= REINDEX_MESSAGES
    return SessionDelta(grown or quiet or size < indexed_size, msgs)


_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,200}\.jsonl")


def resolve_session_path(sessions_dir: Path | None, raw: str) -> Path:
    """`sessions/<id>.jsonl` → the transcript file; nothing else is reachable this way."""
    name = raw[len(SESSIONS_PREFIX):]
    if sessions_dir is None:
        raise PathPolicyError("session transcripts are not a memory source for this agent",
                              "add 'sessions' to memory_search.sources")
    if not _SESSION_NAME.fullmatch(name):
        raise PathPolicyError(f"not a session transcript path: {raw}",
                              "use a path from memory_search results, like sessions/<sessionId>.jsonl")
    p = sessions_dir / name
    if p.is_symlink():
        raise PathPolicyError(f"symlinks are not followed: {raw}", "session transcripts are plain files")
    return p
