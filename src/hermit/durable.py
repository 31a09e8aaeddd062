"""Durable writes: whole files (temp file in the same directory, fsync, atomic rename) and appends.

Every rewrite of a file Hermit owns or edits for the user (config, sessions.json, workspace files via
the write/edit tools, small caches) goes through here, so a crash leaves the old file or the new one,
never a torn one. An addition to the end of a file goes through `append_fd` instead: a rewrite would
drop a note another session appended between the read and the rename, an O_APPEND write under an
exclusive lock keeps both. An addition meant to start a line (`new_line`: a note, an origin block) gets its
"\n" from the file's end as it is when it is written, not from the caller's earlier read: a writer outside
Hermit (the owner's `printf 'x' >> log`, an editor saving without a final newline) takes no lock, and its
text must not end up on an origin marker's line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

from hermit.locks import held, hold_made, left_unheld, make_held


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes, *, fsync: bool = True) -> None:
    """Write all of `data` to `fd` (os.write may write less than asked), then fsync it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if fsync:
        os.fsync(fd)


def write_atomic(path: Path, data: bytes | str, *, mode: int | None = None, fsync: bool = True,
                 keep_mode: bool = True) -> None:
    """Replace `path` with `data` atomically.

    The new file gets `path`'s current permissions when it exists and is the current user's (`keep_mode`),
    else `mode` (default 0o600: private until told otherwise). Another user's file (planted in a folder they
    could write: a 0666 MEMORY.md) lends none of its bits: the new file is ours, and its text the owner's.
    Text is written as UTF-8 with newlines untouched.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _remove_stale_temps(path)
    final_mode = mode if mode is not None else 0o600
    if keep_mode:
        try:
            st = path.stat()
        except OSError:  # none there (or a dangling link): `mode`
            pass
        else:
            if st.st_uid == os.geteuid():
                final_mode = st.st_mode & 0o7777
    fd, tmp = held_temp(path)
    try:
        try:
            write_all(fd, payload, fsync=fsync)
            os.fchmod(fd, final_mode)
            os.replace(tmp, path)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if fsync:
        fsync_dir(path.parent)



def held_temp(path: Path) -> tuple[int, Path]:
    """A new temp file `.NAME.tmp-<pid>-<hex>` next to `path` (0600, created exclusively) and its descriptor,
    held (locks.hold_made) until the descriptor is closed: another process's sweep (_remove_stale_temps) removes
    only the temps of writers that died, whatever pid is in their names."""
    def make() -> tuple[int, Path]:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp

    return make_held(make)


def create_new(path: Path, data: bytes | str, mode: int = 0o600) -> bool:
    """Create `path` holding all of `data` and return True, or return False when the name is taken (never
    overwrites, even in a race). The name appears only once the whole file is on disk: it is written unnamed
    (O_TMPFILE) or under a temp name and then linked into place, so a crash leaves no part of a file there."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _remove_stale_temps(path)
    with NewFile(path) as f:
        os.fchmod(f.fd, mode)
        write_all(f.fd, payload)
        try:
            f.link()
        except FileExistsError:
            return False
    return True


class TempReplaced(OSError):
    """The temp name a new file was written under names another file now (a directory others may write)."""


