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
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

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
    last component is refused too (a memory file listed as regular and swapped for a link before the read).

    Raises NotRegularFile (directory, FIFO, socket, device, that symlink), FileTooLarge when over `max_bytes`,
    or the OSError of the open/read (FileNotFoundError, PermissionError…)."""
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
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(name, file_kind(st.st_mode))
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTooLarge(name, st.st_size, max_bytes)
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
