"""Append-only JSONL session transcripts: a header line, then one entry per line, never rewritten but to take
the copies of a message its sender deleted out of it (sessions/scrub.py: atomically, under the append lock).

On-disk shape (SPEC §7):

    {"type":"session","version":1,"id":<sessionId>,"timestamp":...,"cwd":...,"sessionKey":...}
    {"type":"message","id":..,"parentId":..,"timestamp":..,"message":{...}}
    {"type":"compaction","id":..,"parentId":..,"timestamp":..,"summary":..,"firstKeptEntryId":..,
     "tokensBefore":..,"tokensAfter":..}
    {"type":"custom","id":..,"parentId":..,"timestamp":..,"customType":..,"data":...}

`sessionKey` in the header is Hermit's addition: it lets a lost or corrupt sessions.json be rebuilt from
the transcripts alone. `message` is opaque here; the agent layer stores `messages.Message.to_dict()`.
A header line that got damaged is never rewritten: the session store appends a `session-header` custom
entry carrying the header's fields (from its own record), and a reader takes the header from there.

Durability: every append is one write() of whole lines on an O_APPEND descriptor, under an flock so
two writers cannot interleave or fork the parentId chain, flushed and (by default) fsynced. Reading is
forgiving: a corrupt line (bad JSON, or a last line truncated by a crash) becomes a TranscriptProblem
with path and 1-based line number and is skipped; the next append starts on a fresh line, so a torn
tail never swallows a new entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermit.config.paths import ensure_private_dir
from hermit.durable import append_whole
from hermit.errors import SessionError
from hermit.locks import lock_fd
from hermit.messages import valid_json
from hermit.sessions.entries import (
    EDITED_TYPE,
    HEADER_REPAIR_TYPE,
    IMAGE_REFUSED_TYPE,
    RETRACTED_TYPE,
    TRANSCRIPT_VERSION,
    CompactionEntry,
    ContextView,
    CustomEntry,
    Entry,
    MessageEntry,
    ParsedTranscript,
    TranscriptHeader,
    TranscriptProblem,
    TranscriptRead,
    UnknownEntry,
    entry_from_json,
    header_from_json,
    parse_transcript,
)
from hermit.sessions.files import open_own, read_fd, read_own

__all__ = [  # the entry types are defined in entries.py; callers import them from here
    "HEADER_REPAIR_TYPE", "TRANSCRIPT_VERSION", "Clock", "CompactionEntry", "ContextView", "CustomEntry",
    "Entry", "IdFactory", "MessageEntry", "Transcript", "TranscriptHeader", "TranscriptProblem",
    "TranscriptRead", "UnknownEntry", "ensure_private_dir", "format_timestamp", "parse_timestamp",
    "read_transcript", "short_id", "utc_now",
]

Clock = Callable[[], datetime]
IdFactory = Callable[[], str]

_MAX_ID_ATTEMPTS = 100


def utc_now() -> datetime:
    return datetime.now(UTC)


def short_id() -> str:
    """Entry ids: 8 hex chars, unique within one transcript (collisions are retried on append)."""
    return secrets.token_hex(4)


def format_timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and a `Z`, like the original's `Date.toISOString()`."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("the clock must return timezone-aware datetimes")
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_timestamp(text: str) -> datetime | None:
    """The aware datetime of a stored timestamp, or None when it is missing or malformed."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _check_session_id(session_id: str) -> str:
    ok = (
        bool(session_id)
        and not session_id.startswith(".")
        and all(c.isalnum() or c in "-_." for c in session_id)
    )
    if not ok or not session_id.isascii():
        raise SessionError(
            f"invalid session id {session_id!r}",
            hint="a session id becomes a file name: ASCII letters, digits, '-', '_' or '.'",
        )
    return session_id


def _read_bytes(path: Path) -> tuple[bytes, tuple[int, int, int]]:
    try:
        data, st = read_own(path, "the transcript")  # never through a link, only the user's own file
    except FileNotFoundError:
        raise SessionError(
            f"transcript not found: {path}",
            hint="the session's .jsonl file was moved or deleted; start a new session with /new",
        ) from None
    except OSError as exc:
        raise SessionError(
            f"cannot read transcript {path}: {exc.strerror or exc}",
            hint="check the file's permissions (it should be readable by you, mode 0600)",
        ) from exc
    return data, (st.st_ino, len(data), st.st_mtime_ns)


def read_transcript(path: Path) -> TranscriptRead:
    """Read a whole transcript (e.g. for indexing); corrupt lines come back as problems, never None."""
    data, _ = _read_bytes(path)
    parsed = parse_transcript(path, data)
    return TranscriptRead(path, parsed.header, tuple(parsed.entries), tuple(parsed.problems))


