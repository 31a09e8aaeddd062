"""What a sandboxed command hands back, unpacked trusting none of it (room_sandbox.py runs the command).

The room's copy comes back as a tar on a socket. `unpack` keeps only folders, plain regular files and symlinks that
stay inside, within an entry limit, a byte budget (`OverBudget`) and a depth and path length (MAX_DEPTH,
MAX_PATH_BYTES), and never a name at the room's top that is an instruction file or the memory (RESERVED_TOP). It
unpacks into a staging folder (`new_staging`: `.incoming-<pid>-…` in the rooms folder) held locked from its making
to its removal, so that the next run removes one a killed Hermit left (`sweep_staging`), and never one a live Hermit
uses; rooms.apply_incoming then merges it into the room.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import shutil
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from hermit.durable import write_all
from hermit.errors import HermitError
from hermit.locks import left_unheld, make_held_dir
from hermit.tools import safe_fs
from hermit.tools.room_journal import tell_not_kept
from hermit.tools.rooms import SeedEntry, Signature
from hermit.tools.views import MEMORY_DIR
from hermit.workspace import BOOTSTRAP_ORDER, MEMORY_FILE

RESERVED_TOP = frozenset({MEMORY_DIR, MEMORY_FILE, *BOOTSTRAP_ORDER})
STAGING_PREFIX = ".incoming-"  # + "<pid>-…" (for people; liveness is its lock): where a merge unpacks what came back
COPY_CHUNK = 1 << 20
# What comes back is kept only this deep and this long (the room's own entries excepted): the room's host
# path plus this stays below PATH_MAX, so the owner's own tools can reach every entry, and walking the room
# (its quota, the merge) needs few descriptors.
MAX_DEPTH = 100
MAX_PATH_BYTES = 3000


CHECK_EVERY = 256  # members between two looks at the merge's deadline


class OverBudget(ValueError):
    """What came back holds more bytes than the room could (`unpack`'s budget): none of it is kept."""


class OverTime(Exception):
    """Reading what came back, or planning its merge, passed the merge's deadline: nothing of it is kept, and the
    room has not been touched (room_merge.py)."""


EMPTY: Signature = ("f", hashlib.sha256(b"").hexdigest())  # an empty file's signature


@dataclass(frozen=True)
class Seen:
    """One entry of what came back (`unpack` with `seen`): its signature, its permission bits, and where its content
    was written in the staging folder (only a regular file that is new or differs from the seed's, and not empty)."""

    sig: Signature
    mode: int
    staged: str | None = None


def new_staging(rooms: Path) -> tuple[Path, int]:
    """A new staging folder in the rooms folder and its descriptor, held until the descriptor is closed (remove
    the folder first)."""
    return make_held_dir(rooms, f"{STAGING_PREFIX}{os.getpid()}-")


def sweep_staging(rooms: Path) -> None:
    """Remove the staging folders (`.incoming-…`) that no process holds: those of Hermit processes killed before
    their merge began (the room untouched; its chat is told, room_journal.tell_not_kept)."""
    for path in left_unheld(rooms, STAGING_PREFIX):
        with contextlib.suppress(OSError):
            tell_not_kept(rooms, Path(path))
        shutil.rmtree(path, ignore_errors=True)


def unpack(tar: tarfile.TarFile, dir_fd: int, max_entries: int | None = None,
           keep: Mapping[str, object] | None = None, max_bytes: int | None = None,
           too_deep: list[str] | None = None, seen: dict[str, Seen] | None = None,
           deadline: float | None = None) -> list[str]:
    """Unpack what a sandboxed command handed back below `dir_fd`, trusting none of it: only folders,
    plain regular files and symlinks that stay inside (by their text) — no sparse member (a few bytes of
    tar declaring gigabytes), hard link, device, FIFO or contiguous file; no path with `..` or a leading
    `/`; nothing written through a symlink (safe_fs); permissions without set-id bits or group/other write;
    at most `max_entries` entries besides those named in `keep` (the room's own: one left out would look
    deleted). Files are copied in chunks against `max_bytes` for all of them together: past it, the member
    being copied is removed and OverBudget raised (the caller keeps none of it); no path deeper than
    MAX_DEPTH parts or longer than MAX_PATH_BYTES besides those in `keep` (added to `too_deep`). Returns the
    names left out because of the entry limit.

    With `seen`, every entry kept is recorded there instead (room_merge.py merges from it), and only the content
    of a regular file that is new, or differs from the seed's (`keep` holds room_sandbox's SeedEntry), is written:
    a folder, a link, or a file whose bytes hash as the seed's costs reading it, nothing on disk. A name taken
    twice keeps its first entry. Past `deadline` (time.monotonic) OverTime is raised."""
    # (Python's own tarfile filters need 3.11.4; Hermit supports any 3.11.)
    count = 0
    budget = [max_bytes if max_bytes is not None else -1]
    over: list[str] = []
    for index, m in enumerate(tar):
        if deadline is not None and index % CHECK_EVERY == 0 and time.monotonic() > deadline:
            raise OverTime("what came back could not be read within the merge's time")
        if not _plain(m):
            continue
        name = _name_of(m, keep, too_deep)
        if not name:
            continue
        if keep is None or name not in keep:
            count += 1
        if max_entries is not None and count > max_entries and (keep is None or name not in keep):
            over.append(name)
            continue
        if seen is not None:
            if name not in seen:  # an error here is the host's (its disk full): it keeps nothing, never drops the
                # entry (an entry missing from what came back reads as deleted: the room lost the file)
                _record(tar, m, dir_fd, name, keep.get(name) if keep is not None else None, budget, seen)
            continue
        try:
            if m.isdir():
                os.close(safe_fs.open_dir(dir_fd, name, create=True))
            elif m.isfile():
                src = tar.extractfile(m)
                if src is not None:
                    _copy_member(src, dir_fd, name, (m.mode & 0o755) | 0o600, budget)
            elif m.issym() and _link_stays_inside(name, m.linkname):
                parts = safe_fs.parts_of(name)
                parent = safe_fs.open_dir(dir_fd, "/".join(parts[:-1]), create=True)
                try:
                    os.symlink(m.linkname, parts[-1], dir_fd=parent)
                finally:
                    os.close(parent)
        except (OSError, HermitError):
            continue  # a path through a symlink, a name taken twice …: that entry is not kept
    return over


def add_unchanged(names: bytes, keep: Mapping[str, SeedEntry], seen: dict[str, Seen],
                  deadline: float | None = None) -> None:
    """Record in `seen` the entries the pack names as unchanged (room_sandbox.WRAPPER: NUL-separated `./path`s after
    its tar): only an entry of the room's own (`keep`) not already in the tar is taken, as it went in. Any other name
    means nothing: it was not handed in, so there is nothing of it to keep."""
    for index, raw in enumerate(names.split(b"\0")):
        if deadline is not None and index % (CHECK_EVERY * 16) == 0 and time.monotonic() > deadline:
            raise OverTime("what came back could not be read within the merge's time")
        name = posixpath.normpath(os.fsdecode(raw)) if raw else ""
        before = keep.get(name)
        if before is not None and name not in seen:
            seen[name] = Seen(before.sig, 0)


def _name_of(m: tarfile.TarInfo, keep: Mapping[str, object] | None, too_deep: list[str] | None) -> str:
    """The member's name in the room, or "" when it is not kept (see `unpack`)."""
    # normpath drops a leading "./" (and only that: `.lstrip("./")` made `.hidden` `hidden`, and lost `.hidden`);
    # a `..` left after it climbs out. A name that only starts with dots (`..notes`, `...`) is the room's own: left
    # out, it would read as deleted.
    name = "" if m.name.startswith("/") else posixpath.normpath(m.name)
    name = "" if name == "." else name
    # A NUL (a PAX path may hold one; GNU tar never writes it) names nothing on disk: os calls refuse it with
    # ValueError, which the merge would meet half-way through carrying out its plan.
    if not name or "\x00" in name or ".." in name.split("/") or name.split("/", 1)[0] in RESERVED_TOP:
        return ""
    if (keep is None or name not in keep) and (
            name.count("/") >= MAX_DEPTH or len(name.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES):
        if too_deep is not None and len(too_deep) < 100:
            too_deep.append(name)
        return ""
    return name


def _record(tar: tarfile.TarFile, m: tarfile.TarInfo, dir_fd: int, name: str, before: object,
            budget: list[int], seen: dict[str, Seen]) -> None:
    """`unpack` with `seen`: record one entry, writing only what the merge needs: a file's content that is new or
    changed, under a name of its own at the staging folder's top (`staged`; an empty file needs none)."""
    mode = (m.mode & 0o755) | 0o600
    if m.isdir():
        seen[name] = Seen(("d", ""), mode)
    elif m.issym():
        if _link_stays_inside(name, m.linkname):
            seen[name] = Seen(("l", m.linkname), mode)
    elif m.isfile():
        src = tar.extractfile(m)
        if src is None:
            return
        if m.size == 0:
            seen[name] = Seen(EMPTY, mode)
            return
        if isinstance(before, SeedEntry) and before.sig[0] == "f" and before.stamp[1] == m.size:
            if _hash(src) == before.sig[1]:  # as large as the seed's: hashed first, written only if it differs
                seen[name] = Seen(before.sig, mode)
                return
            src = tar.extractfile(m)
            if src is None:
                return
        staged = f"{len(seen)}.{os.getpid()}"
        seen[name] = Seen(("f", _stage(src, dir_fd, staged, budget)), mode, staged)


def _hash(src: IO[bytes]) -> str:
    h = hashlib.sha256()
    while block := src.read(COPY_CHUNK):
        h.update(block)
    return h.hexdigest()


def _plain(m: tarfile.TarInfo) -> bool:
    """A folder, a plain regular file or a symlink; not sparse in any of tar's spellings (GNU type 'S',
    the PAX GNU.sparse.* records, which tarfile expands to `m.sparse`)."""
    if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE):
        return False
    return m.sparse is None and not any(k.startswith("GNU.sparse.") for k in m.pax_headers)


def _copy_member(src: IO[bytes], dir_fd: int, name: str, mode: int, budget: list[int]) -> str:
    """Write one member's content to `name` below `dir_fd` (a folder only Hermit writes) in chunks,
    charging each to `budget[0]` (negative: no budget); past it the partial file is removed. Returns the
    content's sha256 (hex)."""
    parts = safe_fs.parts_of(name)
    parent = safe_fs.open_dir(dir_fd, "/".join(parts[:-1]), create=True)
    tmp = f".{parts[-1][:80]}.{os.getpid()}.part"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        try:
            os.fchmod(fd, mode)
            digest = _copy_counted(src, fd, name, budget)
        finally:
            os.close(fd)
        os.rename(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        return digest
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        raise
    finally:
        os.close(parent)


def _copy_counted(src: IO[bytes], fd: int, name: str, budget: list[int]) -> str:
    """Copy `src` into `fd` in chunks against `budget` (what the room's copy could still hold; negative: no limit):
    past it, OverBudget and nothing more is written. Returns the content's sha256 (hex)."""
    h = hashlib.sha256()
    while block := src.read(COPY_CHUNK):
        if budget[0] >= 0:
            budget[0] -= len(block)
            if budget[0] < 0:
                raise OverBudget(f"{name}: more bytes than the room can hold came back")
        h.update(block)
        write_all(fd, block, fsync=False)
    return h.hexdigest()


def _stage(src: IO[bytes], dir_fd: int, name: str, budget: list[int]) -> str:
    """`_copy_member` for the merge's flat staging folder: `name` is new and Hermit's alone (its permissions are set
    when it is moved into the room), so it is written in place. Returns the content's sha256 (hex)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        return _copy_counted(src, fd, name, budget)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)


def _link_stays_inside(name: str, target: str) -> bool:
    if not target or target.startswith("/") or "\x00" in target:
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return resolved != ".." and not resolved.startswith("../")
