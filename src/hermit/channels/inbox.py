"""Staging received files under `<state>/inbox/`: a new file of its own for every download, created exclusively.

Every channel account saves into the one inbox, and the names platforms give are not unique there:
Telegram numbers messages per chat, two Discord bots in one channel get the same message id, and the
file name is the sender's choice. A name built from those alone let one download overwrite another
still waiting for admission, so the gateway filed the owner's DM document into a group's room, or
deleted another message's file with a refused one. A staged name carries the channel, account, chat
and message id plus random hex; the file is created with O_CREAT | O_EXCL | O_NOFOLLOW (never an
existing file, never through a link) and its (st_dev, st_ino) goes on the Attachment, so the gateway
files or deletes only the file this message staged (gateway/attachments.py). A download that fails
part-way leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from hermit.channels.base import Attachment, AttachmentKind

MAX_PART_CHARS = 40  # per id in the name (a WhatsApp message id is long); random hex keeps it unique anyway
MAX_NAME_BYTES = 100  # of the sender's file name, so the whole name stays under the 255-byte limit
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def safe_name(name: str) -> str:
    """The sender's file name as one harmless path component, its end (the extension) kept when cut."""
    safe = re.sub(r"[^\w.\-]+", "_", name).strip("._") or "file"
    while len(safe.encode()) > MAX_NAME_BYTES:
        safe = safe[1:]
    return safe.strip("._") or "file"


def _part(value: str) -> str:
    return re.sub(r"[^\w]+", "_", value)[-MAX_PART_CHARS:] or "_"


def sweep_staged(inbox: Path | None, channel: str, account_id: str) -> list[str]:
    """Delete the files a channel account staged that nothing will ask for again: a channel that does not replay
    (channels/base.py `replays`) calls it when it starts, before any message — what a gateway killed between a
    download and its filing left would otherwise wait in the state dir forever. Only regular files under this
    account's own prefix are removed (never a link, nor what it points at); one gateway runs on a state dir
    (its lock). Returns the names removed."""
    if inbox is None:
        return []
    try:
        names = os.listdir(inbox)
    except OSError:  # no inbox yet
        return []
    prefix = f"{_part(channel)}-{_part(account_id)}-"
    removed = []
    for name in names:
        if name.startswith(prefix):
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(inbox / name).st_mode):
                    os.unlink(inbox / name)
                    removed.append(name)
    return removed


def is_staged(a: Attachment, st: os.stat_result) -> bool:
    """Whether `st` (an fstat of the opened path, or an lstat of it) is the regular file `a` was staged as.
    An attachment that records no identity is never taken for one (fail closed)."""
    return (a.staged is not None and stat.S_ISREG(st.st_mode)
            and (st.st_dev, st.st_ino) == (int(a.staged[0]), int(a.staged[1])))


class StagedFile:
    """`with StagedFile(inbox, ("telegram", account, chat, message_id), name) as f: f.write(...)`; on an
    exception inside the block (or a failing close) the file is removed and the exception goes on."""

    def __init__(self, inbox: Path, parts: Sequence[str], name: str) -> None:
        inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
        inbox = inbox.resolve()
        prefix = "-".join(_part(p) for p in parts)
        for _ in range(8):
            path = inbox / f"{prefix}-{secrets.token_hex(8)}-{safe_name(name)}"
            try:
                fd = os.open(path, _CREATE, 0o600)
            except FileExistsError:
                continue
            break
        else:  # 64 random bits taken eight times running: something else is creating names here
            raise FileExistsError(f"could not create a new file in {inbox}")
        self.path = path
        self.file = os.fdopen(fd, "wb")
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self.size = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.size += len(data)

    def rewind(self) -> None:
        """Start the file over (a download retried from its start)."""
        self.file.seek(0)
        self.file.truncate()
        self.size = 0

    def attachment(self, kind: AttachmentKind, name: str | None, mime: str | None,
                   size: int | None = None) -> Attachment:
        return Attachment(kind, str(self.path), name, mime, self.size if size is None else size,
                          staged=self.identity)

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.file.close()  # flushes: a full disk shows here
        except BaseException:
            self.remove()
            raise
        if exc_type is not None:
            self.remove()

    def remove(self) -> None:
        """Delete the file if its name still holds it (nothing else ever is deleted under that name)."""
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self.identity:
                os.unlink(self.path)
