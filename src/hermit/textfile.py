"""Reading text files Hermit did not write: regular files only (never block on a FIFO), encoding detected.

Anyone with a shell in the workspace can put a FIFO, a socket or a device where a note is expected;
opening a FIFO for reading waits for a writer forever. So a file is checked with stat first, then
opened with O_NONBLOCK (a FIFO opens at once, a socket fails with ENXIO) and checked again with fstat
on the open descriptor (no race with a swap in between); anything but a regular file raises
NotRegularFile naming what it is, for the caller to skip with a warning or refuse with a hint.

Notes not saved as UTF-8 (Latin-1 or cp1252 from an old editor, GBK from a Chinese Windows machine)
are decoded by detecting the encoding with charset-normalizer. On short Western text it cannot tell
the single-byte code pages apart (measured: "naïve résumé" in Latin-1 came back as cp1006, Farsi), so
when Windows-1252 is among its candidates it wins (it is a superset of Latin-1's printable characters
and by far the most common legacy encoding of notes), then GB18030 and Big5 (Chinese is Hermit's
second language), then its own best guess. Only when nothing fits are bytes replaced.

A file beneath a folder someone else may write into (a sandboxed command's room, a memory folder another
user shares) is opened race-free from the folder's descriptor, no symlink followed at any component
(`open_beneath`, `read_regular_beneath`): a path check followed by an open by name is a race, as a hostile
process can swap a component for a symlink (or exchange two directories) in between. Where the kernel has
it (Linux 5.6+) `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` refuses
any symlink and any escape in one atomic lookup; elsewhere each component is opened `O_NOFOLLOW` relative
to the previous one's descriptor. What was opened is judged on the descriptor (`fstat`), never by looking
the name up again. The tools (hermit.tools.safe_fs) and the memory indexer share this one open.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.errors import PathPolicyError

_PREFERRED_ENCODINGS = ("cp1252", "gb18030", "big5")
_DETECT_BYTES = 200_000  # charset-normalizer samples large inputs anyway; keep its cost bounded


class NotRegularFile(OSError):
    """The path is a directory, FIFO, socket or device; `kind` says which ("a FIFO")."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{path} is {kind}, not a regular file")
        self.path = path
        self.kind = kind


class FileTooLarge(OSError):
    """The file is larger than the caller's limit; `size` and `limit` are in bytes."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{path} is {size:,} bytes, over the {limit:,}-byte limit")
        self.size = size
        self.limit = limit


def file_kind(mode: int) -> str:
    """What a stat mode describes, for messages: "a regular file", "a directory", "a FIFO"…"""
    kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISLNK, "a symlink"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_regular(path: str | Path, max_bytes: int | None = None, *, follow: bool = True) -> bytes:
    """The bytes of a regular file, never blocking on anything else; with `follow=False` a symlink as the
    last component is refused too (a session file listed as regular and swapped for a link before the read).

    Raises NotRegularFile (directory, FIFO, socket, device, that symlink), FileTooLarge when over `max_bytes`,
    or the OSError of the open/read (FileNotFoundError, PermissionError…)."""
    return read_regular_stat(path, max_bytes, follow=follow)[0]


def read_regular_stat(path: str | Path, max_bytes: int | None = None, *,
                      follow: bool = True) -> tuple[bytes, os.stat_result]:
    """`read_regular`, with the fstat of the descriptor read: who owns what was read, whatever the name names
    by now."""
    name = os.fspath(path)
    st = os.stat(name, follow_symlinks=follow)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(name, file_kind(st.st_mode))
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket swapped in after the stat
            raise NotRegularFile(name, "a socket") from None
        if e.errno == errno.ELOOP and not follow:  # a symlink swapped in after the stat
            raise NotRegularFile(name, "a symlink") from None
        raise
    try:
        return _read_fd(fd, name, max_bytes)
    finally:
        os.close(fd)


def read_regular_beneath(dir_fd: int, rel: str, max_bytes: int | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file `rel` beneath the folder `dir_fd`, opened without following a symlink at
    any component (a folder on the way swapped for a link to elsewhere is refused, not read through), and the
    fstat of the descriptor read: what was read, whatever the name names by now.

    Raises NotRegularFile (a directory, FIFO, socket, device, or "a symlink or under a symlinked folder"),
    FileTooLarge, FileNotFoundError, or the OSError of the open/read."""
    try:
        fd = _open_beneath(dir_fd, parts_of(rel), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, 0)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise NotRegularFile(rel, "a socket") from None
        if e.errno in (errno.ELOOP, errno.EXDEV):
            raise NotRegularFile(rel, "a symlink or under a symlinked folder") from None
        if e.errno == errno.ENOTDIR:  # where no openat2: a folder on the way is a link (or a file) now
            raise NotRegularFile(rel, "under a folder swapped for a symlink or a file") from None
        raise
    try:
        return _read_fd(fd, rel, max_bytes)
    finally:
        os.close(fd)


def _read_fd(fd: int, name: str, max_bytes: int | None) -> tuple[bytes, os.stat_result]:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(name, file_kind(st.st_mode))
    if max_bytes is not None and st.st_size > max_bytes:
        raise FileTooLarge(name, st.st_size, max_bytes)
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks), st


