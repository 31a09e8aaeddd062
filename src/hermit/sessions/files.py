"""Opening the files of a sessions folder (transcripts, sessions.json): never through a link, only the user's own.

A transcript is the history the model is sent as the owner's own words, and each turn is appended to it: one
another local user made or could write (left in a folder they once controlled, or with its owner kept when
copied in) would put their words in the owner's mouth and read every later turn, and a symlink or a second
name (hard link) there would have Hermit — as root, say — append to a file it names. The sessions folder
itself must be the user's (config.load.sessions_problem); this is the check on each file as it is opened.

Each file is opened without following a link (O_NOFOLLOW; O_NONBLOCK, so a FIFO there never blocks) and
judged on the descriptor (`fstat`: what was opened, whatever the name names by now): a regular file, with
one name, the current user's and not writable by every user or a group others are in. Anything else raises
ForeignSessionFile naming the file and what to do; nothing is read from it or written to it. One open and
one fstat: a turn's append stays cheap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hermit.config.paths import not_own_file
from hermit.errors import SessionError
from hermit.textfile import file_kind

_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)


class ForeignSessionFile(SessionError):
    """A file in a sessions folder that is a link, not a regular file, has other names, or is not the user's."""

    def __init__(self, path: Path, why: str, what: str) -> None:
        super().__init__(
            f"{what} {path} {why}: Hermit will neither read it nor write to it",
            f"someone else may have put it there: check who can write {path.parent} and what the file holds, then "
            f"move it out of the folder (mv {path} ~/{path.name}.suspect); Hermit starts that session afresh "
            "(a missing sessions.json is rebuilt from the transcripts)",
        )
        self.path = path
        self.why = why


def not_own_session_file(st: os.stat_result) -> str | None:
    """Why an opened file (`st` from fstat) is no transcript or sessions.json of the user's, or None."""
    if not stat.S_ISREG(st.st_mode):
        return f"is {file_kind(st.st_mode)}, not a regular file"
    if (why := not_own_file(st)) is not None:
        return why
    if st.st_nlink != 1:
        return f"has {st.st_nlink} names (hard links): writing to it would write to a file elsewhere"
    return None


_REPLACED_RETRIES = 100  # opens of a name replaced each time between the open and the fstat, before it is refused


def open_own(path: Path, flags: int, what: str, mode: int = 0o600) -> tuple[int, os.stat_result]:
    """`path` opened with `flags` (O_CREAT makes it owner-only), never through a symlink, and its fstat;
    ForeignSessionFile when it is not the user's own regular file (`what` names it: "the transcript").
    Other OSErrors (FileNotFoundError, PermissionError…) are the caller's to report."""
    for _ in range(_REPLACED_RETRIES):
        try:
            fd = os.open(path, flags | _FLAGS, mode)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ForeignSessionFile(path, "is a symlink", what) from None
            if e.errno == errno.ENXIO:  # O_WRONLY on a FIFO nobody reads, or a socket
                raise ForeignSessionFile(path, "is a FIFO or a socket, not a regular file", what) from None
            raise
        try:
            st = os.fstat(fd)
            why = not_own_session_file(st)
        except BaseException:
            os.close(fd)
            raise
        if st.st_nlink != 0:
            break
        # No name left: it was replaced since it was opened (a deleted message's scrub renames the new file over
        # it, sessions/scrub.py). Not someone else's file: the name is opened again.
        os.close(fd)
    else:
        raise ForeignSessionFile(path, f"was replaced each of the {_REPLACED_RETRIES} times it was opened", what)
    if why is not None:
        os.close(fd)
        raise ForeignSessionFile(path, why, what)
    return fd, st


def read_fd(fd: int, size: int) -> bytes:
    """All of an open file from its start (at least `size` bytes when there are), by offset: an O_APPEND
    descriptor's own position is left alone."""
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, max(size - offset, 1 << 16), offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_own(path: Path, what: str) -> tuple[bytes, os.stat_result]:
    """The bytes of the user's own regular file `path` (see open_own) and the fstat of what was read."""
    fd, st = open_own(path, os.O_RDONLY, what)
    try:
        return read_fd(fd, st.st_size), st
    finally:
        os.close(fd)
