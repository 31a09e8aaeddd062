"""The job file (`<state>/cron/jobs.json`) and the per-job run logs (`<state>/cron/runs/<jobId>.jsonl`).

jobs.json is `{"version": 1, "jobs": [...]}` (entries: see jobs.py), owner-only (0600), rewritten
atomically (hermit.durable) under an flock, so the CLI and a running gateway can both change it. An
entry that does not validate is kept in the file byte-for-byte and reported, never dropped. Each run
appends one JSON line to its job's log (started_at, ended_at, status, error, delivered, trigger,
session), flushed per line; a log over 1 MB keeps its last 1,000 runs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermit.durable import append_whole, write_atomic
from hermit.errors import JobError, disk_full
from hermit.locks import locked
from hermit.scheduler.jobs import Job, RunStatus, Trigger, parse_job

FORMAT_VERSION = 1
RUN_LOG_MAX_BYTES = 1_000_000
RUN_LOG_KEEP = 1000


@dataclass(frozen=True)
class InvalidEntry:
    index: int
    raw: Any
    error: str


@dataclass(frozen=True)
class JobFile:
    jobs: tuple[Job, ...] = ()
    invalid: tuple[InvalidEntry, ...] = ()

    def get(self, job_id: str) -> Job:
        for job in self.jobs:
            if job.id == job_id:
                return job
        known = ", ".join(j.id for j in self.jobs) or "none"
        raise JobError(f"no job {job_id!r} (jobs: {known})", "list them with `hermit cron list`")


@dataclass(frozen=True)
class RunRecord:
    """One line of a job's run log."""

    run_id: str
    job_id: str
    started_at: str
    ended_at: str
    status: RunStatus
    trigger: Trigger
    error: str | None = None
    delivered: bool = False
    session_key: str | None = None
    session_id: str | None = None
    reply: str | None = None  # the first 500 characters, for `hermit cron runs`
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        extra = data.pop("extra")
        return json.dumps({**data, **extra}, ensure_ascii=False)


class JobStore:
    def __init__(self, home: Path, *, fsync: bool = True) -> None:
        self.dir = home / "cron"
        self.path = self.dir / "jobs.json"
        self.runs_dir = self.dir / "runs"
        self._lock_path = self.dir / ".jobs.lock"
        self._fsync = fsync

    # ---- jobs ------------------------------------------------------------------------------------

    def signature(self) -> tuple[int, int] | None:
        """Changes whenever the file is replaced (a reload is due)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino)

    def load(self) -> JobFile:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return JobFile()
        except (OSError, UnicodeDecodeError) as e:
            raise JobError(f"cannot read {self.path}: {e}", "check the file's permissions and encoding") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise JobError(f"{self.path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}",
                           "fix the syntax there; nothing was changed") from e
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise JobError(f"{self.path}: expected {{\"version\": 1, \"jobs\": [...]}}",
                           "fix the file's top level; nothing was changed")
        version = data.get("version", FORMAT_VERSION)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise JobError(f"{self.path} has format version {version!r}; this Hermit reads {FORMAT_VERSION}",
                           "upgrade Hermit (a newer version wrote this file)")
        jobs: list[Job] = []
        invalid: list[InvalidEntry] = []
        seen: set[str] = set()
        for i, raw in enumerate(data["jobs"]):
            try:
                job = parse_job(raw, f"job #{i + 1} in {self.path}")
                if job.id in seen:
                    raise JobError(f"job id {job.id!r} appears twice in {self.path}", "give each job its own id")
                seen.add(job.id)
                jobs.append(job)
            except JobError as e:
                invalid.append(InvalidEntry(i, raw, e.message))
        return JobFile(tuple(jobs), tuple(invalid))

    def _save(self, file: JobFile) -> None:
        entries: list[Any] = [j.model_dump(mode="json") for j in file.jobs]
        for bad in sorted(file.invalid, key=lambda b: b.index):
            entries.insert(min(bad.index, len(entries)), bad.raw)
        payload = json.dumps({"version": FORMAT_VERSION, "jobs": entries}, ensure_ascii=False, indent=2) + "\n"
        write_atomic(self.path, payload, mode=0o600, fsync=self._fsync, keep_mode=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with locked(self._lock_path):
            yield

    def mutate(self, change: Callable[[JobFile], JobFile]) -> JobFile:
        """Read, change and write the job file under the lock (the CLI and the gateway may both write)."""
        try:
            with self._locked():
                file = change(self.load())
                self._save(file)
                return file
        except OSError as e:  # the job file is untouched (write_atomic removes its temp file on failure)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full(self.path, "the cron job file") from e
            raise JobError(f"cannot write {self.path}: {e.strerror or e}",
                           "check the permissions of the state dir's cron/ folder; nothing was changed") from e

    def update_job(self, job_id: str, change: Callable[[Job], Job | None]) -> Job | None:
        """Replace one job by `change(job)` (None deletes it); a job removed meanwhile is left alone."""
        result: list[Job | None] = [None]

        def apply(file: JobFile) -> JobFile:
            out: list[Job] = []
            for job in file.jobs:
                if job.id == job_id:
                    new = change(job)
                    result[0] = new
                    if new is not None:
                        out.append(new)
                else:
                    out.append(job)
            return JobFile(tuple(out), file.invalid)

        self.mutate(apply)
        return result[0]

    # ---- run logs --------------------------------------------------------------------------------

    def run_log_path(self, job_id: str) -> Path:
        return self.runs_dir / f"{job_id}.jsonl"

    def set_aside_runs(self, job_id: str) -> Path | None:
        """Before a new job takes `job_id` (the caller holds the job file's lock): an earlier job's run log of that
        id moves to `<id>.before-<ns>.jsonl` (no job id has a dot), where `hermit cron runs <that name>` still reads
        it. A run log outlives its job (`hermit cron runs` of a removed one-shot), and its replies are that job's
        agent's text: a new job of the id — another agent's — showed them to its agent's cron tool."""
        path = self.run_log_path(job_id)
        if not path.exists():
            return None
        aside = self.runs_dir / f"{job_id}.before-{time.time_ns()}.jsonl"
        os.rename(path, aside)
        return aside

    def append_run(self, record: RunRecord) -> None:
        self.runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.run_log_path(record.job_id)
        # Under the job file's lock: the gateway's scheduler and `hermit cron run` may log at once, and the
        # trim below rewrites the log (a run appended meanwhile would be dropped).
        with self._locked():
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                # a line torn by a crash must not swallow this record: start it on a line of its own
                lead = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
                append_whole(fd, lead + (record.to_json() + "\n").encode("utf-8"), fsync=self._fsync)
            finally:
                os.close(fd)
            if path.stat().st_size > RUN_LOG_MAX_BYTES:
                lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
                write_atomic(path, "".join(lines[-RUN_LOG_KEEP:]), mode=0o600, fsync=self._fsync)

    def runs(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The last `limit` runs, newest last; a torn last line (a crash mid-write) is skipped and said."""
        path = self.run_log_path(job_id)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out: list[dict[str, Any]] = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"job_id": job_id, "status": "unreadable", "error": f"{path}:{n}: not valid JSON"})
        return out[-limit:] if limit > 0 else out
