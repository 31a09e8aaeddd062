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

And one for what a process makes and removes again (a temp file, a staging folder, a cgroup): `hold_made` locks
it from its making until its removal, and `left_unheld` finds the ones whose maker died by that lock alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
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


def hold_made(fd: int, path: str | os.PathLike[str], *, dir_fd: int | None = None) -> bool:
    """Lock `fd`, the descriptor of the file or folder this process just made at `path` (relative to `dir_fd`
    when given), for as long as it stays open: the proof that its maker lives (`left_unheld`), whatever pid
    namespace either process is in and whichever process has its pid by now. False when a sweep took it for a
    leftover between its making and this lock and removed it: the caller makes another (the lock waits while
    such a sweep holds it)."""
    lock_fd(fd)
    try:
        now = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (own.st_dev, own.st_ino)


def make_held(make: Callable[[], tuple[int, Path]]) -> tuple[int, Path]:
    """`make()` — which creates a new thing under a new name and returns its descriptor and path — until what it
    made is held (hold_made): one a sweep took between its making and the lock is let go, and another made."""
    while True:
        fd, path = make()
        try:
            if hold_made(fd, path):
                return fd, path
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def make_held_dir(parent: Path, prefix: str) -> tuple[Path, int]:
    """A new folder `<prefix><random>` in `parent` (0700, tempfile.mkdtemp) and its descriptor, held (hold_made)
    until the descriptor is closed: remove the folder before closing it."""
    def make() -> tuple[int, Path]:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC), path

    fd, path = make_held(make)
    return path, fd


def left_unheld(directory: Path, prefix: str, match: Callable[[str], bool] | None = None) -> Iterator[str]:
    """The paths in `directory` named `<prefix>…` that no process holds (hold_made): what a process that died
    left behind (a temp file, a staging folder, a cgroup), or what a Hermit that did not hold its own made. Each
    is yielded while this process holds it, so that nobody takes it up meanwhile: remove it in the loop. Liveness
    is the lock alone, never a pid in the name (another pid namespace's pid, or a pid reused since). `match`: a
    further test of the name."""
    try:
        entries = [e.path for e in os.scandir(directory)
                   if e.name.startswith(prefix) and (match is None or match(e.name))]
    except OSError:
        return
    for path in entries:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # gone, a symlink, or not ours to open: not ours to remove either
        try:
            if lock_fd(fd, wait=False):
                yield path
        finally:
            os.close(fd)


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
