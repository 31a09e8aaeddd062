"""The audience cache knows a file by its identity and change time, not by path, mtime and size: a memory file
replaced by another of the same size and mtime (renamed over it, its mtime set back) is read again, so the
new file's audience is the one applied to its lines."""

from __future__ import annotations

import os
from pathlib import Path

from hermit.memory.policy.audience import OWNER, Reader
from hermit.memory.policy.audience_map import AudienceMap
from hermit.memory.policy.provenance import CLOSE_LINE, Origin, open_line
from hermit.memory.store.api import ChunkRow

CONTACT = Reader("telegram:dm:42")
SECRET = "The door code is 4711."
LATER = 1 << 62  # a clock long after every file's stamps: every read is old enough to cache


def _note(origin: Origin, size: int | None = None) -> bytes:
    """SECRET on line 2 inside `origin`'s block, padded on line 4 to `size` bytes."""
    text = f"{open_line(origin)}\n{SECRET}\n{CLOSE_LINE}\n"
    pad = 0 if size is None else size - len(text.encode()) - 1
    assert pad >= 0
    return (text + "x" * pad + "\n").encode()


def _replace_alike(path: Path, data: bytes) -> None:
    """Put another file with `data` at `path` by rename, with the old file's mtime: size and mtime as before."""
    old = path.stat()
    assert len(data) == old.st_size
    tmp = path.with_name(".replacement")
    tmp.write_bytes(data)
    os.utime(tmp, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.rename(tmp, path)
    new = path.stat()
    assert (new.st_size, new.st_mtime_ns) == (old.st_size, old.st_mtime_ns) and new.st_ino != old.st_ino


def test_a_same_size_same_mtime_replacement_is_read_again(tmp_path: Path) -> None:
    note = tmp_path / "memory" / "notes.md"
    note.parent.mkdir()
    contacts = _note(Origin("agent:main:telegram:dm:42", audience="telegram:dm:42"), 200)
    owners = _note(Origin("agent:main:main", audience=OWNER), 200)
    note.write_bytes(contacts)
    row = {1: ChunkRow(1, "memory/notes.md", "memory", 2, 2, SECRET)}
    hit = {"source": "memory", "path": "memory/notes.md", "startLine": 2, "endLine": 2, "snippet": SECRET}
    audiences = AudienceMap(tmp_path, clock=lambda: LATER)

    assert audiences.visible_ids(row, CONTACT) == {1}  # the contact's own note
    assert audiences.annotate([hit], 700)[0]["audience"] == "telegram:dm:42"
    assert audiences.reads == 1  # read once, then served from the cache

    _replace_alike(note, owners)
    assert audiences.visible_ids(row, CONTACT) == set()  # the same line is the owner's now
    shown = audiences.annotate([hit], 700)[0]
    assert shown["audience"] == OWNER and "origin" not in shown
    assert audiences.reads == 2


def test_a_file_changed_just_now_is_not_cached(tmp_path: Path) -> None:
    """A change in the same tick of the kernel's clock as the read leaves every stamp as it was: a file that
    recent is read again each time until it is older (RACY_NS)."""
    note = tmp_path / "memory" / "notes.md"
    note.parent.mkdir()
    note.write_bytes(_note(Origin("agent:main:telegram:dm:42", audience="telegram:dm:42")))
    changed = note.stat().st_ctime_ns
    audiences = AudienceMap(tmp_path, clock=lambda: changed)  # read in the tick the file was written
    row = {1: ChunkRow(1, "memory/notes.md", "memory", 2, 2, SECRET)}
    assert audiences.visible_ids(row, CONTACT) == {1}
    assert audiences.visible_ids(row, CONTACT) == {1}
    assert audiences.reads == 2
