"""A transcript's header line (line 1: `{"type":"session","id":…,"sessionKey":…}`, sessions/entries.py) read and
rewritten by key: the session key a transcript names (`header_key`: how an ended session of a key is found,
sessions/retraction.py; how the Slack key migration finds what to rename, channels/slack_migrate.py) and the key
renamed on its line 1 (`rename_header`), under the lock every append and scrub takes (sessions/scrub.py), by an
atomic replace: a kill leaves the old file or the new one.

One reading for both: the key is what `header_from_json` (the loader's own parse) finds — a line without its
`id` is no header to the loader, so it names no key to rename either.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from hermit.errors import SessionError
from hermit.sessions import scrub
from hermit.sessions.entries import header_from_json
from hermit.sessions.files import open_own, read_fd

PEEK = 4096  # read first: a header is a few hundred bytes
MAX_HEADER = 1 << 16  # read up to this much for a header line that is longer (a very long cwd)


def header_key(path: Path) -> str | None:
    """The session key on `path`'s line 1; None when it cannot be read or holds no header (or one with no key).
    Never through a link, never another user's file (sessions/files.open_own)."""
    try:
        fd, _ = open_own(path, os.O_RDONLY, "the transcript")
    except (OSError, SessionError):
        return None
    try:
        data = os.pread(fd, PEEK, 0)
        if b"\n" not in data and len(data) == PEEK:
            data = os.pread(fd, MAX_HEADER, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _key_of(data.split(b"\n", 1)[0])


def _key_of(line: bytes) -> str | None:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    header = header_from_json(obj) if isinstance(obj, dict) else None
    return header.session_key if header is not None else None


def rename_header(path: Path, renamed: Mapping[str, str]) -> bool:
    """When `path`'s line 1 names a key of `renamed`, that line names the key it maps to: the file replaced
    atomically while its append lock is held (an append waits, then writes to the new file). True when renamed;
    False when the line names no such key (changed since it was looked at). OSError/SessionError as the open,
    read or write raised them."""
    fd = scrub._open_locked(path)  # the lock every append and scrub takes; the name names what is locked
    try:
        data = read_fd(fd, os.fstat(fd).st_size)
        first, sep, rest = data.partition(b"\n")
        key = _key_of(first)
        if key is None or key not in renamed:
            return False
        obj = json.loads(first)
        obj["sessionKey"] = renamed[key]
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        scrub._replace(path, fd, line + sep + rest)
        return True
    finally:
        os.close(fd)
