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

A photo is also shown to the model when the model reads images (ModelProfile.supports_images): a file whose
content is a JPEG, PNG, GIF or WebP image — by its first bytes, never by the type the sender's platform
claims — of at most MAX_IMAGE_BYTES and MAX_IMAGE_SIDE pixels a side by its header, at most MAX_IMAGES of one
message, is attached to the turn's user
message as an ImagePart, from the very bytes that were filed (never read again by name: a room's inbox is
its sandboxed commands' to change). Its line still names the file in inbox/ and says whether it is attached,
and why not: too big, too many pixels, too many, not such an image, or a model that reads text only. An image is
sent again with every later request of its session, so one the provider refuses (Anthropic: over 8000 px a side;
a few bytes of PNG or GIF declaring a huge picture) would have each later turn of the session refused until
/new: any group member could stop the group's assistant with one file. In a group the image is
part of its sender's message, framed by their sender line like their text (agent/speakers.py).

The turn records each filed file with its message (messages.FiledFile: name, place, SHA-256 and size of the
bytes filed), so that when its sender deletes the message the file goes too (`remove_filed`): exactly that
name, only while it still holds those bytes, without following a link, a room's under the room's lock.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import hashlib
import logging
import os
import re
import stat
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import Attachment, InboundMessage
from hermit.channels.inbox import is_staged
from hermit.errors import HermitError, WorkspaceError
from hermit.messages import FiledFile, ImagePart
from hermit.tools import safe_fs

log = logging.getLogger("hermit.gateway")


def discard(msg: InboundMessage) -> None:
    """Delete the files of a message that was not let in: the ones it staged, nothing else under their names."""
    for a in msg.attachments:
        if a.path:
            _remove_staged(a)


# 3.75 MiB: 5 MiB as base64, the most Anthropic takes of one image (OpenAI takes 20 MB); a phone's photo
# as Telegram, Discord or WhatsApp send it is a few hundred kB. Every image is sent again with each later
# request of the session (models/base.py keeps the newest within a request's limits).
MAX_IMAGE_BYTES = 3_932_160
MAX_IMAGES = 4
MAX_IMAGE_SIDE = 8000  # pixels, either side: Anthropic refuses a request holding a larger image



def image_type(data: bytes) -> str | None:
    """The media type of an image a model reads, by its first bytes; None for anything else."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header (SOFn), walking the segments before it; None if not found."""
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if length < 2 or marker == 0xDA:  # a broken segment, or the scan before any frame header
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if i + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def image_size(data: bytes, media_type: str | None) -> tuple[int, int] | None:
    """The (width, height) an image's header declares, without decoding it; None when its header says nothing
    readable (then the provider judges it)."""
    if media_type == "image/png" and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return w, h
    if media_type == "image/gif" and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return w, h
    if media_type == "image/jpeg":
        return _jpeg_size(data)
    if media_type == "image/webp" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
            w, h = struct.unpack("<HH", data[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if chunk == b"VP8L" and data[20] == 0x2F:
            (bits,) = struct.unpack("<I", data[21:25])
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if chunk == b"VP8X":
            return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def unsendable(data: bytes, media_type: str | None) -> str | None:
    """Why an image a model reads by its type would be refused by the provider for its size in pixels (one
    such image in a session's history has every later request refused), None when it would not."""
    size = image_size(data, media_type)
    if size is None:
        return None
    width, height = size
    if not width or not height:
        return "its header says it is 0 pixels wide or high"
    if max(width, height) > MAX_IMAGE_SIDE:
        return f"{width:,} × {height:,} pixels, over the {MAX_IMAGE_SIDE:,} a side an image may have"
    return None


@dataclasses.dataclass(frozen=True)
class Look:
    """What filing saw of one file: its image type (None: not an image a model reads), its size, and its
    bytes when it is such an image within MAX_IMAGE_BYTES and MAX_IMAGE_SIDE (`refused`: why not, when its
    pixels are the reason)."""

    media_type: str | None = None
    size: int = 0
    data: bytes | None = None
    refused: str | None = None
    sha256: str = ""  # of the bytes filed: what a delete of the message checks before it removes the file


def file_for_session(msg: InboundMessage, runtime: AgentRuntime, session_key: str) -> InboundMessage:
    """Move the message's files into the answering session's inbox and return it with their new paths."""
    return filed(msg, runtime, session_key)[0]


def filed(msg: InboundMessage, runtime: AgentRuntime, session_key: str) -> tuple[InboundMessage, tuple[Look, ...]]:
    """`file_for_session`, and a Look at each file's content, from the bytes filed."""
    if not any(a.path for a in msg.attachments):
        return msg, tuple(Look() for _ in msg.attachments)
    moved: list[Attachment] = []
    looks: list[Look] = []
    for a in msg.attachments:
        if not a.path:
            moved.append(a)
            looks.append(Look())
            continue
        src = Path(a.path)
        try:
            dest, data = _file_one(a, runtime, session_key)
            moved.append(dataclasses.replace(a, path=str(dest), staged=None))
            kind = image_type(data)
            why = unsendable(data, kind) if kind and len(data) <= MAX_IMAGE_BYTES else None
            looks.append(Look(kind, len(data), data if kind and len(data) <= MAX_IMAGE_BYTES and not why else None,
                              why, hashlib.sha256(data).hexdigest()))
        except (OSError, HermitError) as e:
            log.warning("attachment %s of %s/%s not kept: %s", src.name, msg.channel, msg.sender_id, e)
            moved.append(dataclasses.replace(a, path="", staged=None))
            looks.append(Look())
        finally:
            _remove_staged(a)
    return dataclasses.replace(msg, attachments=tuple(moved)), tuple(looks)


def for_model(text: str, msg: InboundMessage, looks: tuple[Look, ...], *,
              reads_images: bool) -> tuple[str, tuple[ImagePart, ...]]:
    """The turn's text (`described`, each image's line saying whether it is attached and why not) and the
    images attached to it: those a model that reads images is shown."""
    images: list[ImagePart] = []
    notes: list[str] = []
    for a, look in zip(msg.attachments, looks, strict=True):
        if not a.path or look.media_type is None:
            notes.append("; not attached for you to see: not a JPEG, PNG, GIF or WebP image"
                         if a.path and a.kind == "image" else "")
        elif not reads_images:
            notes.append("; you cannot see it: the model answering reads text only")
        elif look.refused is not None:
            notes.append(f"; not attached for you to see: {look.refused}")
        elif look.data is None:
            notes.append(f"; not attached for you to see: over the {MAX_IMAGE_BYTES / 2**20:.2f} MiB an image "
                         "may have")
        elif len(images) >= MAX_IMAGES:
            notes.append(f"; not attached for you to see: at most {MAX_IMAGES} images of a message are")
        else:
            images.append(ImagePart(look.media_type, base64.b64encode(look.data).decode("ascii")))
            notes.append(f"; attached for you to see ({look.media_type})")
    return described(text, msg, notes), tuple(images)


_MIME = re.compile(r"[\w.+-]{1,64}/[\w.+-]{1,64}", re.ASCII)


def described(text: str, msg: InboundMessage, notes: tuple[str, ...] | list[str] = ()) -> str:
    """The turn's text with a line per file that came with it, so the assistant knows it was sent and where it
    was filed (`inbox/<name>`, as the session's own tools name it) or that it could not be kept. What the
    platform says of a file is the sender's to choose: the name was made safe when it was staged (letters,
    digits, `._-`), a MIME type is shown only when it looks like one, the size is a number. The line is part of
    the sender's message (in a group it follows their sender line), in parentheses: a line of theirs starting
    with `[` is escaped there so that it cannot pass for a sender line, and this one need not be. `notes`
    (Hermit's own words, one per file) end the lines: whether an image is attached (`for_model`)."""
    lines = []
    for i, a in enumerate(msg.attachments):
        what = ", ".join([a.kind, *([a.mime] if a.mime and _MIME.fullmatch(a.mime) else []),
                          *([f"{a.size:,} bytes"] if a.size else [])]) + (notes[i] if i < len(notes) else "")
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


def _file_one(a: Attachment, runtime: AgentRuntime, session_key: str) -> tuple[Path, bytes]:
    name = Path(a.path).name
    data = _read_staged(a)
    if not runtime.confinement.roomed(session_key):
        inbox = runtime.agent.workspace / "inbox"
        inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The owner's own folder, written from the checked descriptor's bytes rather than renamed by name, and
        # atomically (a temporary file renamed into place): a process killed part-way leaves no half file under
        # the name the assistant is told, and the message handed over again (Telegram's journal) files it whole.
        # Owner-only even in a workspace others may read: the names say who sent what (an older one is tightened).
        # Never through a link: a sandboxed command (sandbox.mode: all) can make `inbox` one, and a Hermit killed
        # while it ran left it there; followed, the sender's bytes went wherever it pointed (as root, /etc/cron.d).
        try:
            fd = os.open(inbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and inbox.is_symlink():
                raise WorkspaceError(f"{inbox} is a link, not a folder: received files are never filed through one",
                                     f"look at where it points, then remove it (rm {inbox}); the folder is made "
                                     "again for the next file") from None
            raise
        try:
            st = os.fstat(fd)
            if st.st_uid == os.geteuid() and st.st_mode & 0o077:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700)
            safe_fs.write_beneath(fd, name, data, mode=0o600)
        finally:
            os.close(fd)
        return inbox / name, data
    room = runtime.confinement.room(session_key)
    with room.locked() as fd:  # the room is only ever written through its descriptor (safe_fs)
        room.check_room_for(len(data) + 4096, fd)
        safe_fs.write_beneath(fd, f"inbox/{name}", data, mode=0o600)
    return room.path / "inbox" / name, data


def filed_files(msg: InboundMessage, looks: tuple[Look, ...], roomed: bool) -> tuple[FiledFile, ...]:
    """What the turn records of the files filed (`filed`), for a delete of the message to remove them."""
    place: Literal["workspace", "room"] = "room" if roomed else "workspace"
    return tuple(FiledFile(Path(a.path).name, place, look.sha256, look.size)
                 for a, look in zip(msg.attachments, looks, strict=True) if a.path and look.sha256)


def remove_filed(runtime: AgentRuntime, session_key: str, files: Sequence[FiledFile]) -> None:
    """Delete the files a message its sender deleted brought: each `inbox/<name>` only while it is a regular file
    holding the very bytes filed (a room's sandboxed command may have put something else under the name: then it
    is left, and logged), never through a link; a room's under the room's lock, through its descriptor."""
    rooms = [f for f in files if f.place == "room"]
    own = [f for f in files if f.place == "workspace"]
    if own:
        try:
            fd = os.open(runtime.agent.workspace / "inbox", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            log.info("the files of a deleted message are not in the owner's inbox: %s", e)
        else:
            try:
                for f in own:
                    _remove_one(fd, f)
            finally:
                os.close(fd)
    if rooms:
        room = runtime.confinement.room(session_key)
        try:
            with room.locked() as root:
                fd = safe_fs.open_dir(root, "inbox", listing=True)
                try:
                    for f in rooms:
                        _remove_one(fd, f)
                finally:
                    os.close(fd)
        except (OSError, HermitError) as e:
            log.info("the files of a deleted message are not in the room's inbox: %s", e)


def _remove_one(inbox: int, f: FiledFile) -> None:
    if not f.name or "/" in f.name or f.name in (".", ".."):
        return
    try:
        fd = os.open(f.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=inbox)
    except FileNotFoundError:
        return  # already gone
    except OSError as e:  # a link (ELOOP) or anything else under the name: not the file filed
        log.warning("inbox/%s of a deleted message left: it is no longer the file filed (%s)", f.name, e)
        return
    try:
        st = os.fstat(fd)
        same = stat.S_ISREG(st.st_mode) and st.st_size == f.size and _digest(fd) == f.sha256
    finally:
        os.close(fd)
    if not same:
        log.warning("inbox/%s of a deleted message left: another file is under its name now", f.name)
        return
    try:
        os.unlink(f.name, dir_fd=inbox)
    except OSError as e:
        log.warning("inbox/%s of a deleted message could not be deleted: %s", f.name, e)
        return
    log.info("inbox/%s deleted: the message that brought it was deleted by its sender", f.name)


def _digest(fd: int) -> str:
    h = hashlib.sha256()
    while block := os.read(fd, 1 << 20):
        h.update(block)
    return h.hexdigest()
