"""What Hermit's own writers add to memory files while an owner's unsandboxed command runs.

Why: the owner's shell runs outside a sandbox, and what it writes into memory is marked as the owner's after
each command (tools/exec_marks.py) by comparing every memory file with its text from before the command. A
note another chat added meanwhile — its write tool or its flush, the file its /new saved, the MCP server's
memory_append — was a change like the command's own, so it was wrapped as the owner's: the chat lost its note
and the main session read a contact's words ("the owner decided that Gus gets the door code") as an owner-only
note of its own. That took no timing but the owner's: any command (`ls`) of a few seconds was enough.

So each of those writers says what it added (`added`: the text appended at the file's end, or the whole of a
file it created), and the marking step starts from the text before the command *with those additions*
(`additions` and `rebase`), so that only the command's own change is the owner's. Recorded only while a
command is being watched (`watch` … `unwatch`), at most MAX_ENTRIES at once (past that a note is taken for
the command's, as before: owner-only, never shared). Only text a writer of Hermit's appended, exactly as it was
written, is ever taken out of a command's change.

Across processes (the owner's `hermit chat` while the gateway answers contacts; the MCP server's
memory_append): a watched command leaves a marker in the workspace's `.hermit-watch/` (0700, the user's own), and
a writer of a note in its `memory/` that sees the marker of another live process there also appends what it
added to the journal beside it (`added.jsonl`, 0600), which the command reads from where it stood when the
command started. A marker is alive while its watcher holds a lock on it (locks.hold_made), never by the pid in
its name: the marker a killed watcher left, under a pid the kernel gave another process since, counted as a live
watcher for good — every chat's notes were copied into a journal nobody removed, until at its cap notes went
unrecorded again. The folder is at the workspace's top, never under memory/: another chat's `read` of a path
under memory/ reads the workspace's file, and the journal holds other chats' notes; a path outside memory/ is
the chat's own room. Every note is
written under the memory lock, so the times they carry (the system's monotonic clock) order them as they were
written. The last command to end removes the journal; one a watcher killed mid-command left (no marker held)
is removed by the next command, or sooner by the next start of an agent on the workspace (`clear_dead`, from
workspace.ensure_workspace: the gateway, `hermit chat`), so other chats' words — a deleted message's copy
among them — do not wait on disk for the owner's next command. `hermit backup` leaves the folder out and a
restore never brings one back (cli/backup_walk.py). A folder, marker or journal that is not the user's
own or not what it should be is left alone: the note is then the command's, as before (owner-only). The
journal is the owner's like the rest of memory/: a command of the owner's shell could write to it, as it can to
any of the owner's files.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from hermit.locks import LockBusy, hold_made, lock_fd, locked_dir

_log = logging.getLogger("hermit.memory")

MAX_ENTRIES = 4096
MAX_JOURNAL_BYTES = 8_000_000
WATCH_DIR = ".hermit-watch"  # at the workspace's top (never under memory/, which other chats read)
JOURNAL = "added.jsonl"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MARKER = re.compile(r"\d+\.\d+(\.[0-9a-f]+)?")  # <pid>.<window>.<random>: the pid only says who made it

_lock = threading.Lock()
_watching: set[int] = set()
_entries: list[tuple[int, str, str, int]] = []  # (sequence number, real path, the text added, monotonic ns)
_numbers = itertools.count(1)
_starts: dict[int, tuple[str, int, int]] = {}  # window -> (its watch folder, the journal's inode, its size then)
_markers: dict[int, tuple[str, int]] = {}  # window -> (its marker's name, the descriptor holding its lock)
_process: list[tuple[int, str]] = []  # (pid, a random name of this process): a fork's child gets its own


def _me() -> str:
    """This process's name in the journal: its pid and a random part (another pid namespace may have its pid)."""
    if not _process or _process[0][0] != os.getpid():
        _process[:] = [(os.getpid(), f"{os.getpid()}.{secrets.token_hex(8)}")]
    return _process[0][1]


def watch(workspace: Path | None = None) -> int:
    """Start recording additions (before the command's files are looked at); the window's number. With
    `workspace`, other processes' writers of notes in its memory/ are asked to record theirs too."""
    with _lock:
        window = next(_numbers)
        _watching.add(window)
    if workspace is not None:
        start = _announce(workspace, window)
        if start is not None:
            with _lock:
                _starts[window] = start
    return window


