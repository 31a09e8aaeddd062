"""Where each photo of a transcript is, by the SHA-256 of its bytes: chat.image in O(1) per photo.

chat.history (`imageRefs`) names a session's photos by hash and the page brings each with chat.image. Found by
reading the transcript whole, decoding and hashing every image of it, a session of N photos fetched one by one
cost N full passes (O(N²) bytes decoded). The history call and the first chat.image of a transcript version
already make that pass: they leave here, per transcript file, where each photo of a user turn is (the byte
offset and length of its line, the index of its part); a chat.image then reads that one line, decodes that one
image and checks its hash.

What makes an entry stale, and is then not used (the transcript is read again):
- a new version of the file: its device, inode, size, mtime and ctime (ns), taken from the descriptor the
  line is read from (`fstat`), so the line read is of the version indexed. An append (a turn, a `retracted`
  or `image-refused` entry that hides a photo) changes the size; a scrub (sessions/scrub.py) writes a new file
  renamed over the old (another inode, a new ctime); an edit in place that puts the size and mtime back still
  changes the ctime, which no user can set;
- a line that does not hold, at that place, a user message's image of that hash (checked each time).

Only where photos are is kept, never their bytes: at most MAX_TRANSCRIPTS transcripts and MAX_IMAGES photos in
all (about 250 bytes each — a hash and three numbers —, so 2.5 MiB at most), the least recently used dropped first;
a transcript of more photos than that is read whole each time, as before. Keyed by the
transcript's path (an agent's sessions folder and a session id), with the session key its header names: the
caller applies the same rule as when it reads the file (history.py), so a hash named under another session
finds nothing, and who may ask at all is decided before (webchat_api.py: the owner's own sessions only).

A photo the owner sent while the model answering read text only is no image part: the user turn records it only as
filed in the inbox of the session's place (messages.FiledFile): the workspace's, or — an owner's DM that is a
sandboxed session of its own (`dm_scope` per peer) — that session's room's. Such an upload is named too (`uploads`:
hash -> name, size and place, own_uploads says which count) and brought from <the session's inbox>/<name>
(upload_image), only when the caller's Inbox is of the place recorded: never through a link, only a regular file of
this user's still holding the very bytes filed (a room's commands may change its inbox), and no longer once its
message was deleted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hermit.gateway.attachments import MAX_IMAGE_BYTES, image_type
from hermit.sessions.entries import RETRACTED_TYPE
from hermit.sessions.transcript import CustomEntry, Entry, MessageEntry

MAX_TRANSCRIPTS = 32
MAX_IMAGES = 10_000

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

Version = tuple[int, int, int, int, int]  # device, inode, size, mtime_ns, ctime_ns
Place = Literal["workspace", "room"]


@dataclass(frozen=True, slots=True)
class Inbox:
    """Where an owner's session files what it is sent: the workspace's inbox/ (place "workspace") or, for a
    session that works in a room, that room's inbox/ (place "room"; the caller names the session's own room)."""

    place: Place
    folder: Path


def version_of(st: os.stat_result, size: int | None = None) -> Version:
    """A file's version; `size`: of the bytes read (an append after the fstat makes the next look differ)."""
    return (st.st_dev, st.st_ino, st.st_size if size is None else size, st.st_mtime_ns, st.st_ctime_ns)


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def drawable(message: Mapping[str, Any]) -> Iterator[tuple[int, dict[str, Any], bytes]]:
    """A stored message's images that a page may draw (JPEG, PNG, GIF or WebP): (part index, {mediaType, data},
    bytes)."""
    content = message.get("content")
    for n, part in enumerate(content if isinstance(content, list) else ()):
        image = _drawable_part(part)
        if image is not None:
            yield n, image[0], image[1]


