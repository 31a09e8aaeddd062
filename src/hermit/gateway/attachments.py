"""Files that came with a message: held in the state dir until the sender is let in, then filed where the
answering session works — the owner's workspace inbox for the main session, the room's inbox for anyone else.

Channels save a received photo or document before access control has run (the platform hands it over
with the message), so they save it under `<state>/inbox/`, owner-only and never indexed nor read as an
instruction. A refused message's files are deleted. An admitted one's are moved into `inbox/` of the
session's own place, so a stranger can never put a file among the owner's, and a contact's or a group's
file counts against its room's quota (rooms.py); one that does not fit is dropped and logged. Only the
file the channel staged for this message is filed or deleted: its (st_dev, st_ino), recorded on the
Attachment (channels/inbox.py), is checked on the opened descriptor, so a name that holds another file
by then (another account's download, a link) is left alone and nothing is filed for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import stat
from pathlib import Path

from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import Attachment, InboundMessage
from hermit.channels.inbox import is_staged
from hermit.durable import write_all
from hermit.errors import HermitError, WorkspaceError
from hermit.tools import safe_fs

log = logging.getLogger("hermit.gateway")


def discard(msg: InboundMessage) -> None:
    """Delete the files of a message that was not let in: the ones it staged, nothing else under their names."""
    for a in msg.attachments:
        if a.path:
            _remove_staged(a)


def file_for_session(msg: InboundMessage, runtime: AgentRuntime, session_key: str) -> InboundMessage:
    """Move the message's files into the answering session's inbox and return it with their new paths."""
    if not any(a.path for a in msg.attachments):
        return msg
    moved: list[Attachment] = []
    for a in msg.attachments:
        if not a.path:
            moved.append(a)
            continue
        src = Path(a.path)
        try:
            moved.append(dataclasses.replace(a, path=str(_file_one(a, runtime, session_key)), staged=None))
        except (OSError, HermitError) as e:
            log.warning("attachment %s of %s/%s not kept: %s", src.name, msg.channel, msg.sender_id, e)
            moved.append(dataclasses.replace(a, path="", staged=None))
        finally:
            _remove_staged(a)
    return dataclasses.replace(msg, attachments=tuple(moved))


_MIME = re.compile(r"[\w.+-]{1,64}/[\w.+-]{1,64}", re.ASCII)


def described(text: str, msg: InboundMessage) -> str:
    """The turn's text with a line per file that came with it, so the assistant knows it was sent and where it
    was filed (`inbox/<name>`, as the session's own tools name it) or that it could not be kept. What the
    platform says of a file is the sender's to choose: the name was made safe when it was staged (letters,
    digits, `._-`), a MIME type is shown only when it looks like one, the size is a number. The line is part of
    the sender's message (in a group it follows their sender line), in parentheses: a line of theirs starting
    with `[` is escaped there so that it cannot pass for a sender line, and this one need not be."""
    lines = []
    for a in msg.attachments:
        what = ", ".join([a.kind, *([a.mime] if a.mime and _MIME.fullmatch(a.mime) else []),
                          *([f"{a.size:,} bytes"] if a.size else [])])
        lines.append(f"(file received with this message: inbox/{Path(a.path).name} — {what})" if a.path
                     else f"(a file came with this message but could not be kept — {what})")
    return "\n".join([text, *lines]) if text else "\n".join(lines)


def _remove_staged(a: Attachment) -> None:
    """Unlink `a.path` only while it still names the file the channel staged for this message. An attachment
    that records no identity (staged before they were recorded: a Telegram journal entry from an older
    version) still has its regular file removed, since removing is never filing; it is never filed."""
    with contextlib.suppress(OSError):
        st = os.lstat(a.path)
        if is_staged(a, st) or (a.staged is None and stat.S_ISREG(st.st_mode)):
            os.unlink(a.path)


def _read_staged(a: Attachment) -> bytes:
    """The bytes of the file this message staged, read through a descriptor checked to be that file: a link,
    a FIFO or another message's file under the name is refused (channels/inbox.py)."""
    fd = os.open(a.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not is_staged(a, os.fstat(fd)):
            raise WorkspaceError(f"{Path(a.path).name} is not the file this message brought",
                                 "nothing to do: another file under its name was left alone")
        return f.read()


def _file_one(a: Attachment, runtime: AgentRuntime, session_key: str) -> Path:
    name = Path(a.path).name
    data = _read_staged(a)
    if not runtime.confinement.roomed(session_key):
        inbox = runtime.agent.workspace / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        dest = inbox / name
        # The owner's own folder. A new file (the staged name is unique), written from the checked
        # descriptor's bytes rather than renamed by name; removed again if the write fails part-way.
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, data)
        except BaseException:
            os.unlink(dest)
            raise
        finally:
            os.close(fd)
        return dest
    room = runtime.confinement.room(session_key)
    with room.locked() as fd:  # the room is only ever written through its descriptor (safe_fs)
        room.check_room_for(len(data) + 4096, fd)
        safe_fs.write_beneath(fd, f"inbox/{name}", data, mode=0o600)
    return room.path / "inbox" / name
