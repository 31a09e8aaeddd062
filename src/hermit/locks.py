"""Advisory file locks between processes (flock): the one way Hermit's processes take turns on a file.

flock locks belong to an open file description, so the kernel drops a lock when its holder closes the
descriptor or dies, however it dies: a killed CLI or gateway never leaves a file locked. They are not
re-entrant across descriptors: a process that opens the same lock file twice waits on itself, so each
owner takes a lock once and calls helpers that assume it is held.

Three shapes cover every use:
- `locked(path)`: hold a lock file for a block (read-modify-write of a JSON store, a room, a job file);
- `lock_fd(fd)`: lock a descriptor the caller opened for its own I/O (an append to a transcript or a
  daily log); closing it releases the lock;
- `LockFile`: a lock held for a component's lifetime, taken without waiting or within a bounded wait
  (one gateway per state dir, one Telegram poller per token, one memory indexer per index, one turn at
  a time per session).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from hermit.config.paths import not_own_opened
from hermit.errors import HermitError

_POLL_SECONDS = 0.05


def lock_fd(fd: int, *, shared: bool = False, wait: bool = True) -> bool:
    """Lock an open descriptor; False when `wait` is off and another process holds it."""
    op = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, op)
    except BlockingIOError:
        return False
    return True


def unlock_fd(fd: int) -> None:
    """Release the lock early, keeping the descriptor open (closing it releases the lock too)."""
    fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def held(fd: int) -> Iterator[None]:
    """An exclusive lock on an open descriptor for the block; the descriptor stays open afterwards."""
    lock_fd(fd)
    try:
        yield
    finally:
        unlock_fd(fd)


class LockBusy(HermitError):
    """A lock another process kept past the time a caller waits for it."""


@contextlib.contextmanager
def locked_dir(path: Path, seconds: float, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the directory `path` itself for the block (flock on its descriptor: no lock
    file to leave behind, and a sandboxed command, which never sees the host directory, cannot hold it).
    Waits at most `seconds`, then raises LockBusy naming `what` (a stray process holding it must not
    stall every writer without a word)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        ends = time.monotonic() + seconds
        while not lock_fd(fd, wait=False):
            if time.monotonic() >= ends:
                raise LockBusy(f"{what} waited {seconds:g} s for another writer of {path} and gave up",
                               f"try again; if it keeps happening, find the process holding {path} "
                               f"(`fuser -v {path}` or `lsof {path}`) and stop it")
            time.sleep(_POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # releases the lock


class ForeignLockFile(HermitError):
    """A lock file that is a symlink, not a file, or another user's (planted in a folder they could write)."""


def open_lock_file(path: Path, mode: int = 0o600) -> int:
    """The lock file's descriptor, created owner-only when missing (not inherited by child processes). A link
    there is never followed (its target would be created or written: the holder's pid, say), nor a file with a
    second name (a hard link to a file elsewhere), and a file another user made first is refused (they would
    hold our lock, and read what is published in it): ForeignLockFile."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise ForeignLockFile(f"the lock file {path} is a symlink: Hermit will not follow it",
                              f"remove it (rm {path}; Hermit makes its own), and check who can write {path.parent}") from e
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    why = not_own_opened(st)
    if why is None and st.st_nlink != 1:  # a second name of a file elsewhere: publish() would overwrite it
        why = f"has {st.st_nlink} names (hard links)"
    if why is not None:
        os.close(fd)
        raise ForeignLockFile(f"the lock file {path} {why}: Hermit will not use it",
                              f"remove it (rm {path}; Hermit makes its own), and check who can write {path.parent}")
    return fd


@contextlib.contextmanager
def locked(path: Path) -> Iterator[int]:
    """Hold an exclusive lock on the lock file `path` for the block, waiting for it; yields its descriptor."""
    fd = open_lock_file(path)
    try:
        lock_fd(fd)
        yield fd
    finally:
        os.close(fd)  # releases the lock


class LockFile:
    """An exclusive lock on a lock file, held until `release()` (or the process ends)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def try_acquire(cls, path: Path) -> LockFile | None:
        """The lock if nobody holds it, else None at once."""
        fd = open_lock_file(path)
        if not lock_fd(fd, wait=False):
            os.close(fd)
            return None
        return cls(path, fd)

    @classmethod
    def acquire(cls, path: Path) -> LockFile:
        """The lock, waiting as long as another process holds it."""
        fd = open_lock_file(path)
        try:
            lock_fd(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    @classmethod
    def acquire_within(cls, path: Path, seconds: float, *, clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> LockFile | None:
        """The lock, waiting at most `seconds` for it (then None). flock has no timeout, so this polls; the
        clock and the sleep are injectable for tests."""
        fd = open_lock_file(path)
        ends = clock() + max(seconds, 0.0)
        try:
            while not lock_fd(fd, wait=False):
                if clock() >= ends:
                    os.close(fd)
                    return None
                sleep(_POLL_SECONDS)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def publish(self, data: bytes) -> None:
        """Replace the file's content (e.g. the holder's pid) so that others can say who holds it."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        if self.fd < 0:
            return
        os.close(self.fd)  # closing drops the lock
        self.fd = -1

    def __enter__(self) -> LockFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def left_by_dead_processes(directory: Path, prefix: str) -> list[str]:
    """The paths in `directory` named `<prefix><pid>-…` whose process is gone (never this one's): what a
    killed process left behind (a temp file, a cgroup)."""
    out: list[str] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.name.startswith(prefix):
                pid = entry.name[len(prefix):].split("-", 1)[0]
                if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                    out.append(entry.path)
    return out


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (another uid's counts: it exists, we may not signal it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