def _drawable_part(part: Any) -> tuple[dict[str, Any], bytes] | None:
    if not isinstance(part, dict) or part.get("type") != "image":
        return None
    kind, data = part.get("mimeType"), part.get("data")
    if kind not in IMAGE_TYPES or not isinstance(data, str) or not data:
        return None
    try:  # strict: only the base64 alphabet, padded right (binascii.Error), ASCII (ValueError)
        return {"mediaType": kind, "data": data}, base64.b64decode(data, validate=True)
    except ValueError:  # not an image a page can draw
        return None


@dataclass(frozen=True, slots=True)
class Where:
    offset: int  # of the line, in bytes
    length: int  # of the line, without its newline
    part: int  # index in the message's content


@dataclass(frozen=True)
class Photos:
    """One version of one transcript: the session key its header names and where each photo of a user turn is;
    `named`, by line number, each user turn's photos as chat.history names them ({mediaType, sha256, size})."""

    version: Version
    session_key: str | None
    places: dict[str, Where]
    named: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    uploads: dict[str, tuple[str, int, Place]] = field(default_factory=dict)  # sha256 -> (name, size, place)


def index_photos(data: bytes, version: Version, session_key: str | None, entries: Sequence[Entry],
                 inbox: Inbox | None = None) -> Photos:
    """Each user turn's photos in `entries` (parsed from `data`: a retracted or refused photo is no longer one),
    decoded and hashed once; and the owner's own uploads its user turns recorded (own_uploads), named only
    with `inbox` (the session's own inbox, of the place they were filed in: that file's first bytes say its type)."""
    photos = _index_parts(data, version, session_key, entries)
    retracted = retracted_refs(entries)
    for entry in entries:
        if not isinstance(entry, MessageEntry):
            continue
        shown = {p["sha256"] for p in photos.named.get(entry.line, [])}
        for name, sha, size, place in own_uploads(entry.message, retracted):
            if sha in shown or sha in photos.places:
                continue  # the same bytes, attached for the model to see: named once, as the image part
            photos.uploads.setdefault(sha, (name, size, place))
            kind = None if inbox is None or inbox.place != place else upload_type(inbox.folder, name, size)
            if kind is not None:
                shown.add(sha)
                photos.named.setdefault(entry.line, []).append({"mediaType": kind, "sha256": sha, "size": size})
    return photos


def retracted_refs(entries: Sequence[Entry]) -> set[str]:
    """The refs of the messages their senders deleted (`retracted` entries)."""
    return {e.data["ref"] for e in entries if isinstance(e, CustomEntry) and e.custom_type == RETRACTED_TYPE
            and isinstance(e.data, dict) and isinstance(e.data.get("ref"), str)}


def own_uploads(message: Mapping[str, Any], retracted: set[str]) -> Iterator[tuple[str, str, int, Place]]:
    """(name, sha256, size, place) of each file a user turn of the owner's brought and the gateway filed in the
    inbox of the session's place (messages.FiledFile: "workspace", or "room" for an owner's session that works in
    a room; the caller serves only an owner's session, from that session's own inbox), of at most
    MAX_IMAGE_BYTES. None of a message its sender deleted, nor of one another person wrote (a `sender`
    that is not the owner's), nor a name that is not a plain name in inbox/."""
    if message.get("role") != "user" or (isinstance(message.get("ref"), str) and message["ref"] in retracted):
        return
    sender = message.get("sender")
    if sender is not None and not (isinstance(sender, dict) and sender.get("owner") is True):
        return
    files = message.get("files")
    for f in files if isinstance(files, list) else ():
        if not isinstance(f, dict) or f.get("place") not in ("workspace", "room"):
            continue
        name, sha, size, place = f.get("name"), f.get("sha256"), f.get("size"), f["place"]
        if (isinstance(name, str) and _plain(name) and isinstance(sha, str) and len(sha) == 64
                and isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_IMAGE_BYTES):
            yield name, sha, size, place


def _plain(name: str) -> bool:
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..")


