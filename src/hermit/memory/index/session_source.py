"""Session transcripts as a memory source: user/assistant text only, secrets redacted, JSONL line numbers kept.

A transcript is rendered as a virtual document whose line N is JSONL line N: a user or assistant
message becomes `User: …` / `Assistant: …` (newlines flattened), every other line (header, tool calls
and results, compactions) becomes an empty line. Chunk and snippet line numbers therefore point
straight into the JSONL, and `memory_get` on `sessions/<id>.jsonl` renders the same lines.

Only the main session's user turns are the owner's words. Any other transcript's user turns say whose
chat they came from, taken from the transcript's session key (its header, or the header repair entry):
`User (telegram DM 2001): …`, `User (telegram group -100200): …`, and in a group, where each user message
records its sender, `User (telegram group -100200, 3001 "Gus"): …`; a transcript without a readable key
fails closed (`User (a session of unknown origin): …`). Search results from such a transcript carry its
origin too (`transcript_origin`, memory/policy/audience.py `annotate`), so the owner's model never
takes a contact's words for the owner's.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.errors import PathPolicyError, SessionError
from hermit.memory.index.sources import SourceFile
from hermit.memory.policy.provenance import Origin, sender_label, sender_text
from hermit.memory.store.api import FileState, file_ident
from hermit.messages import OWNER_MARK, Sender, label_text, valid_text
from hermit.sessions.background import HEARTBEAT_MARK, BeatLines
from hermit.sessions.entries import (
    HEADER_REPAIR_TYPE,
    RETRACTED_TYPE,
    edit,
    edited_texts,
    retract,
    retracted_refs,
)
from hermit.sessions.keys import SessionKey, SessionKind, is_main_session_key, parse_session_key
from hermit.textfile import read_regular

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


UNKNOWN_CHAT = "a session of unknown origin"
MAX_LABEL_CHARS = 80


def _label_part(value: str) -> str:
    """An id or name made fit for a speaker label (provenance.label_text: no bracket or quote of any
    script, no control, format or line-breaking character), bounded."""
    return label_text(value, MAX_LABEL_CHARS) or "?"


def _parsed(session_key: str | None) -> SessionKey | None:
    try:
        return parse_session_key(session_key) if session_key is not None else None
    except SessionError:
        return None


def chat_of(session_key: str | None) -> str | None:
    """Whose chat a transcript is, for its labels: None for the main session (the owner's own words),
    else e.g. "telegram DM 2001", "slack channel C1", "cron job nightly"; fails closed."""
    if session_key is not None and is_main_session_key(session_key):
        return None
    key = _parsed(session_key)
    if key is None:
        return UNKNOWN_CHAT
    channel = f"{_label_part(key.channel)} " if key.channel else ""
    if key.kind is SessionKind.DM and key.peer_id:
        return f"{channel}DM {_label_part(key.peer_id)}"
    if key.kind in (SessionKind.GROUP, SessionKind.CHANNEL) and key.peer_id:
        return f"{channel}{key.kind.value} {_label_part(key.peer_id)}"
    if key.kind is SessionKind.CRON and key.job_id:
        return f"cron job {_label_part(key.job_id)}"
    if key.kind is SessionKind.SUBAGENT and key.run_id:
        return f"subagent run {_label_part(key.run_id)}"
    return f"session {_label_part(session_key or '')}"


def _header_key(objs: list[Any]) -> str | None:
    """The session key a transcript names: its header line's, else its last header repair entry's."""
    first = objs[0] if objs else None
    if isinstance(first, dict) and first.get("type") == "session" and isinstance(first.get("sessionKey"), str):
        return str(first["sessionKey"])
    for obj in reversed(objs):
        if (isinstance(obj, dict) and obj.get("type") == "custom" and obj.get("customType") == HEADER_REPAIR_TYPE
                and isinstance(obj.get("data"), dict) and isinstance(obj["data"].get("sessionKey"), str)):
            return str(obj["data"]["sessionKey"])
    return None


def _parse_lines(raw: str) -> list[Any]:
    objs: list[Any] = []
    for line in raw.split("\n"):
        try:
            objs.append(json.loads(line) if line.strip() else None)
        except ValueError:
            objs.append(None)  # a corrupt line stays an empty line: numbering is kept
    return objs


def transcript_session_key(raw: str) -> str | None:
    """The session key a transcript names (None: none readable), parsing only the lines that may hold it."""
    first, _, rest = raw.partition("\n")
    repairs = "\n".join(line for line in rest.split("\n") if HEADER_REPAIR_TYPE in line)
    return _header_key(_parse_lines(first) + (_parse_lines(repairs) if repairs else []))


def transcript_origin(session_key: str | None) -> Origin | None:
    """The origin search results from a transcript are labelled with; None for the main session's."""
    if chat_of(session_key) is None:
        return None
    key = _parsed(session_key)
    if key is None:
        return Origin("unknown")
    group = _label_part(key.peer_id) if key.is_group and key.peer_id else None
    sender = _label_part(key.peer_id) if key.kind is SessionKind.DM and key.peer_id else None
    return Origin(_label_part(session_key or ""), _label_part(key.channel) if key.channel else None, group, sender)


def _sender(message: dict[str, Any]) -> str | None:
    """Who wrote a group's user message, as recorded with it (agent/speakers.py), for its line's label:
    `3001 "Gus"` (provenance.sender_label), with the owner's mark; None when none is recorded or it is
    unreadable (the line keeps the chat's label alone)."""
    raw = message.get("sender")
    if message.get("role") != "user" or raw is None:
        return None
    try:
        s = Sender.from_dict(raw)
    except ValueError:
        return None
    return sender_label(sender_text(s.name, s.id)) + (OWNER_MARK if s.owner else "")


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
    objs = _parse_lines(raw)
    refs = retracted_refs(objs)  # messages their senders deleted: never indexed
    edits = edited_texts(objs)  # ...and those edited after their answer, as edited
    chat = chat_of(_header_key(objs))
    # A chat's assistant says what the chat steers it to: its lines carry the chat's label as its user's do.
    label = {"User": "User", "Assistant": "Assistant"} if chat is None else {
        "User": f"User ({chat})", "Assistant": f"Assistant ({chat})"}
    out: list[str] = []
    messages = 0
    beats = BeatLines()  # a heartbeat's prompt and acknowledgements are nobody's words: not indexed
    for obj in objs:
        rendered = ""
        if isinstance(obj, dict) and obj.get("type") == "custom" and obj.get("customType") == HEARTBEAT_MARK:
            beats.mark()
        if isinstance(obj, dict) and obj.get("type") == "message":
            messages += 1
            message = obj.get("message")
            got = _message_text(retract(edit(message, edits), refs) if isinstance(message, dict) else message)
            if isinstance(message, dict) and message.get("role") == "user" and beats.user():
                got = None  # a beat's prompt
            elif got and got[0] == "Assistant":
                alert = beats.assistant(got[1])
                got = (got[0], alert) if alert else None  # an acknowledgement: nothing reached anyone
            if got:
                who, text = got
                sender = _sender(obj["message"]) if chat is not None else None
                # A group's turn names its sender inside the chat's label: `User (telegram group -5, 3001 "Gus")`.
                who = f"User ({chat}, {sender})" if sender else label[who]
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


def session_replaced(old: FileState, st: os.stat_result) -> bool:
    """Whether a transcript changed in a way appending to it does not explain: another file under its name
    (another inode: a restore, an atomic rename), or its identity changed at the size it was indexed at
    (rewritten in place with its mtime put back, or only chmod-ed: the sync reads it and its hash decides).
    A row indexed before identities were kept ("") counts only at the size it was indexed at: a transcript
    grown since keeps the growth rule."""
    now = file_ident(st)
    if old.ident == now:
        return False
    if st.st_size == old.size:
        return True
    return bool(old.ident) and old.ident.rsplit(":", 1)[0] != now.rsplit(":", 1)[0]


def session_needs_index(
    *, indexed_size: int | None, indexed_messages: int | None, size: int, mtime_ns: int, data: bytes | None,
    now: float | None = None, replaced: bool = False,
) -> SessionDelta:
    """The re-index rule: new, or grown by 100 kB / 50 messages, or changed and quiet for 5 minutes — or a
    message its sender deleted was retracted since it was indexed (in what was added: `data` from the indexed
    size on), which is indexed at once: the deleted text must not stay findable for the quiet period — or
    `replaced` (session_replaced): read again at once, its hash deciding whether anything is re-indexed."""
    msgs = count_messages(data) if data is not None else 0
    if indexed_size is None or replaced:
        return SessionDelta(True, msgs)
    if size == indexed_size:
        return SessionDelta(False, msgs)
    quiet = ((now if now is not None else time.time()) - mtime_ns / 1e9) >= QUIET_SECONDS
    grown = size - indexed_size >= REINDEX_BYTES or msgs - (indexed_messages or 0) >= REINDEX_MESSAGES
    retracted = data is not None and RETRACTED_MARK in data[max(0, indexed_size - len(RETRACTED_MARK)):]
    return SessionDelta(grown or quiet or retracted or size < indexed_size, msgs)


# How a `retracted` entry's line names its type (transcript.py writes compact JSON). Inside a message's text every
# quote is escaped, so only an entry of that type holds these bytes.
RETRACTED_MARK = f'"customType":"{RETRACTED_TYPE}"'.encode()


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


def read_transcript(sessions: Path | None, path: str) -> str:
    """The transcript at memory path `path` ("sessions/…jsonl") rendered as the index holds it (memory_get's text);
    PathPolicyError when it is not one Hermit could have written (missing, a FIFO, a directory…)."""
    real = resolve_session_path(sessions, path)
    try:
        data = read_regular(real)
    except OSError:
        raise PathPolicyError(f"no such session transcript: {path}", "use a path from memory_search results") from None
    return render_transcript(data.decode("utf-8", errors="replace"))[0]
