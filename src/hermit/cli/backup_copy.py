"""How `hermit backup` stores a file that Hermit, or the owner's editor, may be writing while the backup runs,
and the read-back of the finished archive before it gets its name.

A tar member's header holds its size and is written before its data: a file that shrank during the copy (an
editor saving in place: truncate, then write) left a header and part of its data in the gzip stream, and
every later member unreadable. So a file is read whole first — into memory, or into an unnamed owner-only
temporary file next to the archive once it is large — and its header is written with the size actually
read. A read counts when the file's size, modification and change times were the same before and after it
and it gave as many bytes as that size: otherwise the file is read again, a few times, pausing in between.

A file rewritten by rename since it was listed (Hermit does this to sessions.json after every turn, to
MEMORY.md, notes and cron jobs) is the new file at the same path: it is opened again and its current version
stored — when it is a regular file, opened without following a link and reached through none, owned by the
user or by the owner of the file it replaced, and with no second name (hard link; backup_walk.py decides
about those from the files it listed). A file deleted since it was listed is not stored (said so); one that
cannot be stored as one version, or whose replacement is refused, is named and `hermit backup` exits 1.

A read that was stable can still be of a version nobody meant to keep: an editor saving in place truncates,
then writes, and a read and its re-check that both fall between the two see a stable empty file. So once
every member is written, each stored file is looked at again (`settle`): one whose size, times or identity
(device, inode) are no longer those of the version stored is stored again, as a later member of the same
name — tar's rule, which `hermit restore` and `tar -x` follow, is that the last member of a name wins.
Before that look, the backup waits until the newest stored version is SETTLE seconds old (SETTLE_SHRUNK when
it is the listed file, shrunk: a save in place looks so between its truncate and its write), so a writer held
up between the two (a loaded machine) has had that long to finish. This repeats up to ROUNDS
times; a file still changing in place after that is named and `hermit backup` exits 1 (the archive holds a
version read whole, which may be one saved halfway) — unless it only grew from a version no smaller than the
one listed (a transcript or log being appended to: the stored version is a whole earlier one). One replaced by rename, or deleted, since it was stored
is fine as it is: a rename shows a finished file, and the stored version was one.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import gzip
import os
import pwd
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO

from hermit.cli.backup_walk import Entry

CHUNK = 1 << 20
IN_MEMORY = 8 << 20  # a file larger than this is spooled to a temporary file
ATTEMPTS = 5
PAUSE = 0.05  # seconds before the second read of a file that changed; doubled each time
SETTLE = 1.0  # seconds a stored version must have been left alone before it is trusted
SETTLE_SHRUNK = 5.0  # the same for a version smaller than the file listed, of the same file: a save in place
ROUNDS = 3  # looks at the stored files after the members are written (see the module's docstring)
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
DAMAGED = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)  # what reading a broken archive raises


class NotStored(Exception):
    """A listed file that is not in the archive; `why` is said to the user."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _names(st: os.stat_result) -> tuple[str, str]:
    user = group = ""
    with contextlib.suppress(KeyError):
        user = pwd.getpwuid(st.st_uid).pw_name
    with contextlib.suppress(KeyError):
        group = grp.getgrgid(st.st_gid).gr_name
    return user, group


def _info(arc: str, st: os.stat_result, kind: bytes, size: int) -> tarfile.TarInfo:
    """A plain member (never a hard-link one: restore refuses links; the names of a file that must stay one
    file are in the manifest)."""
    info = tarfile.TarInfo(arc)
    info.type, info.size, info.mode, info.mtime = kind, size, stat.S_IMODE(st.st_mode), st.st_mtime
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname, info.gname = _names(st)
    return info


