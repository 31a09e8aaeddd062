"""Race-free file access beneath a directory descriptor: no symlink is followed at any component, ever.

A path check followed by an open by name is a race: between the two, a hostile process sharing the
directory (a sandboxed command of another chat) can swap a component for a symlink or exchange two
directories (`renameat2(RENAME_EXCHANGE)`), and the open then reads or writes something else. So the
tools of a confined session never open by name. Every open starts at a descriptor of the root the
session may use and resolves the rest relative to it:

- `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` where the kernel
  has it (Linux 5.6+): the kernel refuses any symlink and any escape in one atomic lookup;
- elsewhere a component-by-component walk, each step `O_NOFOLLOW` relative to the previous step's
  descriptor, so a swapped component is refused instead of followed.
That open (`open_beneath`, `parts_of`) lives in hermit.textfile, below the memory indexer, which reads
notes the same way; this module builds the tools' reads, writes, listings and removals on it.

What was opened is then judged on the descriptor (`fstat`: a regular file, its identity, its link
count), never by looking the name up again. Writes create a uniquely named temporary file in the
parent directory's descriptor and `rename` it inside that same descriptor, so the replacement lands
in the directory that was checked even if the path to it changed meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from hermit.durable import append_fd, write_all
from hermit.errors import PathPolicyError
from hermit.locks import lock_fd
from hermit.textfile import DIR_FLAGS, O_PATH, SYMLINK_RULE, open_beneath, parts_of, refusal

__all__ = ["SYMLINK_RULE", "NotAFile", "Opened", "append_beneath", "disk_usage", "kind_of", "list_beneath",
           "lstat_beneath", "open_beneath", "open_dir", "parts_of", "read_beneath", "readlink_beneath",
           "remove_beneath", "sweep_temps", "walk_beneath", "write_beneath"]

_O_PATH = O_PATH  # the names the tools have used
_DIR_FLAGS = DIR_FLAGS


def open_dir(dir_fd: int, rel: str, *, create: bool = False, listing: bool = False) -> int:
    """A descriptor of the directory `rel` beneath `dir_fd` (created, with parents, when `create`: 0700, so a
    new `memory/<sub>/`'s note names are not listed by others where the user's own folder above is 0755);
    `listing` opens it readable (for scandir) instead of O_PATH."""
    parts = parts_of(rel)
    flags = (os.O_RDONLY if listing else (_O_PATH or os.O_RDONLY)) | os.O_DIRECTORY
    if not create:
        return open_beneath(dir_fd, rel, flags)
    cur = os.dup(dir_fd)
    try:
        for name in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=cur)
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=cur)
            except OSError as e:
                raise refusal(rel, e) from None
            os.close(cur)
            cur = nxt
        if listing:
            out = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            os.close(cur)
            return out
        return cur
    except BaseException:
        os.close(cur)
        raise


@dataclass(frozen=True)
class Opened:
    """A regular file read through a descriptor: its bytes and what fstat said about that descriptor."""

    data: bytes
    st: os.stat_result

    @property
    def identity(self) -> tuple[int, int]:
        return self.st.st_dev, self.st.st_ino


class NotAFile(PathPolicyError):
    """The path names a directory, FIFO, socket or device: only regular files are read or written."""

    def __init__(self, rel: str, kind: str) -> None:
        super().__init__(f"{rel} is {kind}, not a regular file", "only regular text files can be read or written")
        self.kind = kind


def kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def read_beneath(dir_fd: int, rel: str, max_bytes: int) -> Opened:
    """The bytes of the regular file `rel` (at most `max_bytes`, else FileTooLarge-like PathPolicyError).
    O_NONBLOCK: a FIFO planted in the path cannot block the turn; it is refused on its fstat."""
    fd = open_beneath(dir_fd, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(rel, kind_of(st.st_mode))
        if st.st_size > max_bytes:
            raise PathPolicyError(f"{rel} is too large to read ({st.st_size:,} bytes)",
                                  "use exec with head, tail or grep to look at parts of it")
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise PathPolicyError(f"{rel} is too large to read (over {max_bytes:,} bytes)",
                                  "use exec with head, tail or grep to look at parts of it")
        return Opened(data, st)
    finally:
        os.close(fd)


def readlink_beneath(dir_fd: int, rel: str) -> str:
    """The text of the link `rel` beneath `dir_fd`, its folders opened without following links."""
    parts = parts_of(rel)
    parent = open_dir(dir_fd, "/".join(parts[:-1]))
    try:
        return os.readlink(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)


def lstat_beneath(dir_fd: int, rel: str) -> os.stat_result | None:
    """lstat of `rel` (the entry itself, a symlink is not followed); None when it does not exist."""
    parts = parts_of(rel)
    if not parts:
        return os.stat(".", dir_fd=dir_fd)
    try:
        parent = open_dir(dir_fd, "/".join(parts[:-1]))
    except FileNotFoundError:
        return None
    try:
        return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)


def list_beneath(dir_fd: int, rel: str) -> list[tuple[str, bool]]:
    """(name, is a directory) of the entries of the directory `rel`, sorted; symlinks are not followed."""
    fd = open_dir(dir_fd, rel, listing=True)
    try:
        with os.scandir(fd) as it:
            return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)
    finally:
        os.close(fd)


def write_beneath(dir_fd: int, rel: str, data: bytes, *, mode: int = 0o600, fsync: bool = True) -> None:
    """Replace (or create) the file `rel` atomically: a temporary file in the parent's descriptor, then a
    rename inside that descriptor. An existing regular file of this user's keeps its permissions (their rwx bits
    only: a setuid, setgid or sticky bit is never carried, nor asked for with `mode`: the text written is not
    the program that file was); another user's lends none (their 0666 file planted in a shared folder must not
    make the owner's text readable by all): `mode` then. A directory, FIFO or other special file at `rel` is
    refused. Parent directories are created (0700: `open_dir`)."""
    parts = parts_of(rel)
    if not parts:
        raise PathPolicyError("cannot write the folder itself", "pass a file path")
    parent = open_dir(dir_fd, "/".join(parts[:-1]), create=True)
    name = parts[-1]
    try:
        _sweep_once(parent)
        try:
            old = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and not (stat.S_ISREG(old.st_mode) or stat.S_ISLNK(old.st_mode)):
            raise NotAFile(rel, kind_of(old.st_mode))
        carried = old is not None and stat.S_ISREG(old.st_mode) and old.st_uid == os.geteuid()
        keep = (stat.S_IMODE(old.st_mode) if old is not None and carried else mode) & 0o777
        fd, tmp = _held_temp(parent, name, keep)
        try:  # held until renamed, or removed: a sweep never takes a live writer's temp for a leftover
            os.fchmod(fd, keep)  # the umask must not loosen or tighten what the file had
            write_all(fd, data, fsync=fsync)
            os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:  # a full disk, a folder gone: no temp left behind by a writer that lives
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
        finally:
            os.close(fd)
        if fsync:
            with contextlib.suppress(OSError):
                dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
    finally:
        os.close(parent)


TEMP_NAME = re.compile(r"\..{1,80}\.[0-9a-f]{12}\.tmp", re.DOTALL)  # write_beneath's temps: `.NAME.<hex>.tmp`
_TEMP_TRIES = 8


def _held_temp(parent: int, name: str, mode: int) -> tuple[int, str]:
    """A new temp file `.NAME.<hex>.tmp` in the directory `parent` (created exclusively, never through a link) and
    its descriptor, locked (flock) from its making until the descriptor is closed: the proof a sweep
    (`sweep_temps`) goes by that its writer lives. Taken without waiting: one a sweep took for a leftover in the
    instant between its making and the lock (and removed), or that another process locked first (a command in a
    shared room), is let go and another made; no other process can make a write wait on a lock of its own."""
    for _ in range(_TEMP_TRIES):
        tmp = f".{name[:80]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        try:
            if lock_fd(fd, wait=False):
                try:
                    now = os.stat(tmp, dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
                own = os.fstat(fd)
                if now is not None and (now.st_dev, now.st_ino) == (own.st_dev, own.st_ino):
                    return fd, tmp
            else:  # someone else holds what we just made: not ours to use, ours to remove
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EBUSY, f"could not make a temporary file for {name}: each one made was taken at once "
                               "by another process")


def sweep_temps(dir_fd: int) -> list[str]:
    """Remove the temp files of `write_beneath` (`.NAME.<hex>.tmp`) in the directory `dir_fd` that no writer holds:
    what a writer killed mid-write left (kill -9, an OOM kill, a power cut), which nothing else ever removes. A
    writer holds its temp (flock) from its making until it is renamed into place, so one held is a live writer's
    and is left; one is removed only while this process holds it, and only if the name still names it. Only this
    user's regular files are looked at, never through a link. Returns the names removed."""
    removed: list[str] = []
    try:
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return removed
    try:
        with os.scandir(listing) as it:
            names = [e.name for e in it if TEMP_NAME.fullmatch(e.name)]
    finally:
        os.close(listing)
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            continue  # gone, a link, or not ours to open: not ours to remove either
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not lock_fd(fd, wait=False):
                continue  # another's, or a live writer's
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


