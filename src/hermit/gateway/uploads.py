"""Files the web app sends (a photo from a phone's camera), one socket's at a time.

The page sends each file in pieces, `chat.upload` frames well under the frame limit (protocol.py), written as they
come to a file staged in `<state>/inbox/` as every channel stages one (channels/inbox.py: created exclusively,
0600, its (st_dev, st_ino) recorded); `chat.send {files: [uploadId…]}` then sends them with the message, and the
bus files them into the session's inbox, describes them and shows an image to a model that reads images
(gateway/attachments.py). What a file is goes by its first bytes (attachments.image_type), never by a type the
page claims; its name is the sender's, made safe. At most MAX_UPLOAD_FILES files of MAX_UPLOAD_BYTES in all are
pending on a socket; a file not sent is deleted: a piece refused takes every file of the socket not yet sent with
it (the page sends one message's files at a time, and sends them all again), and so does a message refused or a
socket closed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hermit.channels.base import Attachment
from hermit.channels.inbox import StagedFile, safe_name
from hermit.channels.webchat import WebchatChannel
from hermit.gateway.attachments import image_type
from hermit.gateway.protocol import MAX_UPLOAD_BYTES, MAX_UPLOAD_FILES, ProtocolError, UploadParams

HEAD = 16  # bytes enough to tell an image's type


@dataclass
class Upload:
    """One file being sent, staged: its safe name, its first bytes, whether its last piece came."""

    staged: StagedFile
    name: str
    head: bytes = b""
    done: bool = False

    def attachment(self) -> Attachment:
        kind = image_type(self.head)
        return self.staged.attachment("image" if kind else "document", self.name, kind)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.staged.file.close()
        self.staged.remove()


class Uploads:
    """The files one socket is sending, by upload id."""

    def __init__(self) -> None:
        self._pending: dict[str, Upload] = {}

    def piece(self, channel: WebchatChannel, client_id: str, params: UploadParams) -> dict[str, Any]:
        """chat.upload: one piece of a file, written where the last one ended (`offset`); the first names it."""
        try:
            data = base64.b64decode(params.data, validate=True)
        except (binascii.Error, ValueError):
            self.drop()
            raise ProtocolError("bad_params", "chat.upload: data is not base64",
                                "send the file's bytes as base64") from None
        upload = self._pending.get(params.upload_id)
        if upload is None:
            if params.offset != 0 or params.name is None:
                self.drop()
                raise ProtocolError("bad_params", f"chat.upload: no file {params.upload_id!r} is being sent",
                                    "start a file with offset 0 and its name")
            if len(self._pending) >= MAX_UPLOAD_FILES:
                self.drop()
                raise ProtocolError("too_many_files", f"at most {MAX_UPLOAD_FILES} files go with one message",
                                    "send this message, then the other files")
            upload = Upload(channel.stage(client_id, params.upload_id, params.name), safe_name(params.name))
            self._pending[params.upload_id] = upload
        if upload.done or params.offset != upload.staged.size:
            self.drop()
            raise ProtocolError("bad_params", f"chat.upload: {params.upload_id} does not go on at {params.offset:,}",
                                "send the file again from its start, under a new upload id")
        if sum(u.staged.size for u in self._pending.values()) + len(data) > MAX_UPLOAD_BYTES:
            self.drop()
            raise ProtocolError("too_large", f"the files of one message may have {MAX_UPLOAD_BYTES // 2**20} MB in "
                                "all", "send a smaller file (a photo as a phone shares it is a few MB)")
        try:
            upload.staged.write(data)
            upload.head = (upload.head + data[:HEAD])[:HEAD]
            if params.done:
                upload.staged.file.close()  # flushes: a full disk shows here
                upload.done = True
        except OSError:
            self.drop()
            raise
        if upload.done and upload.staged.size == 0:
            self.drop()
            raise ProtocolError("bad_params", "chat.upload: the file is empty", "pick another file")
        return {"uploadId": params.upload_id, "size": upload.staged.size, "done": upload.done}

    def take(self, ids: Iterable[str]) -> list[Upload]:
        """The finished uploads a chat.send names, no longer pending (the message has them now); ProtocolError
        (and all of them deleted) when one is not a finished upload of this socket."""
        wanted = list(ids)
        missing = [i for i in wanted if i not in self._pending or not self._pending[i].done]
        if missing or len(set(wanted)) != len(wanted):
            self.drop(wanted)
            raise ProtocolError("bad_params", f"chat.send: {(missing or wanted)[0]!r} is no file sent on this "
                                "connection", "send the file again (chat.upload), then the message")
        return [self._pending.pop(i) for i in wanted]

    def drop(self, ids: Iterable[str] | None = None) -> None:
        """Delete the staged files of these uploads (all of them: None), never sent."""
        for uid in list(self._pending) if ids is None else list(ids):
            upload = self._pending.pop(uid, None)
            if upload is not None:
                upload.remove()