class NewFile:
    """`with NewFile(path) as f:` write `f.fd` (owner-only from the first byte), then `f.link()` gives it the name
    `path` — FileExistsError if anything (a file, a symlink) is there: nothing is ever replaced. The file is
    unnamed (O_TMPFILE) where the file system allows it, else under `.NAME.tmp-<pid>-<hex>` created
    O_EXCL|O_NOFOLLOW (swept like `write_atomic`'s temps when a killed process left one), checked to still be
    this file before it is linked and removed on exit. A predictable name in a shared directory could be
    planted: the planter's file would make them the owner, a symlink would have us write its target."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.fd, self.tmp = _unnamed(self.folder, path.name)
        except BaseException:
            os.close(self.folder)
            raise

    def __enter__(self) -> NewFile:
        return self

    def link(self) -> None:
        if self.tmp is None:  # linkat(AT_SYMLINK_FOLLOW) of the descriptor names the unnamed file
            os.link(f"/proc/self/fd/{self.fd}", self.path.name, dst_dir_fd=self.folder, follow_symlinks=True)
        else:
            st, now = os.fstat(self.fd), os.stat(self.tmp, dir_fd=self.folder, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise TempReplaced(errno.ESTALE, f"{self.path.parent / self.tmp} was replaced while it was written")
            os.link(self.tmp, self.path.name, src_dir_fd=self.folder, dst_dir_fd=self.folder, follow_symlinks=False)
        with contextlib.suppress(OSError):
            os.fsync(self.folder)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.folder)
        os.close(self.folder)


def _unnamed(folder: int, name: str) -> tuple[int, str | None]:
    """A new file in the directory `folder`: unnamed where the file system allows it, else `.NAME.tmp-<pid>-<hex>`
    (created exclusively)."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(".", tmpfile | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=folder), None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:  # held (locked) until closed, as write_atomic's temps
        tmp = f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(tmp, flags, 0o600, dir_fd=folder)
        try:
            if hold_made(fd, tmp, dir_fd=folder):
                return fd, tmp
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


_swept: set[Path] = set()  # files whose leftover temps this process has looked for


def _remove_stale_temps(path: Path) -> None:
    """Delete the temp files of `path` (`.NAME.tmp-<pid>-<hex>`) that a killed process left: once per file
    and process (a leftover is a crash's, so one look is enough), only those no process holds (locks.left_unheld:
    a live writer in another pid namespace keeps its temp)."""
    if path in _swept:
        return
    _swept.add(path)
    for stale in left_unheld(path.parent, f".{path.name}.tmp-"):
        with contextlib.suppress(OSError):
            os.unlink(stale)


MARKER_START = b"<!--"  # how an origin marker line starts (memory/policy/provenance.py)


def line_lead(fd: int, size: int, data: bytes) -> bytes:
    """What goes before `data`, which must start a line, at the end of the `size` bytes of the file open
    (readable) as `fd`: "\n" unless the file is empty or ends with one. Data starting with a marker gets it
    unless the file ends with a blank line: with the "\n" written in the same write as the marker, text
    that a writer taking no lock adds between this look and the write still ends up on a line before it."""
    if not size or data.startswith(b"\n"):
        return b""
    if data.startswith(MARKER_START):
        return b"" if size >= 2 and os.pread(fd, 2, size - 2) == b"\n\n" else b"\n"
    return b"" if os.pread(fd, 1, size - 1) == b"\n" else b"\n"


def append_whole(fd: int, data: bytes, *, fsync: bool = True, new_line: bool = False) -> None:
    """Append `data` to the file open (O_APPEND) as `fd` — whose lock the caller holds — all of it or none:
    a write cut short (a full disk, a file-size limit) is undone, so no torn note or half a UTF-8 character
    is left at the end (one stray byte would make the whole file decode as another encoding).

    `new_line`: `data` starts a line (the caller read the file ending in "\n", or empty), whatever something
    that takes no lock added to the file since: `line_lead` is written first. `fd` must then be readable
    too (O_RDWR)."""
    size = os.fstat(fd).st_size
    if new_line:
        data = line_lead(fd, size, data) + data
    try:
        write_all(fd, data, fsync=fsync)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def append_fd(fd: int, data: bytes, *, fsync: bool = True, new_line: bool = False) -> None:
    """Append `data` to the file open (O_APPEND) as `fd`, under an exclusive lock, all or none, then fsync
    (`new_line`: see append_whole)."""
    with held(fd):
        append_whole(fd, data, fsync=fsync, new_line=new_line)


def append_file(path: Path, data: bytes, *, fsync: bool = True, new_line: bool = False) -> None:
    """Append to an existing regular file by name (the last component is not followed if a symlink);
    `new_line`: see append_whole."""
    fd = os.open(path, (os.O_RDWR if new_line else os.O_WRONLY) | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        append_fd(fd, data, fsync=fsync, new_line=new_line)
    finally:
        os.close(fd)
