"""Durable writes: whole files (temp file in the same directory, fsync, atomic rename) and appends.

Every rewrite of a file Hermit owns or edits for the user (config, sessions.json, workspace files via
the write/edit tools, small caches) goes through here, so a crash leaves the old file or the new one,
never a torn one. An addition to the end of a file goes through `append_fd` instead: a rewrite would
drop a note another session appended between the read and the rename, an O_APPEND write under an
exclusive lock keeps both.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

from hermit.locks import held, left_by_dead_processes


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

    The new file gets `path`'s current permissions when it exists (`keep_mode`), else `mode`
    (default 0o600: private until told otherwise). Text is written as UTF-8 with newlines untouched.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _remove_stale_temps(path)
    final_mode = mode if mode is not None else 0o600
    if keep_mode and path.exists():
        final_mode = path.stat().st_mode & 0o7777
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            write_all(fd, payload, fsync=fsync)
        finally:
            os.close(fd)
        os.chmod(tmp, final_mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if fsync:
        fsync_dir(path.parent)



def create_new(path: Path, data: bytes | str, mode: int = 0o600) -> bool:
    """Create `path` holding all of `data` and return True, or return False when the name is taken (never
    overwrites, even in a race). The name appears only once the whole file is on disk: it is written unnamed
    (O_TMPFILE) or under a temp name and then linked into place, so a crash leaves no part of a file there."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _remove_stale_temps(path)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd, tmp = _unnamed(folder, path.name)
        try:
            os.fchmod(fd, mode)
            write_all(fd, payload)
            try:
                if tmp is None:  # linkat(AT_SYMLINK_FOLLOW) of the descriptor names the unnamed file
                    os.link(f"/proc/self/fd/{fd}", path.name, dst_dir_fd=folder, follow_symlinks=True)
                else:
                    os.link(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
            except FileExistsError:
                return False
        finally:
            os.close(fd)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)
        with contextlib.suppress(OSError):
            os.fsync(folder)
        return True
    finally:
        os.close(folder)


def _unnamed(folder: int, name: str) -> tuple[int, str | None]:
    """A new file in the directory `folder`: unnamed where the file system allows it, else `.NAME.tmp-<pid>-<hex>`
    (created exclusively; one a killed process left is swept like `write_atomic`'s)."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(".", tmpfile | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=folder), None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    tmp = f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(tmp, flags, 0o600, dir_fd=folder), tmp

_swept: set[Path] = set()  # files whose leftover temps this process has looked for


def _remove_stale_temps(path: Path) -> None:
    """Delete the temp files of `path` (`.NAME.tmp-<pid>-<hex>`) that a killed process left: once per file
    and process (a leftover is a crash's, so one look is enough), only those whose process is gone."""
    if path in _swept:
        return
    _swept.add(path)
    for stale in left_by_dead_processes(path.parent, f".{path.name}.tmp-"):
        with contextlib.suppress(OSError):
            os.unlink(stale)


def append_whole(fd: int, data: bytes, *, fsync: bool = True) -> None:
    """Append `data` to the file open (O_APPEND) as `fd` — whose lock the caller holds — all of it or none:
    a write cut short (a full disk, a file-size limit) is undone, so no torn note or half a UTF-8 character
    is left at the end (one stray byte would make the whole file decode as another encoding)."""
    size = os.fstat(fd).st_size
    try:
        write_all(fd, data, fsync=fsync)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def append_fd(fd: int, data: bytes, *, fsync: bool = True) -> None:
    """Append `data` to the file open (O_APPEND) as `fd`, under an exclusive lock, all or none, then fsync."""
    with held(fd):
        append_whole(fd, data, fsync=fsync)


def append_file(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Append to an existing regular file by name (the last component is not followed if a symlink)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        append_fd(fd, data, fsync=fsync)
    finally:
        os.close(fd)
