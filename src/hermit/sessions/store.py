"""The per-agent sessions.json store: session key → current sessionId, timestamps and counters.

sessions.json is an index over the transcripts, not the truth: every transcript header carries its
session key, so a corrupt or missing sessions.json is rebuilt from the `*.jsonl` files with nothing
lost (the damaged file is kept aside as `sessions.json.corrupt-<timestamp>`). A rebuilt entry gets its
token counters back from the usage recorded on the transcript's assistant messages. A transcript whose
header line is damaged keeps its key: the store appends a `session-header` entry from its own record
the first time it opens it, and a rebuild also looks for the key in what is left of the header line and
of the damaged sessions.json, before falling back to `recovered:<id>` (the rebuild itself:
sessions/recovery.py; this store holds the lock while it runs and saves what it returns).

Durability and concurrency: every change is a read-modify-write under an exclusive flock (hermit.locks) on
`sessions.json.lock` (so the gateway and a CLI process never lose each other's updates), written to
a temp file, fsynced and swapped in with os.replace. Readers need no lock: they always see either the
old or the new file.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple

from hermit.config.paths import StatePaths, ensure_private_dir
from hermit.durable import write_atomic
from hermit.errors import SessionError
from hermit.locks import LockFile
from hermit.sessions.files import read_own
from hermit.sessions.keys import chat_type_of, parse_session_key
from hermit.sessions.record import SessionRecord
from hermit.sessions.recovery import (
    Corrupt,
    aside_path,
    keys_in_damaged_store,
    parse_store,
    records_from_transcripts,
)
from hermit.sessions.transcript import (
    Clock,
    IdFactory,
    Transcript,
    format_timestamp,
    utc_now,
)

log = logging.getLogger("hermit.sessions")

STORE_FILE = "sessions.json"


def new_session_id() -> str:
    return str(uuid.uuid4())


_IMMUTABLE = ("key", "session_id")


class OpenedSession(NamedTuple):
    record: SessionRecord
    transcript_path: Path
    created: bool  # True when this call started a new session (new sessionId, new transcript)


def _write_atomic(path: Path, data: bytes, *, fsync: bool) -> None:
    write_atomic(path, data, mode=0o600, fsync=fsync, keep_mode=False)


class SessionStore:
    """sessions.json of one agent plus the `<sessionId>.jsonl` transcripts next to it."""

    def __init__(
        self,
        directory: Path,
        *,
        clock: Clock = utc_now,
        id_factory: IdFactory = new_session_id,
        cwd: str | Path | None = None,
        fsync: bool = True,
    ) -> None:
        self._dir = Path(directory)
        self._clock = clock
        self._id_factory = id_factory
        self._cwd = cwd
        self._fsync = fsync
        self.warnings: builtins.list[str] = []

    @classmethod
    def for_agent(
        cls,
        paths: StatePaths,
        agent_id: str,
        *,
        clock: Clock = utc_now,
        id_factory: IdFactory = new_session_id,
        cwd: str | Path | None = None,
        fsync: bool = True,
    ) -> SessionStore:
        """The store at `<state>/agents/<agentId>/sessions/`; cwd defaults to the agent's workspace."""
        return cls(
            paths.sessions_dir(agent_id),
            clock=clock,
            id_factory=id_factory,
            cwd=cwd if cwd is not None else paths.default_workspace(agent_id),
            fsync=fsync,
        )

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def fsync(self) -> bool:
        return self._fsync

    @property
    def path(self) -> Path:
        return self._dir / STORE_FILE

    def transcript_path(self, session_id: str) -> Path:
        return self._dir / f"{session_id}.jsonl"

    def open_transcript(self, record: SessionRecord, *, fsync: bool | None = None) -> Transcript:
        """The transcript of a record (it must exist: get_or_create/new_session create it). A damaged
        header line gets its stand-in appended from the record, so the key survives a rebuild."""
        transcript = Transcript.open(
            self.transcript_path(record.session_id),
            clock=self._clock,
            fsync=self._fsync if fsync is None else fsync,
        )
        if transcript.header.inferred:
            transcript.repair_header(record.key, created=format_timestamp(record.created_at),
                                     cwd=self._cwd_for(None))
            self._warn(f"{transcript.path}: line 1 is not a usable session header; appended a "
                       f"session-header entry for {record.key!r} (the damaged line is kept)")
        return transcript

    # ---- reading ------------------------------------------------------------------------------

    def get(self, key: str) -> SessionRecord | None:
        return self._read().get(key)

    def list(self) -> builtins.list[SessionRecord]:
        """All records, most recently updated first."""
        return sorted(self._read().values(), key=lambda r: r.updated_at, reverse=True)

    def _read(self) -> dict[str, SessionRecord]:
        """Lock-free read; takes the lock only to repair a corrupt or missing file."""
        try:
            data = self._read_bytes()
        except FileNotFoundError:
            if not any(self._dir.glob("*.jsonl")):
                return {}
            with self._locked():
                return self._load_locked()
        except OSError as exc:
            raise self._unreadable(exc) from exc
        try:
            return parse_store(data)
        except Corrupt:
            with self._locked():
                return self._load_locked()

    def _read_bytes(self) -> bytes:
        """sessions.json, never through a link and only when it is the user's own file (ForeignSessionFile)."""
        return read_own(self.path, "the session index")[0]

    def _unreadable(self, exc: OSError) -> SessionError:
        return SessionError(
            f"cannot read {self.path}: {exc.strerror or exc}",
            hint="check the permissions of the sessions directory (it should be yours, mode 0700)",
        )

    # ---- changing -----------------------------------------------------------------------------

    def get_or_create(
        self,
        key: str,
        *,
        origin_channel: str | None = None,
        chat_type: str | None = None,
        cwd: str | Path | None = None,
    ) -> OpenedSession:
        """The current session of `key`, creating record and transcript (with header) if needed."""
        _check_key(key)
        with self._locked():
            records = self._load_locked()
            record = records.get(key)
            if record is not None:
                path = self.transcript_path(record.session_id)
                if not os.path.lexists(path):  # a link there is refused when opened, never replaced
                    msg = f"transcript {path} of session {key!r} is missing; starting it again with a new header"
                    self._warn(msg)
                    Transcript.create(
                        path, cwd=self._cwd_for(cwd), session_key=key, clock=self._clock, fsync=self._fsync
                    )
                return OpenedSession(record, path, False)
            return self._start_locked(records, key, None, origin_channel, chat_type, cwd)

    def new_session(
        self,
        key: str,
        *,
        origin_channel: str | None = None,
        chat_type: str | None = None,
        cwd: str | Path | None = None,
    ) -> OpenedSession:
        """Rotate `key` to a fresh sessionId and transcript; the old transcript file stays on disk."""
        _check_key(key)
        with self._locked():
            records = self._load_locked()
            return self._start_locked(records, key, records.get(key), origin_channel, chat_type, cwd)

    def update(self, key: str, **fields: Any) -> SessionRecord:
        """Set fields (SessionRecord attribute names); updated_at becomes now unless given."""
        for name in fields:
            if name in _IMMUTABLE:
                raise TypeError(f"SessionStore.update cannot change {name!r}")
        now = self._clock()

        def change(record: SessionRecord) -> SessionRecord:
            return dataclasses.replace(record, **{"updated_at": now, **fields})

        return self.mutate(key, change)

    def add_usage(
        self,
        key: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        context_tokens: int | None = None,
        touch: bool = True,
    ) -> SessionRecord:
        """Add one request's token usage atomically (cumulative counters; context_tokens is replaced).
        `touch=False` keeps updated_at (the last activity), for background turns like the heartbeat."""
        now = self._clock()

        def change(record: SessionRecord) -> SessionRecord:
            return dataclasses.replace(
                record,
                input_tokens=record.input_tokens + input_tokens,
                output_tokens=record.output_tokens + output_tokens,
                total_tokens=record.total_tokens + input_tokens + output_tokens,
                context_tokens=record.context_tokens if context_tokens is None else context_tokens,
                updated_at=now if touch else record.updated_at,
            )

        return self.mutate(key, change)

    def mutate(self, key: str, change: Callable[[SessionRecord], SessionRecord]) -> SessionRecord:
        """Read-modify-write one record under the store lock; `change` must be quick and pure."""
        with self._locked():
            records = self._load_locked()
            record = records.get(key)
            if record is None:
                raise SessionError(
                    f"no session {key!r} in {self.path}",
                    hint="create it first with get_or_create(), or check the key with `hermit sessions list`",
                )
            new = change(record)
            if new.key != record.key or new.session_id != record.session_id:
                raise SessionError(f"a change to session {key!r} tried to alter its key or sessionId")
            records[key] = new
            self._save_locked(records)
            return new

    def rename(self, old: str, new: str) -> Literal["moved", "done", "absent", "taken"]:
        """Move the record of key `old` to key `new` (its sessionId, transcript and counters unchanged) in one
        atomic write under the store lock: "moved"; or, changing nothing, "done" (`new` has it and `old` none: moved
        before), "absent" (neither has one), "taken" (both have one: never merged, the caller decides). Another
        process's update of any record waits for the lock and then finds the record under `new`. The callers hold
        both keys' session locks (sessions/lock.py), so no turn appends to the transcript meanwhile."""
        _check_key(old)
        _check_key(new)
        with self._locked():
            records = self._load_locked()
            if old not in records:
                return "done" if new in records else "absent"
            if new in records:
                return "taken"
            records[new] = dataclasses.replace(records.pop(old), key=new)
            self._save_locked(records)
        return "moved"

    # ---- internals ----------------------------------------------------------------------------

    def _cwd_for(self, cwd: str | Path | None) -> str:
        chosen = cwd if cwd is not None else self._cwd
        return str(chosen if chosen is not None else Path.cwd())

    def _start_locked(
        self,
        records: dict[str, SessionRecord],
        key: str,
        previous: SessionRecord | None,
        origin_channel: str | None,
        chat_type: str | None,
        cwd: str | Path | None,
    ) -> OpenedSession:
        session_id = self._unused_session_id(records)
        path = self.transcript_path(session_id)
        # Transcript first: if we die before sessions.json is written, the header still names the key.
        Transcript.create(
            path,
            cwd=self._cwd_for(cwd),
            session_id=session_id,
            session_key=key,
            clock=self._clock,
            fsync=self._fsync,
        )
        now = self._clock()
        if origin_channel is None:
            if previous is not None:
                origin_channel = previous.origin_channel
            else:
                try:
                    origin_channel = parse_session_key(key).channel
                except SessionError:
                    origin_channel = None
        if chat_type is None:
            chat_type = previous.chat_type if previous is not None else chat_type_of(key)
        record = SessionRecord(
            key=key,
            session_id=session_id,
            created_at=now,
            updated_at=now,
            origin_channel=origin_channel,
            chat_type=chat_type,
            previous_session_id=previous.session_id if previous is not None else None,
            extra=dict(previous.extra) if previous is not None else {},
        )
        records[key] = record
        self._save_locked(records)
        return OpenedSession(record, path, True)

    def _unused_session_id(self, records: Mapping[str, SessionRecord]) -> str:
        in_use = {r.session_id for r in records.values()}
        for _ in range(100):
            candidate = self._id_factory()
            if candidate not in in_use and not self.transcript_path(candidate).exists():
                return candidate
        raise SessionError(
            f"could not find an unused session id in {self._dir}",
            hint="the id factory keeps returning ids of existing transcripts",
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Not re-entrant: flock locks per open file description, so a nested _locked() in the same
        # process would wait on itself. Public methods take it once and call *_locked helpers.
        ensure_private_dir(self._dir)
        try:
            lock = LockFile.acquire(self._dir / f"{STORE_FILE}.lock")
        except OSError as exc:
            raise SessionError(
                f"cannot open the lock file in {self._dir}: {exc.strerror or exc}",
                hint="check that the sessions directory is writable by you",
            ) from exc
        with lock:
            yield

    def _load_locked(self) -> dict[str, SessionRecord]:
        try:
            data = self._read_bytes()
        except FileNotFoundError:
            return self._rebuild_missing_locked()
        except OSError as exc:
            raise self._unreadable(exc) from exc
        try:
            return parse_store(data)
        except Corrupt as corrupt:
            return self._recover_locked(corrupt)

    def _save_locked(self, records: Mapping[str, SessionRecord]) -> None:
        obj = {key: record.to_json() for key, record in records.items()}
        data = (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        try:
            _write_atomic(self.path, data, fsync=self._fsync)
        except OSError as exc:
            raise SessionError(
                f"cannot write {self.path}: {exc.strerror or exc}",
                hint="check free disk space and the permissions of the sessions directory",
            ) from exc

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)

    # ---- recovery (sessions/recovery.py does the work; these hold the lock and save) ---------------

    def _records_from_transcripts(
        self, salvaged: dict[str, SessionRecord], known_keys: Mapping[str, str] | None = None
    ) -> dict[str, SessionRecord]:
        return records_from_transcripts(self._dir, salvaged, known_keys, self._warn, STORE_FILE)

    def _rebuild_missing_locked(self) -> dict[str, SessionRecord]:
        records = self._records_from_transcripts({})
        if records:
            self._save_locked(records)
            self._warn(
                f"{self.path} was missing; rebuilt {len(records)} session(s) from the transcripts in {self._dir}"
            )
        return records

    def _recover_locked(self, corrupt: Corrupt) -> dict[str, SessionRecord]:
        aside = aside_path(self.path, self._clock())
        # The damaged bytes as they were read are kept under the new name before os.replace below swaps in
        # the rebuilt file: at every instant sessions.json is either the old or the new file. (A copy, not a
        # hard link: a reader never sees sessions.json with a second name, which it would refuse.)
        _write_atomic(aside, corrupt.data, fsync=self._fsync)
        records = self._records_from_transcripts(corrupt.salvaged, keys_in_damaged_store(corrupt.data))
        self._save_locked(records)
        self._warn(
            f"{self.path} was corrupt ({corrupt.reason}); moved it to {aside.name} and rebuilt "
            f"{len(records)} session(s): {len(corrupt.salvaged)} kept from the damaged file, "
            f"{len(records) - len(corrupt.salvaged)} recovered from transcript headers"
        )
        return records

def _check_key(key: str) -> None:
    if not key or key != key.strip() or any(ord(c) < 0x20 for c in key):
        raise SessionError(
            f"invalid session key {key!r}",
            hint="session keys look like agent:<agentId>:main or cron:<jobId> (no spaces or control chars)",
        )