def add_dir(tar: tarfile.TarFile, entry: Entry) -> int | None:
    """A folder as a folder member (0 bytes); None when it is no longer a folder there (deleted, moved away)."""
    try:
        st = os.lstat(entry.path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    tar.addfile(_info(entry.arc, st, tarfile.DIRTYPE, 0))
    return 0


def _reached_directly(fd: int, path: Path) -> bool:
    """The file open as `fd` is at `path` itself, not through a folder swapped for a link (Linux's /proc; else
    the folder's real path)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(path)
    except OSError:
        return os.path.realpath(path.parent) == str(path.parent)


def _refused(fd: int, st: os.stat_result, entry: Entry) -> str | None:
    """Why the file open as `fd` is not to be stored under `entry`'s name; None when it is the listed file, or
    an acceptable new version of it (see the module's docstring)."""
    if not stat.S_ISREG(st.st_mode):
        return "replaced by something that is not a file while the backup was written"
    if (st.st_dev, st.st_ino) == (entry.st.st_dev, entry.st.st_ino):
        return None
    if st.st_uid not in (os.geteuid(), entry.st.st_uid):
        return f"replaced by a file of another user (uid {st.st_uid}) while the backup was written"
    if st.st_nlink > 1:
        return "replaced by a file with a second name (hard link) while the backup was written"
    if not _reached_directly(fd, entry.path):
        return "its folder was replaced or moved while the backup was written"
    return None


def _read(f: IO[bytes], into: IO[bytes], expected: int) -> int:
    """Copy `f` to its end, or to past the `expected` size (it grew: it is read again; a file written faster
    than it is read is never followed forever). An error reading it is the file's (NotStored); one writing
    `into` ends the backup."""
    size = 0
    while size <= expected:
        try:
            chunk = f.read(CHUNK)
        except OSError as e:
            raise NotStored(e.strerror or str(e)) from None
        if not chunk:
            break
        into.write(chunk)
        size += len(chunk)
    return size


def _unchanged(before: os.stat_result, after: os.stat_result, size: int) -> bool:
    return (size == before.st_size == after.st_size and before.st_mtime_ns == after.st_mtime_ns
            and before.st_ctime_ns == after.st_ctime_ns)


def add_file(tar: tarfile.TarFile, entry: Entry, spool_dir: Path) -> os.stat_result | None:
    """Store the file listed as `entry`, or its current version (see the module's docstring). Returns the stat
    of the version stored (its st_size: the bytes stored), None when it was deleted since it was listed; raises
    NotStored when it cannot be stored."""
    why = ""
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(PAUSE * 2 ** (attempt - 1))
        try:
            fd = os.open(entry.path, OPEN_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as e:
            why = ("replaced by a symlink while the backup was written" if e.errno == errno.ELOOP
                   else e.strerror or str(e))
            continue
        with os.fdopen(fd, "rb") as f, tempfile.SpooledTemporaryFile(IN_MEMORY, dir=str(spool_dir)) as spool:
            before = os.fstat(fd)
            refused = _refused(fd, before, entry)
            if refused:
                why = refused
                continue
            try:
                size = _read(f, spool, before.st_size)
            except NotStored as e:
                why = e.why
                continue
            after = os.fstat(fd)
            if not _unchanged(before, after, size):
                why = f"it changed while it was read, {ATTEMPTS} times"
                continue
            spool.seek(0)
            tar.addfile(_info(entry.arc, after, tarfile.REGTYPE, size), spool)
            return after
    raise NotStored(why)


Stored = dict[str, tuple[Entry, os.stat_result]]  # archive name -> (its entry, the stat of the version stored)


def _key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _grew(entry: Entry, st: os.stat_result, now: os.stat_result) -> bool:
    """Only appended to since the version stored, which was no smaller than the file listed: a transcript or a
    daily log a running Hermit keeps appending to. The version stored is a whole earlier one (an append never
    rewrites what was there), so a file still growing at the last look is not named."""
    return _same_file(now, st) and now.st_size > st.st_size >= entry.st.st_size


def _trusted_at(entry: Entry, st: os.stat_result) -> float:
    """When the version stored (`st`) has been left alone long enough to be taken as finished: SETTLE after its
    last change, SETTLE_SHRUNK when it is the listed file grown smaller — what a save in place is between its
    truncate and its write, the very case a look must not miss."""
    shrunk = _same_file(st, entry.st) and st.st_size < entry.st.st_size
    return st.st_ctime_ns / 1e9 + (SETTLE_SHRUNK if shrunk else SETTLE)


def settle(tar: tarfile.TarFile, stored: Stored, spool_dir: Path, *, clock: Callable[[], float] = time.time,
           sleep: Callable[[float], None] = time.sleep) -> tuple[list[tuple[str, int]], list[str]]:
    """Store again, as later members of the same names, the files changed since their version was stored (see
    the module's docstring); `stored` is updated with what is stored again. Returns (the members added, in
    order, as (name, size) — one name may come more than once; what still changed in place after ROUNDS, said
    as "shown (why)")."""
    again: list[tuple[str, int]] = []
    unsettled: dict[str, str] = {}
    for look in range(ROUNDS + 1):
        trusted = max((_trusted_at(entry, st) for entry, st in stored.values()), default=0.0)
        wait = min(SETTLE_SHRUNK, trusted - clock())
        if wait > 0:
            sleep(wait)
        changed = []
        for arc, (entry, st) in stored.items():
            try:
                now = os.lstat(entry.path)
            except OSError:  # deleted, or its folder moved, since it was stored: the stored version stands
                continue
            if stat.S_ISREG(now.st_mode) and _key(now) != _key(st):
                changed.append((arc, now))
        if look == ROUNDS:
            unsettled.update({arc: f"{stored[arc][0].shown} (it kept changing in place while the backup was written, "
                              f"{ROUNDS + 1} times; the archive holds a version read whole, which may be one saved "
                              "halfway)" for arc, now in changed
                              if _same_file(now, stored[arc][1]) and not _grew(stored[arc][0], stored[arc][1], now)})
            break
        if not changed:
            break
        for arc, now in changed:
            entry, st = stored[arc]
            try:
                new = add_file(tar, entry, spool_dir)
            except NotStored as e:
                del stored[arc]
                # replaced (by rename) with a file that is refused (a link, another user's): the version stored
                # stands; changed in place and not read whole again: named
                if _same_file(now, st):
                    unsettled[arc] = f"{entry.shown} ({e.why}, after it was stored; the archive holds an earlier " \
                                     "version, which may be one saved halfway)"
                continue
            if new is None:  # deleted meanwhile
                del stored[arc]
                continue
            stored[arc] = (entry, new)
            again.append((arc, new.st_size))
    return again, list(unsettled.values())


def verify(raw: BinaryIO, expected: list[tuple[str, int]]) -> str | None:
    """Read a gzip'd tar archive back whole — every member, its data, and the gzip checksum — and compare it
    with the members written (name, size). Returns what is wrong, None when nothing is."""
    got: list[tuple[str, int]] = []
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            with tarfile.open(fileobj=gz, mode="r|") as tar:
                for m in tar:
                    data = tar.extractfile(m) if m.isfile() else None
                    size = 0
                    while data is not None and (chunk := data.read(CHUNK)):
                        size += len(chunk)
                    if size != m.size:
                        return f"{m.name} holds {size} of its {m.size} bytes"
                    got.append((m.name, m.size))
            while gz.read(CHUNK):
                pass
    except DAMAGED as e:
        return f"it does not read back ({e or type(e).__name__})"
    if got != expected:
        missing = sorted(set(expected) - set(got))[:3] or sorted(set(got) - set(expected))[:3]
        return f"it holds {len(got)} members, not the {len(expected)} written (e.g. {missing})"
    return None