def _open_upload(inbox: Path, name: str, size: int) -> int | None:
    """A descriptor of inbox/<name>, never through a link (neither `inbox` nor the name), only a regular file of
    this user's of the recorded size; None otherwise."""
    try:
        folder = os.open(inbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size != size:
        os.close(fd)
        return None
    return fd


def upload_type(inbox: Path, name: str, size: int) -> str | None:
    """The media type of an owner's upload by its first bytes (a JPEG, PNG, GIF or WebP), None when it is not
    one, or no longer the file filed (_open_upload)."""
    fd = _open_upload(inbox, name, size)
    if fd is None:
        return None
    try:
        return image_type(os.pread(fd, 16, 0))
    finally:
        os.close(fd)


def upload_image(inbox: Path, name: str, size: int, sha256: str) -> dict[str, Any] | None:
    """chat.image of an owner's upload: `{sha256, mediaType, data}` when inbox/<name> still holds an image of
    exactly the bytes filed (this hash), read through the checked descriptor; None otherwise."""
    fd = _open_upload(inbox, name, size)
    if fd is None:
        return None
    try:
        raw = os.pread(fd, size + 1, 0)
    finally:
        os.close(fd)
    kind = image_type(raw)
    if kind is None or len(raw) != size or digest(raw) != sha256:
        return None
    return {"sha256": sha256, "mediaType": kind, "data": base64.b64encode(raw).decode("ascii")}


def _index_parts(data: bytes, version: Version, session_key: str | None, entries: Sequence[Entry]) -> Photos:
    starts = _line_starts(data)
    places: dict[str, Where] = {}
    named: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        if not isinstance(entry, MessageEntry) or entry.message.get("role") != "user":
            continue
        for n, image, raw in drawable(entry.message):
            sha = digest(raw)
            named.setdefault(entry.line, []).append({"mediaType": image["mediaType"], "sha256": sha, "size": len(raw)})
            if entry.line <= len(starts) and sha not in places:
                start = starts[entry.line - 1]
                end = data.find(b"\n", start)
                places[sha] = Where(start, (len(data) if end < 0 else end) - start, n)
    return Photos(version, session_key, places, named)


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    at = data.find(b"\n")
    while at >= 0:
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts


def photo_at(line: bytes, where: Where, sha256: str) -> dict[str, Any] | None:
    """The photo `where` names, if `line` (read from there) holds a user turn's image of this hash at that part."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    message = obj.get("message") if isinstance(obj, dict) else None
    if not isinstance(message, dict) or message.get("role") != "user":
        return None
    content = message.get("content")
    if not isinstance(content, list) or where.part >= len(content):
        return None
    image = _drawable_part(content[where.part])
    if image is None or digest(image[1]) != sha256:
        return None
    return {"sha256": sha256, **image[0]}


class PhotoIndex:
    """The gateway's photo places, per transcript path (see the module). Thread-safe: chat.image and
    chat.history run in worker threads."""

    def __init__(self, max_transcripts: int = MAX_TRANSCRIPTS, max_images: int = MAX_IMAGES) -> None:
        self.max_transcripts = max_transcripts
        self.max_images = max_images
        self._kept: OrderedDict[Path, Photos] = OrderedDict()
        self._images = 0
        self._lock = threading.Lock()

    def get(self, path: Path, version: Version) -> Photos | None:
        with self._lock:
            photos = self._kept.get(path)
            if photos is None or photos.version != version:
                return None
            self._kept.move_to_end(path)
            return photos

    def put(self, path: Path, photos: Photos) -> None:
        with self._lock:
            old = self._kept.pop(path, None)
            if old is not None:
                self._images -= len(old.places)
            if len(photos.places) > self.max_images:
                return  # one transcript past the whole bound: read each time, as before
            self._kept[path] = photos
            self._images += len(photos.places)
            while len(self._kept) > self.max_transcripts or self._images > self.max_images:
                _, dropped = self._kept.popitem(last=False)
                self._images -= len(dropped.places)

    def size(self) -> tuple[int, int]:
        """(transcripts, photos) kept."""
        with self._lock:
            return len(self._kept), self._images