def _dumps(obj: Mapping[str, Any]) -> bytes:
    # ensure_ascii=False keeps CJK readable; json escapes \n inside strings, so one entry = one line.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class Transcript:
    """One session's JSONL file. Cheap to construct; reads lazily and notices appends by others."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Clock = utc_now,
        id_factory: IdFactory = short_id,
        fsync: bool = True,
    ) -> None:
        self._path = Path(path)
        self._clock = clock
        self._id_factory = id_factory
        self._fsync = fsync
        self._parsed: ParsedTranscript | None = None
        self._by_id: dict[str, Entry] = {}
        self._signature: tuple[int, int, int] | None = None

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: Path,
        *,
        cwd: str | Path,
        session_id: str | None = None,
        session_key: str | None = None,
        clock: Clock = utc_now,
        id_factory: IdFactory = short_id,
        fsync: bool = True,
    ) -> Transcript:
        """Create a new transcript with its header line; refuses to touch an existing file."""
        path = Path(path)
        header = TranscriptHeader(
            session_id=_check_session_id(session_id or path.stem),
            timestamp=format_timestamp(clock()),
            cwd=str(cwd),
            session_key=session_key,
        )
        ensure_private_dir(path.parent)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except FileExistsError:
            raise SessionError(
                f"transcript already exists: {path}",
                hint="open it with Transcript.open(), or rotate to a new session id",
            ) from None
        try:
            _write_all(fd, _dumps(header.to_json()) + b"\n")
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return cls(path, clock=clock, id_factory=id_factory, fsync=fsync)

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        clock: Clock = utc_now,
        id_factory: IdFactory = short_id,
        fsync: bool = True,
    ) -> Transcript:
        """Open an existing transcript; raises SessionError if it is missing or unreadable."""
        transcript = cls(path, clock=clock, id_factory=id_factory, fsync=fsync)
        transcript._refresh()
        return transcript

    # ---- reading ------------------------------------------------------------------------------

    def _load(self, data: bytes, signature: tuple[int, int, int]) -> ParsedTranscript:
        parsed = parse_transcript(self._path, data)
        self._parsed = parsed
        self._by_id = {e.id: e for e in parsed.entries}
        self._signature = signature
        return parsed

    def _refresh(self) -> ParsedTranscript:
        """Re-read when the file changed since we last saw it (another writer appended)."""
        if self._parsed is not None:
            try:
                st = os.lstat(self._path)  # a link swapped in is another inode: read (and refused) again
            except OSError:
                st = None
            if st is not None and (st.st_ino, st.st_size, st.st_mtime_ns) == self._signature:
                return self._parsed
        data, signature = _read_bytes(self._path)
        return self._load(data, signature)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def header(self) -> TranscriptHeader:
        return self._refresh().header

    @property
    def problems(self) -> tuple[TranscriptProblem, ...]:
        """Lines skipped while reading, each with path and 1-based line number."""
        return tuple(self._refresh().problems)

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._refresh().entries)

    def messages(self) -> tuple[MessageEntry, ...]:
        return tuple(e for e in self._refresh().entries if isinstance(e, MessageEntry))

    def get(self, entry_id: str) -> Entry | None:
        self._refresh()
        return self._by_id.get(entry_id)

    def line_of(self, entry_id: str) -> int | None:
        """1-based line of an entry in the JSONL file (so a search hit can be opened later)."""
        entry = self.get(entry_id)
        return entry.line if entry is not None else None

    def latest_compaction(self) -> CompactionEntry | None:
        for entry in reversed(self._refresh().entries):
            if isinstance(entry, CompactionEntry):
                return entry
        return None

    def context_view(self) -> ContextView:
        """Entries to rebuild context from: after the latest compaction, from its firstKeptEntryId on."""
        entries = self._refresh().entries
        compaction: CompactionEntry | None = None
        at = -1
        for index in range(len(entries) - 1, -1, -1):
            candidate = entries[index]
            if isinstance(candidate, CompactionEntry):
                compaction, at = candidate, index
                break
        if compaction is None:
            return ContextView(None, tuple(entries))
        start = at + 1
        warning: str | None = None
        kept = compaction.first_kept_entry_id
        if kept is not None:
            found = next((i for i, e in enumerate(entries) if e.id == kept), None)
            if found is None:
                warning = (
                    f"{self._path}:{compaction.line}: compaction's firstKeptEntryId {kept!r} was not found; "
                    "context starts after the compaction entry"
                )
            else:
                start = found
        view = tuple(e for e in entries[start:] if not isinstance(e, CompactionEntry))
        return ContextView(compaction, view, warning)

    # ---- appending ----------------------------------------------------------------------------

    def append_message(self, message: Mapping[str, Any]) -> MessageEntry:
        entry = self._append({"type": "message", "message": dict(message)})
        assert isinstance(entry, MessageEntry)
        return entry

    def append_compaction(
        self,
        *,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        tokens_after: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> CompactionEntry:
        body: dict[str, Any] = {
            "type": "compaction",
            "summary": summary,
            "firstKeptEntryId": first_kept_entry_id,
            "tokensBefore": tokens_before,
            "tokensAfter": tokens_after,
        }
        if details is not None:
            body["details"] = dict(details)
        entry = self._append(body)
        assert isinstance(entry, CompactionEntry)
        return entry

    def repair_header(self, session_key: str, *, created: str = "", cwd: str = "") -> CustomEntry:
        """Stand in for a damaged header line (which stays as it is): a `session-header` entry that
        readers use as the header, so the session keeps its key in every later rebuild."""
        return self.append_custom(HEADER_REPAIR_TYPE, {
            "version": TRANSCRIPT_VERSION, "id": _check_session_id(self._path.stem), "timestamp": created,
            "cwd": cwd, "sessionKey": session_key,
        })

    def append_custom(self, custom_type: str, data: Any = None) -> CustomEntry:
        entry = self._append({"type": "custom", "customType": custom_type, "data": data})
        assert isinstance(entry, CustomEntry)
        if custom_type in (RETRACTED_TYPE, IMAGE_REFUSED_TYPE, EDITED_TYPE):
            self._parsed = None  # it changes an earlier entry as read: read the file again
        return entry

    def _new_id(self, taken: Mapping[str, Entry]) -> str:
        for _ in range(_MAX_ID_ATTEMPTS):
            candidate = self._id_factory()
            if candidate and candidate not in taken:
                return candidate
        raise SessionError(
            f"could not find an unused entry id for {self._path} after {_MAX_ID_ATTEMPTS} attempts",
            hint="the id factory keeps returning ids already in the transcript",
        )

    def _open_locked(self) -> int:
        """The transcript opened for appending and locked. A deleted message's scrub (sessions/scrub.py) replaces
        the file under this lock: opened before that and locked after, the descriptor is the old file's, and an
        append to it would be lost, so the name is opened again until it names what is locked."""
        while True:
            try:  # never through a link, only the user's own file (sessions/files.py): judged before it is locked
                fd, _ = open_own(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, "the transcript")
            except OSError as exc:
                raise SessionError(
                    f"cannot append to transcript {self._path}: {exc.strerror or exc}",
                    hint="check that the sessions directory is writable by you",
                ) from exc
            try:
                lock_fd(fd)
                with contextlib.suppress(FileNotFoundError):
                    if os.lstat(self._path).st_ino == os.fstat(fd).st_ino:
                        return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def _append(self, body: dict[str, Any]) -> Entry:
        ensure_private_dir(self._path.parent)
        fd = self._open_locked()
        try:
            st = os.fstat(fd)
            parsed = self._parsed
            if parsed is None or (st.st_ino, st.st_size, st.st_mtime_ns) != self._signature:
                data = read_fd(fd, st.st_size)  # what this descriptor holds: no second open by name
                parsed = self._load(data, (st.st_ino, len(data), st.st_mtime_ns))
            timestamp = format_timestamp(self._clock())
            prefix = b""
            line = parsed.line_count + 1
            if st.st_size == 0:
                # The file was emptied or never got its header (crash right after creation).
                header = TranscriptHeader(_check_session_id(self._path.stem), timestamp, "")
                prefix = _dumps(header.to_json()) + b"\n"
                line = 2
            elif not parsed.ends_clean:
                prefix = b"\n"  # a torn last line must not swallow this entry
            entry_id = self._new_id(self._by_id)
            parent_id = parsed.entries[-1].id if parsed.entries else None
            obj: dict[str, Any] = {
                "type": body["type"],
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": timestamp,
            }
            obj.update((k, v) for k, v in body.items() if k != "type")
            try:
                encoded = _dumps(obj)
            except UnicodeEncodeError:
                # A lone surrogate from outside that slipped past the boundaries: store U+FFFD rather
                # than lose the entry (and with it the turn).
                encoded = _dumps(valid_json(obj))
            except (TypeError, ValueError) as exc:
                raise SessionError(
                    f"cannot write a {body['type']} entry to {self._path}: {exc}",
                    hint="transcript entries must be JSON-serializable (use Message.to_dict())",
                ) from exc
            append_whole(fd, prefix + encoded + b"\n", fsync=self._fsync)  # all of the line or none of it
            after = os.fstat(fd)
        finally:
            os.close(fd)  # also releases the flock
        # Re-parse only the line we wrote, so the in-memory view matches what a fresh read would give.
        entry = entry_from_json(json.loads(encoded), line)
        assert not isinstance(entry, str)
        if st.st_size == 0:
            parsed.header = header_from_json(json.loads(prefix)) or parsed.header
            parsed.problems = [p for p in parsed.problems if p.line != 1]
        parsed.entries.append(entry)
        parsed.line_count = line
        parsed.ends_clean = True
        self._by_id[entry.id] = entry
        self._signature = (after.st_ino, after.st_size, after.st_mtime_ns)
        return entry
