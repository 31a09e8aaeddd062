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
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermit.sessions.transcript import Entry, MessageEntry

MAX_TRANSCRIPTS = 32
MAX_IMAGES = 10_000

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

Version = tuple[int, int, int, int, int]  # device, inode, size, mtime_ns, ctime_ns


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


def index_photos(data: bytes, version: Version, session_key: str | None, entries: Sequence[Entry]) -> Photos:
    """Each user turn's photos in `entries` (parsed from `data`: a retracted or refused photo is no longer one),
    decoded and hashed once."""
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