# -- race-free opens beneath a directory descriptor -------------------------------------------------------
_SYS_OPENAT2 = 437  # the same number on every architecture that has it (x86_64, aarch64, …)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
O_PATH = getattr(os, "O_PATH", 0)
DIR_FLAGS = (O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SYMLINK_RULE = "tools do not follow symlinks in this session; use the real path inside the workspace"


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> Any:
    """libc's syscall() (typed Any: a ctypes function pointer), or None where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_syscall = _load_openat2() if os.uname().sysname == "Linux" else None
_openat2_works: bool | None = None  # learnt on first use: ENOSYS means an older kernel


def parts_of(rel: str) -> list[str]:
    """The components of a relative path; refuses absolute paths, `..`, NUL bytes and empty paths."""
    if "\x00" in rel:
        raise PathPolicyError("the path contains a NUL byte", "pass a plain file path")
    if rel.startswith("/"):
        raise PathPolicyError(f"{rel!r} is an absolute path here", "pass a path relative to the workspace")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathPolicyError(f"{rel!r} goes up with '..'", "pass a path inside the workspace without '..'")
    return parts


def refusal(rel: str, err: OSError) -> PathPolicyError:
    """The PathPolicyError a tool reports for the OSError of an open beneath a folder."""
    if err.errno == errno.ENOTDIR:
        return PathPolicyError(f"{rel!r}: a part of the path is not a folder", "check the path")
    if err.errno in (errno.ELOOP, errno.EXDEV):
        return PathPolicyError(f"{rel!r} passes through a symlink or leaves the allowed folder", SYMLINK_RULE)
    return PathPolicyError(f"cannot open {rel!r}: {err.strerror or err}", "check the path")


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int | None:
    """openat2 beneath `dir_fd`, or None when the kernel lacks it (the caller walks instead)."""
    global _openat2_works
    if _syscall is None or _openat2_works is False:
        return None
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
    while True:
        fd = _syscall(_SYS_OPENAT2, dir_fd, rel.encode("utf-8", "surrogateescape"), ctypes.byref(how),
                      ctypes.sizeof(how))
        if fd >= 0:
            _openat2_works = True
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.EINTR or err == errno.EAGAIN:
            continue
        if err in (errno.ENOSYS, errno.EPERM) and _openat2_works is None:
            _openat2_works = False  # EPERM: a seccomp filter refusing unknown syscalls
            return None
        raise OSError(err, os.strerror(err))


def _walk(dir_fd: int, parts: list[str]) -> int:
    """A new O_PATH descriptor of the directory `parts` names beneath `dir_fd`, no symlink followed."""
    cur = os.dup(dir_fd)
    try:
        for name in parts:
            nxt = os.open(name, DIR_FLAGS, dir_fd=cur)
            os.close(cur)
            cur = nxt
        return cur
    except BaseException:
        os.close(cur)
        raise


def _open_beneath(dir_fd: int, parts: list[str], flags: int, mode: int) -> int:
    """open_beneath's lookup, its OSError as the kernel said it (ELOOP/EXDEV: a symlink or an escape)."""
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
    fd = _openat2(dir_fd, "/".join(parts), flags, mode)
    if fd is not None:
        return fd
    parent = _walk(dir_fd, parts[:-1])
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    finally:
        os.close(parent)


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor of `rel` beneath `dir_fd` opened with `flags`; PathPolicyError when a symlink or an
    escape is on the way (FileNotFoundError when it simply does not exist)."""
    try:
        return _open_beneath(dir_fd, parts_of(rel), flags, mode)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "no such file", rel) from None
        if e.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
            raise refusal(rel, e) from None
        raise


@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str  # "utf-8", or the detected encoding ("cp1252", "gb18030"…)
    replaced: bool = False  # no encoding fitted: undecodable bytes became U+FFFD
    first_bad_line: int | None = None  # where UTF-8 first failed (1-based)


def decode_text(data: bytes) -> Decoded:
    """UTF-8 (a BOM is dropped) when it is; else the detected encoding; else UTF-8 with replacements."""
    try:
        return Decoded(data.decode("utf-8-sig"), "utf-8")
    except UnicodeDecodeError as e:
        bad_line = data[: e.start].count(b"\n") + 1
        if e.end == len(data) and e.reason == "unexpected end of data":
            # UTF-8 but for a character cut off at the very end (a write torn by a crash or a full disk):
            # guessing another encoding for the whole file would turn every accent into mojibake.
            return Decoded(data.decode("utf-8-sig", errors="replace"), "utf-8", replaced=True,
                           first_bad_line=bad_line)
    encoding = _detect(data)
    if encoding is not None:
        try:
            return Decoded(data.decode(encoding), encoding, first_bad_line=bad_line)
        except (UnicodeDecodeError, LookupError):
            pass  # a guess from a sample that the whole file contradicts
    return Decoded(data.decode("utf-8", errors="replace"), "utf-8", replaced=True, first_bad_line=bad_line)


def _detect(data: bytes) -> str | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # a trimmed install: decoding still works, with replacement characters
        return None
    matches = from_bytes(data[:_DETECT_BYTES])
    best = matches.best()
    if best is None:
        return None
    candidates = {c for m in matches for c in m.could_be_from_charset}
    for preferred in _PREFERRED_ENCODINGS:
        if preferred in candidates:
            return preferred
    return str(best.encoding)