_swept: set[tuple[int, int]] = set()  # the directories (st_dev, st_ino) this process has swept
_swept_guard = threading.Lock()


def _sweep_once(parent: int) -> None:
    """`sweep_temps` the first time this process writes in a directory: a leftover is a killed writer's (a live
    one removes its temp even when its write fails), so one look per process is enough."""
    st = os.fstat(parent)
    with _swept_guard:
        if (st.st_dev, st.st_ino) in _swept:
            return
        _swept.add((st.st_dev, st.st_ino))
    sweep_temps(parent)


def append_beneath(dir_fd: int, rel: str, data: bytes, *, fsync: bool = True, new_line: bool = False) -> None:
    """Append to the existing regular file `rel` (O_APPEND, exclusive lock): another writer's addition made
    since the caller read the file is kept, not overwritten. `new_line`: `data` starts a line, whatever the
    file ends with by the time it is written (durable.append_whole)."""
    fd = open_beneath(dir_fd, rel, (os.O_RDWR if new_line else os.O_WRONLY) | os.O_APPEND | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(rel, kind_of(st.st_mode))
        append_fd(fd, data, fsync=fsync, new_line=new_line)
    finally:
        os.close(fd)


def remove_beneath(dir_fd: int, rel: str) -> None:
    """Remove the entry `rel` (a file, a symlink itself, or a directory tree), nothing followed."""
    parts = parts_of(rel)
    if not parts:
        raise PathPolicyError("cannot remove the folder itself", "pass a path inside it")
    parent = open_dir(dir_fd, "/".join(parts[:-1]))
    try:
        _remove_at(parent, parts[-1])
    finally:
        os.close(parent)


def _remove_at(parent: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        with os.scandir(fd) as it:
            names = [e.name for e in it]
        for child in names:
            _remove_at(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def walk_beneath(dir_fd: int, rel: str = "") -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below `rel` as (relative path, lstat), directories before their contents; symlinks
    are reported, never followed. An entry (or folder) removed or replaced while the walk passes is left
    out, as os.walk does: a room's usage is counted without its lock, beside writes renaming their temps."""
    try:
        fd = open_dir(dir_fd, rel, listing=True)
    except (FileNotFoundError, NotADirectoryError, PathPolicyError):
        if not rel:
            raise
        return  # gone, or no longer a folder (a link now: never followed), since its parent was listed
    try:
        with os.scandir(fd) as it:
            entries = sorted(found for e in it if (found := _lstat_entry(e)) is not None)
        for name, st in entries:
            path = f"{rel}/{name}" if rel else name
            yield path, st
            if stat.S_ISDIR(st.st_mode):
                yield from walk_beneath(dir_fd, path)
    finally:
        os.close(fd)


def _lstat_entry(entry: os.DirEntry[str]) -> tuple[str, os.stat_result] | None:
    try:
        return entry.name, entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None


def disk_usage(dir_fd: int) -> int:
    """Bytes the tree beneath `dir_fd` occupies (allocated blocks, so sparse files count as stored)."""
    return sum(st.st_blocks * 512 for _, st in walk_beneath(dir_fd))