def unwatch(window: int) -> None:
    """Stop recording for `window`; what no open window needs is forgotten."""
    with _lock:
        _watching.discard(window)
        first = min(_watching, default=None)
        _entries[:] = [] if first is None else [e for e in _entries if e[0] > first]
        start = _starts.pop(window, None)
    if start is not None:
        _retire(start[0], window)


def added(path: Path | str, text: str) -> None:
    """A writer of Hermit's appended `text` to `path` (or created it holding `text`), under the memory lock."""
    if not text:
        return
    real = os.path.realpath(path)
    at = time.monotonic_ns()
    if _watching:
        with _lock:
            if _watching and len(_entries) < MAX_ENTRIES:
                _entries.append((next(_numbers), real, text, at))
    _journal(real, text, at)


def additions(window: int, path: Path | str) -> list[str]:
    """What Hermit's writers (of this process, and of others while `window` was announced) added to `path`
    since `window` opened, in the order they were written."""
    real = os.path.realpath(path)
    with _lock:
        mine = [(at, text) for n, p, text, at in _entries if n > window and p == real]
        start = _starts.get(window)
    theirs = _read_journal(start, real) if start is not None else []
    return [text for _, text in sorted(mine + theirs, key=lambda e: e[0])]


def rebase(previous: str | None, texts: Sequence[str]) -> str | None:
    """`previous` (a file's text before the command; None: there was no file) with `texts` appended as their
    writers appended them, each starting a line — unless it is already there (the file was read after it)."""
    text = previous
    for addition in texts:
        base = text or ""
        if base.endswith(addition):
            continue
        lead = "" if not base or base.endswith("\n") or addition.startswith("\n") else "\n"
        text = base + lead + addition
    return text


# ---- across processes -----------------------------------------------------------------------------------


def _own_dir(fd: int) -> bool:
    st = os.fstat(fd)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _mine() -> set[str]:
    with _lock:
        return {name for name, _ in _markers.values()}


def _live_others(dfd: int, *, sweep: bool = False) -> list[str]:
    """The markers other processes hold (alive: their lock is held); with `sweep`, the ones nobody holds (a
    watcher killed mid-command left them) are removed."""
    out = []
    mine = _mine()
    for name in os.listdir(dfd):
        if name in mine or not _MARKER.fullmatch(name):
            continue
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            continue  # gone meanwhile, or not a file of ours
        try:
            if not lock_fd(fd, wait=False):
                out.append(name)
            elif sweep:  # removed while held, so a maker that has not locked it yet makes another (hold_made)
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
        finally:
            os.close(fd)
    return out


def _announce(workspace: Path, window: int) -> tuple[str, int, int] | None:
    watch_dir = os.path.join(os.path.realpath(workspace), WATCH_DIR)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(watch_dir, 0o700)
        dfd = os.open(watch_dir, _DIR_FLAGS)
    except OSError:
        return None
    try:
        if not _own_dir(dfd):
            return None
        _live_others(dfd, sweep=True)  # markers of processes that died while they watched
        while True:  # held from its making (hold_made): a sweep that took it first makes us make another
            name = f"{os.getpid()}.{window}.{secrets.token_hex(4)}"
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dfd)
            try:
                if hold_made(fd, name, dir_fd=dfd):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            st = os.stat(JOURNAL, dir_fd=dfd, follow_symlinks=False)
            start = watch_dir, st.st_ino, st.st_size
        except FileNotFoundError:
            start = watch_dir, 0, 0
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)
            os.close(fd)
            return None
        with _lock:
            _markers[window] = (name, fd)
        return start
    except OSError:
        return None
    finally:
        os.close(dfd)


