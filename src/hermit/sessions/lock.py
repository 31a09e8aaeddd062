"""One turn at a time per session across processes: an flock on a lock file next to the transcripts.

Two `hermit agent` processes (or the gateway and a CLI chat) answering in the same session at once
interleave their messages (user, user, assistant, assistant) and each sends the model a history
without the other's turn. The in-process threading lock of AgentRuntime cannot see other processes;
this lock can. The second process waits a little (a turn that is just ending) and then gets a clear
SessionBusy instead of waiting for a whole turn it cannot see. The kernel drops the lock when its
holder dies, so a killed process never leaves a session locked.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hermit.errors import SessionBusy
from hermit.locks import LockFile
from hermit.sessions.transcript import ensure_private_dir

DEFAULT_WAIT_SECONDS = 10.0


def lock_path(sessions_dir: Path, session_key: str) -> Path:
    """`<sessions>/<readable key>-<hash>.lock`: readable in a listing, distinct for every key."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", session_key)[:80]
    digest = hashlib.sha256(session_key.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return sessions_dir / f"{readable}-{digest}.lock"


@contextmanager
def session_lock(
    sessions_dir: Path,
    session_key: str,
    *,
    wait_seconds: float = DEFAULT_WAIT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold the session's lock for the block; SessionBusy when another process holds it past the wait."""
    ensure_private_dir(sessions_dir)
    lock = LockFile.acquire_within(lock_path(sessions_dir, session_key), wait_seconds, clock=clock, sleep=sleep)
    if lock is None:
        raise SessionBusy(
            f"session busy: another hermit process is answering in session {session_key}",
            "wait for that reply to finish and send your message again (or use another session with --session)",
        )
    with lock:
        yield
