"""The gateway's records in the state dir, read so that damage fails closed.

Three records decide, across restarts, who may read what: `<state>/channels/owner-routes.json` (which agent each
channel owner, contact and group reached), `<state>/credentials/accounts.json` (which bot each channel account is,
for the approvals it gave) and `<state>/agents/workspaces.json` (which workspace each agent id used). Each only ever
adds a refusal, so a record that cannot be trusted must not read as "no record": that would turn its check off.
`read` answers the record's bytes, None when there is none (its folder or the file missing), or raises
UntrustedRecord naming the file: a folder that is a symlink or not this user's (t11 s22: a planted
`<state>/channels` link was followed to another user's folder), a file that is a symlink, not a regular file, not
this user's, or too large. The caller raises it too for text that is not what it writes (truncated by a crash,
edited into something else). Writes go through durable.write_atomic, so a kill mid-write leaves the old record or the
new one, never a piece.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hermit.errors import ConfigError

MAX_BYTES = 4_000_000
ACCEPT = "hermit channels accept-routes"


class UntrustedRecord(ConfigError):
    """A record is there but is not what Hermit writes (or its folder is not the user's own)."""


def untrusted(path: Path, what: str, why: str, how: str | None = None) -> UntrustedRecord:
    """The refusal for a record `path` (`what` it records) that cannot be trusted `why`; `how`: the way out."""
    return UntrustedRecord(f"{what}, {path}, {why}",
                           f"if you did not expect this, look at who could write {path.parent}; " + (how or (
                               f"to record hermit.yaml as it is after checking it, run `{ACCEPT}` and start the "
                               "gateway again")))


def read(path: Path, what: str, how: str | None = None) -> bytes | None:
    """The record's bytes; None when neither it nor its folder exists; UntrustedRecord (see the module)."""
    def bad(why: str) -> UntrustedRecord:
        return untrusted(path, what, why, how)

    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        link = e.errno in (errno.ELOOP, errno.ENOTDIR) and path.parent.is_symlink()
        raise bad(f"cannot be opened: its folder is {'a symlink' if link else e.strerror}") from None
    try:
        if (uid := os.fstat(dfd).st_uid) != os.geteuid():
            raise bad(f"cannot be trusted: its folder belongs to uid {uid}, not to you")
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise bad(f"cannot be opened ({'a symlink' if e.errno == errno.ELOOP else e.strerror})") from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise bad("is not a file")
        if st.st_uid != os.geteuid():
            raise bad(f"belongs to uid {st.st_uid}, not to you")
        if st.st_size > MAX_BYTES:
            raise bad(f"is {st.st_size} bytes")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            if sum(map(len, chunks)) > MAX_BYTES:
                raise bad(f"is over {MAX_BYTES} bytes")
        return b"".join(chunks)
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def folder_is_link(path: Path) -> bool:
    """Whether the record's folder is a symlink (refused before writing: the write would land where it points)."""
    return path.parent.is_symlink()
