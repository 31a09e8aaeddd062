"""The record of memory files the index leaves out (binary, too large, a symlink, unreadable…), kept in its meta.

Without it, a listed file that could not be indexed looked to the stat-only dirty check like a change the
index had yet to catch up with: `memory status` said "dirty" for good, every search synced again and
repeated the warning. Recorded with the stat it was judged by, such a file is looked at again only when it
changes (or goes away): then it is indexed, or forgotten. Kept in the store's meta (one JSON value), so both
backends hold it alike and a rebuild's staging index starts without it (`--force` judges every file anew).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hermit.memory.index.sources import Skip, SourceFile
from hermit.memory.store.api import MemoryStore

META_KEY = "skipped_files"
Stamp = tuple[int, int, int]  # (mtime_ns, size, ctime_ns): ctime too, so a chmod that makes it readable counts


@dataclass(frozen=True)
class Skipped:
    skip: Skip
    # The file as it was judged; None: left out by its kind at listing (a symlink, a FIFO), never read.
    stamp: Stamp | None


def stamp(st: os.stat_result) -> Stamp:
    return (st.st_mtime_ns, st.st_size, st.st_ctime_ns)


def load(meta: Mapping[str, str]) -> dict[str, Skipped]:
    """The recorded skips by path; an unreadable record is no record (the next sync judges every file)."""
    try:
        rows = json.loads(meta.get(META_KEY) or "[]")
        return {str(r["path"]): Skipped(Skip(str(r["path"]), str(r["reason"]), str(r["fix"]), str(r["detail"])),
                                        _stamp(r.get("stamp"))) for r in rows}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def _stamp(raw: object) -> Stamp | None:
    if not raw:
        return None
    if not isinstance(raw, list) or len(raw) != 3:
        raise ValueError("a stamp is three integers")
    return (int(raw[0]), int(raw[1]), int(raw[2]))


def save(store: MemoryStore, now: Mapping[str, Skipped], before: Mapping[str, Skipped]) -> None:
    if dict(now) == dict(before):
        return  # the usual case: nothing written
    rows = [{"path": s.skip.path, "reason": s.skip.reason, "fix": s.skip.fix, "detail": s.skip.detail,
             "stamp": list(s.stamp) if s.stamp else None} for _, s in sorted(now.items())]
    store.set_meta({META_KEY: json.dumps(rows, ensure_ascii=False)})


def listing_changed(recorded: Mapping[str, Skipped], listed_skips: Iterable[Skip], files: Iterable[SourceFile]) -> bool:
    """Whether what the listing leaves out differs from the record (cheap: no stat); a recorded file that
    was read and judged is compared by its stat in the dirty check itself."""
    by_kind = {s.path: s for s in listed_skips}
    for path, s in by_kind.items():
        r = recorded.get(path)
        if r is None or r.stamp is not None or r.skip != s:
            return True
    listed = {f.rel for f in files}
    return any(path not in (by_kind if r.stamp is None else listed) for path, r in recorded.items())


def describe(skips: Iterable[Skip], limit: int = 3) -> str:
    """"memory/blob.md (looks binary), … and 4 more" for a one-line summary."""
    items = list(skips)
    out = ", ".join(f"{s.path} ({s.reason})" for s in items[:limit])
    if len(items) > limit:
        out += f" and {len(items) - limit:,} more (`hermit memory status` lists them)"
    return out
