"""Which indexed memory chunks a reader may see, and the labels of search results: `AudienceMap`.

It reads a workspace's memory files for the audience rules of memory/policy/audience.py (origin blocks, owner-only
files, MEMORY.md by identity, hard links) and caches each by path and `file_stamp` (identity, change time, mtime,
size); a file changed within audience.RACY_NS of the read is read again next time. A chunk is visible only when
it is still the file's text at its lines (a stale index fails closed). Split from audience.py, which keeps the
rules themselves, `visible_text` and `memory_view`.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from hermit.memory.index.chunking import MARKER, index_lines
from hermit.memory.policy.audience import (
    DEFAULT_MAX_FILE_BYTES,
    OWNER,
    RACY_NS,
    SHARED,
    Reader,
    block_audience,
    default_audience,
    is_private_path,
    narrowest,
    read_audiences,
)
from hermit.memory.policy.privacy import file_identity
from hermit.memory.policy.provenance import (
    Origin,
    OriginBlock,
    damaged_origin,
    defuse_labels,
    marker_damage,
    origin_blocks,
)
from hermit.memory.store.api import ChunkRow
from hermit.sessions.keys import is_main_session_key
from hermit.textfile import decode_text, read_regular_stat
from hermit.workspace import MEMORY_FILE


def file_stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What says a cached read of a file is still that file as it is: its identity (device, inode) — a file
    renamed over it is another file, whatever its size and mtime — and its change time, which no user can
    set (utime sets mtime, not ctime), with mtime and size."""
    return (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns, st.st_size)


@dataclass
class _File:
    """One memory file as read for audience decisions (cached by identity and change time: file_stamp)."""

    rel: str
    text: str
    withheld: bool  # MEMORY.md by identity, or hard-linked: never for a non-owner
    blocks: list[OriginBlock] = field(default_factory=list)
    damage: str | None = None  # marker_damage: every line owner-only to read and nobody's known words

    @cached_property
    def audiences(self) -> list[str]:
        return read_audiences(self.text, self.rel, self.blocks)

    @cached_property
    def lines(self) -> list[str]:
        return index_lines(self.text)

    def span_audience(self, start: int, end: int) -> str:
        if default_audience(self.rel) == OWNER:
            return OWNER
        if self.damage is not None:
            return OWNER
        if not self.blocks:
            return SHARED
        return narrowest(set(self.audiences[max(0, start - 1):max(start, end)]))

    def others_block(self, start: int, end: int) -> Origin | None:
        """The origin of the first block of another writer than the owner's main session that lines
        start..end overlap (the owner's own notes need no label); in a file whose markers are damaged, a
        stand-in saying so for any lines (whose they are cannot be told)."""
        if self.damage is not None:
            return damaged_origin(self.damage)
        for b in self.blocks:
            if b.start <= end and start <= b.end:
                if block_audience(b.origin) == OWNER and is_main_session_key(b.origin.session):
                    continue
                return b.origin
        return None


Stamp = tuple[int, int, int, int, int]