def _retire(watch_dir: str, window: int) -> None:
    """Take this window's marker away; the last watcher removes the journal and the folder."""
    with _lock:
        marker = _markers.pop(window, None)
    try:
        dfd = os.open(watch_dir, _DIR_FLAGS)
    except OSError:
        dfd = -1
    try:
        if marker is not None and dfd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(marker[0], dir_fd=dfd)
    finally:
        if marker is not None:
            os.close(marker[1])  # its lock goes with it
    if dfd < 0:
        return
    try:
        if _own_dir(dfd) and not _live_others(dfd, sweep=True) and not [n for n in os.listdir(dfd) if n != JOURNAL]:
            with contextlib.suppress(OSError):
                os.unlink(JOURNAL, dir_fd=dfd)
            with contextlib.suppress(OSError):
                os.rmdir(watch_dir)  # fails when a new marker came meanwhile: it stays
    except OSError:
        pass
    finally:
        os.close(dfd)


def clear_dead(workspace: Path) -> bool:
    """Remove the journal of `workspace` when no watcher lives (a killed one left it with its marker, which is
    swept too); True when one was removed. Call it holding the workspace's memory-write lock (daily_log
    .memory_writes_locked): every note reaches the journal under it, so a watcher that announced itself meanwhile
    and noted the journal's place has nothing written there that this removes — it reads a journal made anew
    whole. The empty folder stays (a watcher may be announcing itself in it)."""
    try:
        dfd = os.open(os.path.join(os.path.realpath(workspace), WATCH_DIR), _DIR_FLAGS)
    except OSError:
        return False  # the common case: nobody watched since the last command ended
    try:
        if not _own_dir(dfd) or _live_others(dfd, sweep=True) or _mine() & set(os.listdir(dfd)):
            return False
        st = os.stat(JOURNAL, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False  # not what Hermit makes: left alone, as the writers leave it
        os.unlink(JOURNAL, dir_fd=dfd)
        return True
    except OSError:
        return False
    finally:
        os.close(dfd)


def clear_dead_now(workspace: Path) -> bool:
    """clear_dead under the workspace's memory-write lock, taken without waiting: what an agent's start
    (workspace.ensure_workspace) and every memory sync (memory/index/sync.py) do about a journal a killed
    watcher left, so it never waits for the owner's next command. A writer holding the lock now (a long flush)
    leaves the journal to the next time. True when one was removed."""
    if not os.path.lexists(Path(workspace) / WATCH_DIR / JOURNAL):
        return False  # the common case: no lock taken
    try:
        with locked_dir(Path(os.path.realpath(workspace)), 0.0, "removing a dead watch journal"):
            removed = clear_dead(workspace)
    except (LockBusy, OSError):
        return False
    if removed:
        _log.info("removed %s/%s/%s, left by a command's watcher that was killed", workspace, WATCH_DIR, JOURNAL)
    return removed


def _journal(real: str, text: str, at: int) -> None:
    """Also tell a command another process watches (its marker is in the watch folder of the workspace whose
    memory/ holds `real`: two levels up; a note deeper down is not a chat's, and finds no folder)."""
    folder = os.path.dirname(real)
    if os.path.basename(folder) != "memory":
        return
    try:
        dfd = os.open(os.path.join(os.path.dirname(folder), WATCH_DIR), _DIR_FLAGS)
    except OSError:
        return  # nobody watches (the common case: no such folder)
    try:
        if not _own_dir(dfd) or not _live_others(dfd):
            return
        fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_JOURNAL_BYTES:
                return
            line = json.dumps({"pid": _me(), "at": at, "path": real, "text": text}, ensure_ascii=False)
            os.write(fd, (line + "\n").encode("utf-8", "surrogatepass"))
        finally:
            os.close(fd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _read_journal(start: tuple[str, int, int], real: str) -> list[tuple[int, str]]:
    """(time, text) of other processes' additions to `real` in the journal since `start`."""
    watch_dir, inode, offset = start
    try:
        dfd = os.open(watch_dir, _DIR_FLAGS)
    except OSError:
        return []
    try:
        fd = os.open(JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return []
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > 2 * MAX_JOURNAL_BYTES:
            return []
        skip = offset if st.st_ino == inode else 0  # a journal made anew since: all of it is newer
        data = os.pread(fd, max(st.st_size - skip, 0), skip)
    finally:
        os.close(fd)
    out = []
    for raw in data.decode("utf-8", "replace").split("\n"):
        with contextlib.suppress(ValueError, TypeError, KeyError):
            entry = json.loads(raw)
            if entry["pid"] != _me() and entry["path"] == real and isinstance(entry["text"], str):
                out.append((int(entry["at"]), entry["text"]))
    return out
