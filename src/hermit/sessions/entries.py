"""Transcript lines as values (the header, message / compaction / custom entries) and the forgiving parse.

Parsing never fails on a bad line: it becomes a TranscriptProblem with path and 1-based line number and
is skipped. A damaged header (line 1) is replaced by the latest `session-header` custom entry when the
session store has appended one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

TRANSCRIPT_VERSION = 1
HEADER_REPAIR_TYPE = "session-header"  # custom entry standing in for a damaged line 1
# Custom entry {"ref": ...}: the sender deleted that user message on the platform. The message's line stays, its
# text scrubbed to RETRACTED_TEXT with the copies Hermit wrote after it (sessions/scrub.py; a kill or a failure
# there leaves it as it was), and every reader gets RETRACTED_TEXT in its place (`retract`): the model's
# context, the memory flush and compaction, session memory, the index, the web app's history. It hides its
# message wherever it stands in the file, before the message's line too: the gateway writes it as soon as the
# delete comes, ahead of a turn that has not recorded the message yet (gateway/bus.py), so a kill loses nothing.
RETRACTED_TYPE = "retracted"
RETRACTED_TEXT = "[a message its sender deleted]"
# Custom entry {"ref": ..., "text": ...}: the sender edited that user message on the platform after it was answered
# (gateway/retractions.py). Every reader gets its text as `text` + EDITED_MARK in its place (`edit`; the last such
# entry of a ref wins, wherever it stands; a `retracted` one wins over it); when the edit dropped words, the line is
# rewritten so and the copies of what the old text alone brought are scrubbed (sessions/scrub.py), as a delete's.
EDITED_TYPE = "edited"
EDITED_MARK = " (edited)"
# Custom entry {"images": [image_key, ...]}: the model's provider refused those images (not a valid image of its
# type, say: a member's file that starts like a JPEG). Every reader gets each in its message replaced by
# IMAGE_REFUSED_TEXT, wherever it stands in the file: sent again with the history, it had every later turn of the
# session refused once (and made again without images) until /new. The message's line keeps the image.
IMAGE_REFUSED_TYPE = "image-refused"
IMAGE_REFUSED_TEXT = "[an image not sent: the provider refused it]"
# Custom entry {"reason": "/new" | "/reset" | "daily reset" | "idle reset"}: the last line of a session that
# ended, written as the next one starts (the web app's past sessions say why each ended).
ENDED_TYPE = "ended"


@dataclass(frozen=True)
class TranscriptProblem:
    """A line that could not be used; it was skipped, the rest of the transcript was loaded."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class TranscriptHeader:
    session_id: str
    timestamp: str
    cwd: str
    version: int = TRANSCRIPT_VERSION
    session_key: str | None = None
    # True when line 1 was missing or unreadable and this header was inferred from the file name.
    inferred: bool = False

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "type": "session",
            "version": self.version,
            "id": self.session_id,
            "timestamp": self.timestamp,
            "cwd": self.cwd,
        }
        if self.session_key is not None:
            obj["sessionKey"] = self.session_key
        return obj


@dataclass(frozen=True)
class MessageEntry:
    type: ClassVar[str] = "message"
    id: str
    parent_id: str | None
    timestamp: str
    line: int  # 1-based line number in the JSONL file
    message: dict[str, Any]


@dataclass(frozen=True)
class CompactionEntry:
    type: ClassVar[str] = "compaction"
    id: str
    parent_id: str | None
    timestamp: str
    line: int
    summary: str
    first_kept_entry_id: str | None
    tokens_before: int
    tokens_after: int | None = None
    details: dict[str, Any] | None = None


@dataclass(frozen=True)
class CustomEntry:
    type: ClassVar[str] = "custom"
    id: str
    parent_id: str | None
    timestamp: str
    line: int
    custom_type: str
    data: Any = None


@dataclass(frozen=True)
class UnknownEntry:
    """An entry of a type this version does not know (written by a newer Hermit); kept, not dropped."""

    id: str
    parent_id: str | None
    timestamp: str
    line: int
    entry_type: str
    raw: dict[str, Any]

    @property
    def type(self) -> str:
        return self.entry_type


Entry = MessageEntry | CompactionEntry | CustomEntry | UnknownEntry


@dataclass(frozen=True)
class ContextView:
    """What to rebuild model context from: the latest compaction summary (if any) plus the entries kept
    verbatim — from its firstKeptEntryId onward, compaction entries excluded."""

    compaction: CompactionEntry | None
    entries: tuple[Entry, ...]
    warning: str | None = None


