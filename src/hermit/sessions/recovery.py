"""Crash recovery for sessions.json: parsing it with what is still valid kept, keeping a damaged file aside,
and rebuilding its entries from the transcripts — token counters from recorded usage, session keys from
the header, or from what is still legible in a damaged header line or a damaged sessions.json."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from hermit.errors import SessionError
from hermit.messages import Usage
from hermit.sessions.files import open_own
from hermit.sessions.keys import chat_type_of, parse_session_key
from hermit.sessions.record import SessionRecord
from hermit.sessions.transcript import CompactionEntry, Entry, MessageEntry, parse_timestamp, read_transcript

RECOVERED_KEY_PREFIX = "recovered:"  # the key of a transcript whose key is legible nowhere


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
        fd, _ = open_own(path, os.O_RDONLY, "the transcript")  # as read_transcript would: the user's own file
    except (OSError, SessionError):
        return None
    with os.fdopen(fd, "rb") as fh:
        first = fh.readline(64_000)
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


class Corrupt(Exception):
    """sessions.json could not be used as it is: why, the entries that were still valid, and its bytes."""

    def __init__(self, reason: str, salvaged: dict[str, SessionRecord], data: bytes = b"") -> None:
        super().__init__(reason)
        self.reason = reason
        self.salvaged = salvaged
        self.data = data


def parse_store(data: bytes) -> dict[str, SessionRecord]:
    """Parse sessions.json; raises Corrupt with whatever entries were still valid."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Corrupt(f"not valid JSON ({exc})", {}, data) from None
    if not isinstance(obj, dict):
        raise Corrupt("top level is not a JSON object", {}, data)
    records: dict[str, SessionRecord] = {}
    bad: list[str] = []
    for key, value in obj.items():
        try:
            records[key] = SessionRecord.from_json(key, value)
        except ValueError as exc:
            bad.append(f"{key!r}: {exc}")
    if bad:
        raise Corrupt("invalid entries: " + "; ".join(bad), records, data)
    return records


def aside_path(store_path: Path, now: datetime) -> Path:
    """Where a damaged sessions.json is kept: `sessions.json.corrupt-<timestamp>[-n]`, a name not taken."""
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = store_path.with_name(f"{store_path.name}.corrupt-{stamp}")
    n = 1
    while candidate.exists():
        candidate = store_path.with_name(f"{store_path.name}.corrupt-{stamp}-{n}")
        n += 1
    return candidate


def records_from_transcripts(
    directory: Path, salvaged: dict[str, SessionRecord], known_keys: Mapping[str, str] | None,
    warn: Callable[[str], None], store_file: str,
) -> dict[str, SessionRecord]:
    """The sessions.json entries the transcripts in `directory` give back. Salvaged records win; every
    other key gets its newest transcript (by header timestamp).

    `known_keys` (session id → key, from a damaged sessions.json) names the key of a transcript
    whose header line is unreadable."""
    owned = {r.session_id for r in salvaged.values()}
    by_key: dict[str, list[SessionRecord]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        try:
            read = read_transcript(path)
            mtime = datetime.fromtimestamp(path.lstat().st_mtime, UTC)
        except (SessionError, OSError) as exc:
            warn(f"skipped {path} while rebuilding {store_file}: {exc}")
            continue
        if path.stem in owned:
            continue  # the current session of a record that survived
        key = (read.header.session_key or (known_keys or {}).get(path.stem) or key_in_damaged_header(path)
               or f"{RECOVERED_KEY_PREFIX}{path.stem}")
        if key in salvaged:
            continue
        created = parse_timestamp(read.header.timestamp) or mtime
        stamps = [parse_timestamp(e.timestamp) for e in read.entries]
        updated = max([s for s in stamps if s is not None], default=created)
        by_key.setdefault(key, []).append(
            SessionRecord(
                key=key,
                session_id=path.stem,
                created_at=created,
                updated_at=max(updated, created),
                origin_channel=None,
                chat_type=chat_type_of(key),
                compaction_count=sum(isinstance(e, CompactionEntry) for e in read.entries),
                **counters(read.entries)._asdict(),
            )
        )
    records = dict(salvaged)
    for key, candidates in by_key.items():
        candidates.sort(key=lambda r: (r.created_at, r.updated_at, r.session_id))
        current = candidates[-1]
        if len(candidates) > 1:
            current = dataclasses.replace(current, previous_session_id=candidates[-2].session_id)
        with suppress(SessionError):
            current = dataclasses.replace(current, origin_channel=parse_session_key(key).channel)
        records[key] = current
    return records