class AudienceMap:
    """Audiences of a workspace's memory files, read from the files when asked and cached by path and
    file_stamp (identity, change time, mtime, size): which indexed chunks a reader may see, and the labels
    of search results. `clock` (ns, the wall clock) decides which reads are too recent to cache (RACY_NS)."""

    def __init__(self, workspace: Path, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, cache_size: int = 512,
                 cache_bytes: int = 64_000_000, *, clock: Callable[[], int] = time.time_ns) -> None:
        self.workspace = workspace
        self.max_file_bytes = max_file_bytes
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes  # files are kept as text: bound what the cache holds
        self.clock = clock
        self._cache: dict[str, tuple[Stamp, _File | None]] = {}
        self._held = 0
        self.reads = 0  # files read (not served from the cache)

    def _abs(self, rel: str) -> str:
        return rel if os.path.isabs(rel) else os.path.join(self.workspace, rel)

    def file(self, rel: str) -> _File | None:
        """The file behind an indexed path; None when it is gone, not a regular file or unreadable."""
        path = self._abs(rel)
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None  # a symlink or something worse: never memory
        hit = self._cache.get(path)
        if hit is not None and hit[0] == file_stamp(st):
            return hit[1]
        self._forget(path)
        started = self.clock()
        read = self._read(rel, path)
        if read is None:
            return None  # gone, replaced by a symlink or unreadable meanwhile: nothing to keep
        loaded, st = read  # the stamp of what was read (its descriptor's), whatever the name names by now
        if max(st.st_ctime_ns, st.st_mtime_ns) + RACY_NS > started:
            return loaded  # changed too recently for its stamp to tell the next change from it
        while self._cache and (len(self._cache) >= self.cache_size or self._held + st.st_size > self.cache_bytes):
            self._forget(next(iter(self._cache)))
        self._cache[path] = (file_stamp(st), loaded)
        self._held += st.st_size
        return loaded

    def _forget(self, path: str) -> None:
        gone = self._cache.pop(path, None)
        if gone is not None and gone[1] is not None:
            self._held -= gone[0][4]

    def _read(self, rel: str, path: str) -> tuple[_File, os.stat_result] | None:
        self.reads += 1
        try:
            data, st = read_regular_stat(path, self.max_file_bytes, follow=False)
        except OSError:
            return None
        text = decode_text(data).text
        memory = file_identity(self.workspace / MEMORY_FILE)
        withheld = st.st_nlink > 1 or (memory is not None and memory == (st.st_dev, st.st_ino))
        damage = None if default_audience(rel) == OWNER else marker_damage(text)
        return _File(rel, text, withheld, origin_blocks(text) if MARKER in text else [], damage), st

    def visible_ids(self, rows: Mapping[int, ChunkRow], reader: Reader) -> set[int]:
        """The chunks `reader` may see: memory (not transcripts), not an owner-only or withheld file,
        the chunk still the file's text at its lines (a stale index fails closed), every line visible."""
        if reader.owner:
            return set(rows)
        keep: set[int] = set()
        for cid, row in rows.items():
            if row.source != "memory" or is_private_path(row.path):
                continue
            f = self.file(row.path)
            if f is None or f.withheld or not 1 <= row.start_line <= row.end_line <= len(f.lines):
                continue
            if row.start_line == row.end_line:
                current = row.text in f.lines[row.start_line - 1]  # a piece of one long line, or the line
            else:
                current = row.text == "\n".join(f.lines[row.start_line - 1:row.end_line])
            if current and all(reader.can_see(a) for a in f.audiences[row.start_line - 1:row.end_line]):
                keep.add(cid)
        return keep

    def annotate(self, results: list[dict[str, Any]], snippet_cap: int,
                 transcripts: Callable[[str], Origin | None] | None = None) -> list[dict[str, Any]]:
        """Search results with their `audience` (owner | shared | a chat's key: who may see the whole
        snippet), and with `origin` and a snippet prefix saying so on hits from others' notes, and on
        hits from transcripts of other chats than the main session (`transcripts`: a transcript's path
        → its origin, None for the main session's)."""
        out = []
        for r in results:
            if r.get("source") != "memory":
                labelled = {**r, "audience": OWNER}  # transcripts are owner-only
                # …but only the main session's user turns are the owner's words: label the others'.
                origin = transcripts(str(r.get("path", ""))) if transcripts is not None else None
                if origin is not None:  # its "User (chat)" lines are Hermit's: only a "[written from" is not
                    labelled["origin"] = origin.to_dict()
                    body = defuse_labels(str(r.get("snippet", "")), speakers=False)
                    labelled["snippet"] = f"[{origin.describe()}] {body}"[:snippet_cap]
                out.append(labelled)
                continue
            path = str(r.get("path", ""))
            a, b = int(r.get("startLine", 0)), int(r.get("endLine", 0))
            f = self.file(path)
            if f is None:
                out.append({**r, "audience": default_audience(path)})
                continue
            labelled = {**r, "audience": OWNER if f.withheld else f.span_audience(a, b)}
            origin = f.others_block(a, b)
            if origin is not None:  # only the label in front is Hermit's, whatever the note says (and said)
                labelled["origin"] = origin.to_dict()
                labelled["snippet"] = f"[{origin.describe()}] {defuse_labels(str(r.get('snippet', '')))}"[:snippet_cap]
            out.append(labelled)
        return out