@dataclass(frozen=True)
class TranscriptRead:
    path: Path
    header: TranscriptHeader
    entries: tuple[Entry, ...]
    problems: tuple[TranscriptProblem, ...]


def _int_or(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def entry_from_json(obj: dict[str, Any], line: int) -> Entry | str:
    """The entry a parsed line describes, or a message saying why the line is unusable."""
    entry_id = obj.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        return "entry without a string 'id'"
    parent = obj.get("parentId")
    parent_id = parent if isinstance(parent, str) else None
    stamp = obj.get("timestamp")
    timestamp = stamp if isinstance(stamp, str) else ""
    kind = obj.get("type")
    if kind == "message":
        message = obj.get("message")
        if not isinstance(message, dict):
            return f"message entry {entry_id!r} without a 'message' object"
        return MessageEntry(entry_id, parent_id, timestamp, line, message)
    if kind == "compaction":
        summary = obj.get("summary")
        if not isinstance(summary, str):
            return f"compaction entry {entry_id!r} without a 'summary' string"
        first_kept = obj.get("firstKeptEntryId")
        details = obj.get("details")
        return CompactionEntry(
            entry_id,
            parent_id,
            timestamp,
            line,
            summary,
            first_kept if isinstance(first_kept, str) else None,
            _int_or(obj.get("tokensBefore"), 0) or 0,
            _int_or(obj.get("tokensAfter"), None),
            details if isinstance(details, dict) else None,
        )
    if kind == "custom":
        custom_type = obj.get("customType")
        if not isinstance(custom_type, str) or not custom_type:
            return f"custom entry {entry_id!r} without a 'customType' string"
        return CustomEntry(entry_id, parent_id, timestamp, line, custom_type, obj.get("data"))
    if kind == "session":
        return "a second session header (only line 1 may be one)"
    if not isinstance(kind, str) or not kind:
        return f"entry {entry_id!r} without a 'type'"
    return UnknownEntry(entry_id, parent_id, timestamp, line, kind, obj)


def header_from_json(obj: dict[str, Any]) -> TranscriptHeader | None:
    if obj.get("type") != "session" or not isinstance(obj.get("id"), str):
        return None
    key = obj.get("sessionKey")
    return TranscriptHeader(
        session_id=obj["id"],
        timestamp=obj["timestamp"] if isinstance(obj.get("timestamp"), str) else "",
        cwd=obj["cwd"] if isinstance(obj.get("cwd"), str) else "",
        version=_int_or(obj.get("version"), TRANSCRIPT_VERSION) or TRANSCRIPT_VERSION,
        session_key=key if isinstance(key, str) else None,
    )


def _inferred_header(path: Path) -> TranscriptHeader:
    return TranscriptHeader(session_id=path.stem, timestamp="", cwd="", inferred=True)


@dataclass
class ParsedTranscript:
    header: TranscriptHeader
    entries: list[Entry]
    problems: list[TranscriptProblem]
    line_count: int  # lines in the file, counting an unterminated last line
    ends_clean: bool  # empty, or ends with a newline: the next append needs no leading newline


def parse_transcript(path: Path, data: bytes) -> ParsedTranscript:
    problems: list[TranscriptProblem] = []
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    header: TranscriptHeader | None = None
    ends_clean = not data or data.endswith(b"\n")
    lines = data.split(b"\n")
    if ends_clean:
        lines.pop()  # the empty string after the final newline (or of an empty file)
    if not lines:
        problems.append(TranscriptProblem(path, 1, "empty transcript: no session header"))
    for number, raw in enumerate(lines, start=1):
        torn = number == len(lines) and not ends_clean
        if not raw.strip():
            if number == 1:
                problems.append(TranscriptProblem(path, 1, "blank first line: no session header"))
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            why = "truncated last line (an interrupted write?)" if torn else "not valid JSON"
            problems.append(TranscriptProblem(path, number, f"{why}: {exc}; line skipped"))
            continue
        if not isinstance(obj, dict):
            problems.append(TranscriptProblem(path, number, "not a JSON object; line skipped"))
            continue
        if number == 1:
            header = header_from_json(obj)
            if header is not None:
                continue
            problems.append(TranscriptProblem(path, 1, "line 1 is not a session header"))
        entry = entry_from_json(obj, number)
        if isinstance(entry, str):
            problems.append(TranscriptProblem(path, number, f"{entry}; line skipped"))
            continue
        if entry.id in seen:
            problems.append(
                TranscriptProblem(
                    path, number, f"duplicate entry id {entry.id!r} (first on line {seen[entry.id]}); skipped"
                )
            )
            continue
        seen[entry.id] = number
        entries.append(entry)
    if header is None:
        header = _repaired_header(entries)
        if header is not None:  # line 1 is damaged, but the store already appended its replacement
            problems = [p for p in problems if p.line != 1]
    return ParsedTranscript(header or _inferred_header(path), _images_refused(_retracted(_edited(entries))), problems,
                            len(lines), ends_clean)


def image_key(data: str) -> str:
    """How an `image-refused` entry names an image: the SHA-256 of its base64 data."""
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def _images_refused(entries: list[Entry]) -> list[Entry]:
    keys = {k for e in entries if isinstance(e, CustomEntry) and e.custom_type == IMAGE_REFUSED_TYPE
            and isinstance(e.data, dict) and isinstance(e.data.get("images"), list)
            for k in e.data["images"] if isinstance(k, str)}
    if not keys:
        return entries
    return [dataclasses.replace(e, message=_without(e.message, keys)) if isinstance(e, MessageEntry) else e
            for e in entries]


def _without(message: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """A message (JSON form) with each image `keys` names replaced by IMAGE_REFUSED_TEXT."""
    content = message.get("content")
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "image" for p in content):
        return message
    parts = [{"type": "text", "text": "\n" + IMAGE_REFUSED_TEXT}
             if isinstance(p, dict) and p.get("type") == "image" and isinstance(p.get("data"), str)
             and image_key(p["data"]) in keys else p for p in content]
    return {**message, "content": parts} if parts != content else message


def retracted_refs(objs: Iterable[Any]) -> set[str]:
    """The message refs that `retracted` custom entries (as JSON objects) name."""
    return {o["data"]["ref"] for o in objs if isinstance(o, dict) and o.get("type") == "custom"
            and o.get("customType") == RETRACTED_TYPE and isinstance(o.get("data"), dict)
            and isinstance(o["data"].get("ref"), str)}


def retract(message: dict[str, Any], refs: set[str]) -> dict[str, Any]:
    """A user message (JSON form) its sender deleted, with its text and images replaced; others as they are."""
    if not refs or message.get("role") != "user" or message.get("ref") not in refs:
        return message
    return {**message, "content": [{"type": "text", "text": RETRACTED_TEXT}]}


def edited_texts(objs: Iterable[Any]) -> dict[str, str]:
    """The new text of each message ref that `edited` custom entries (as JSON objects) name: the last one's."""
    out: dict[str, str] = {}
    for o in objs:
        data = o.get("data") if isinstance(o, dict) and o.get("type") == "custom" and o.get(
            "customType") == EDITED_TYPE else None
        if isinstance(data, dict) and isinstance(data.get("ref"), str) and isinstance(data.get("text"), str):
            out[data["ref"]] = data["text"]
    return out


def edit(message: dict[str, Any], texts: dict[str, str]) -> dict[str, Any]:
    """A user message (JSON form) its sender edited after its answer, with its text as edited (`texts`: ref -> new
    text) and marked so; its images kept. Others as they are."""
    ref = message.get("ref")
    if message.get("role") != "user" or not isinstance(ref, str) or ref not in texts:
        return message
    content = message.get("content")
    images = [p for p in content if isinstance(p, dict) and p.get("type") != "text"] if isinstance(content, list) else []
    return {**message, "content": [{"type": "text", "text": texts[ref] + EDITED_MARK}, *images]}


def _edited(entries: list[Entry]) -> list[Entry]:
    texts = edited_texts({"type": "custom", "customType": e.custom_type, "data": e.data}
                         for e in entries if isinstance(e, CustomEntry) and e.custom_type == EDITED_TYPE)
    if not texts:
        return entries
    return [dataclasses.replace(e, message=edit(e.message, texts)) if isinstance(e, MessageEntry) else e
            for e in entries]


def _retracted(entries: list[Entry]) -> list[Entry]:
    refs = {e.data["ref"] for e in entries if isinstance(e, CustomEntry) and e.custom_type == RETRACTED_TYPE
            and isinstance(e.data, dict) and isinstance(e.data.get("ref"), str)}
    if not refs:
        return entries
    return [dataclasses.replace(e, message=retract(e.message, refs)) if isinstance(e, MessageEntry) else e
            for e in entries]


def _repaired_header(entries: list[Entry]) -> TranscriptHeader | None:
    for entry in reversed(entries):
        if isinstance(entry, CustomEntry) and entry.custom_type == HEADER_REPAIR_TYPE and isinstance(entry.data, dict):
            return header_from_json({**entry.data, "type": "session"})
    return None
