"""Files that came with a message: held in the state dir until the sender is let in, then filed where the
answering session works — the owner's workspace inbox for the main session, the room's inbox for anyone else.

Channels save a received photo or document before access control has run (the platform hands it over
with the message), so they save it under `<state>/inbox/`, owner-only and never indexed nor read as an
instruction. A refused message's files are deleted. An admitted one's are moved into `inbox/` of the
session's own place, so a stranger can never put a file among the owner's, and a contact's or a group's
file counts against its room's quota (rooms.py); one that does not fit is dropped and logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from pathlib import Path

from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import Attachment, InboundMessage
from hermit.errors import HermitError
from hermit.tools import safe_fs

log = logging.getLogger("hermit.gateway")


def discard(msg: InboundMessage) -> None:
    """Delete the files of a message that was not let in."""
    for a in msg.attachments:
        if a.path:
            with contextlib.suppress(OSError):
                os.unlink(a.path)


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
            moved.append(dataclasses.replace(a, path=str(_file_one(src, runtime, session_key))))
        except (OSError, HermitError) as e:
            log.warning("attachment %s of %s/%s not kept: %s", src.name, msg.channel, msg.sender_id, e)
            moved.append(dataclasses.replace(a, path=""))
        finally:
            with contextlib.suppress(OSError):
                src.unlink()
    return dataclasses.replace(msg, attachments=tuple(moved))


def _file_one(src: Path, runtime: AgentRuntime, session_key: str) -> Path:
    if not runtime.confinement.roomed(session_key):
        inbox = runtime.agent.workspace / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        dest = inbox / src.name
        shutil.move(src, dest)  # the owner's own folder: a rename where both are on one filesystem
        return dest
    room = runtime.confinement.room(session_key)
    data = src.read_bytes()
    with room.locked() as fd:  # the room is only ever written through its descriptor (safe_fs)
        room.check_room_for(len(data) + 4096, fd)
        safe_fs.write_beneath(fd, f"inbox/{src.name}", data, mode=0o600)
    return room.path / "inbox" / src.name
