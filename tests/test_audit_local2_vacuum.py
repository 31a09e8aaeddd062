"""Audit of the local side, round 2: the one-time VACUUM of an older index (memory/store/residue.py).

VACUUM builds the new file in a temporary database, which SQLite writes — past its page cache, a couple of MB —
to a file of its own in /var/tmp (or $SQLITE_TMPDIR, $TMPDIR, /tmp): a whole copy of the index (the notes' and
MEMORY.md's text, their vectors) written outside the state dir, to another file system perhaps (an unencrypted
root disk beside an encrypted home), whose freed blocks keep it after the file is gone; and the room check
looked at Python's temp dir (/tmp first), not SQLite's. The temporary database is now kept in memory for that
one VACUUM: nothing of the index is written anywhere but its own folder.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
from pathlib import Path

from hermit.memory.store.residue import VACUUM_KEY
from hermit.memory.store.sqlite import IndexStore
from prochelpers import PROC_TIMEOUT

IN_CREATE = 0x100
GONE = "the clinic's door code is 4111-9932"

OPEN = r"""
import sys
from pathlib import Path
from hermit.memory.store.sqlite import IndexStore
IndexStore(Path(sys.argv[1]), want_vec=False).close()
"""


def _watch_creations(folder: Path) -> int:
    """An inotify descriptor told of every name created in `folder` (read with _names)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, ctypes.get_errno()
    assert libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE) >= 0, ctypes.get_errno()
    return int(fd)


def _names(fd: int) -> list[str]:
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return []
    names, at = [], 0
    while at < len(data):
        _, _, _, size = struct.unpack_from("iIII", data, at)
        names.append(data[at + 16:at + 16 + size].rstrip(b"\0").decode())
        at += 16 + size
    return names


def _older_index(path: Path) -> None:
    """An index of ~12 MB whose removed text an older Hermit left in freed pages, waiting for its vacuum."""
    store = IndexStore(path, want_vec=False)
    c = store.conn
    c.execute("pragma secure_delete = off")  # as an older Hermit wrote it
    c.execute("begin")
    c.executemany("insert into embedding_cache(provider, model, provider_key, hash, embedding, dims, updated_at)"
                  " values ('p', 'm', 'k', ?, ?, 1, 0)", [(f"h{i}", os.urandom(4096)) for i in range(3000)])
    c.executemany("insert into chunks(path, source, start_line, end_line, hash, text, updated_at)"
                  " values ('memory/a.md', 'memory', 1, 1, ?, ?, 0)", [(f"g{i}", f"{GONE} {i} " * 40) for i in range(200)])
    c.execute("commit")
    c.execute("delete from chunks")
    c.execute("insert or replace into meta(key, value) values (?, 'pending')", (VACUUM_KEY,))
    c.execute("pragma wal_checkpoint(truncate)")
    store.close()
    assert GONE.encode() in path.read_bytes()


def test_the_one_time_vacuum_writes_no_copy_of_the_index_outside_its_folder(tmp_path: Path) -> None:
    state = tmp_path / "state" / "memory"
    index = state / "main.sqlite"
    _older_index(index)
    temp = tmp_path / "sqlite-tmp"  # where SQLite puts its temporary files for this process
    temp.mkdir()
    fd = _watch_creations(temp)
    try:
        env = dict(os.environ, SQLITE_TMPDIR=str(temp))
        r = subprocess.run([sys.executable, "-c", OPEN, str(index)], capture_output=True, text=True, env=env,
                           timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
        made = _names(fd)
    finally:
        os.close(fd)
    assert made == [], f"SQLite wrote a temporary copy of the index into {temp}: {made}"
    # and the vacuum was done: the removed text is gone from the file, the key with it
    assert GONE.encode() not in index.read_bytes()
    store = IndexStore(index, want_vec=False)
    try:
        assert store.conn.execute("select value from meta where key = ?", (VACUUM_KEY,)).fetchone() is None
    finally:
        store.close()
    assert {p.name for p in state.iterdir()} <= {"main.sqlite", "main.sqlite-wal", "main.sqlite-shm"}


SORTS = r"""
import sys
from pathlib import Path
from hermit.memory.search.keyword import FtsTokens
from hermit.memory.store.sqlite import IndexStore
words = " ".join(f"clinic{i} doorcode{i % 997}" for i in range(2000))
FtsTokens().tokens([f"{words} {n}" for n in range(60)])  # ~240,000 token rows through fts5vocab, sorted
store = IndexStore(Path(sys.argv[1]), want_vec=False)
c = store.conn
c.execute("create temp table big(t text)")
c.executemany("insert into big values (?)", [(f"the clinic's door code {i} " * 20,) for i in range(20000)])
assert c.execute("select count(*) from (select t from big order by t desc)").fetchone()[0] == 20000
store.close()
"""


def test_no_sort_or_temporary_table_of_hermits_spills_text_to_sqlites_temp_folder(tmp_path: Path) -> None:
    """Past the page cache, a sort or a temporary table goes to SQLite's own temp file ($SQLITE_TMPDIR, /var/tmp):
    note text outside the state dir. Every connection Hermit opens keeps them in memory (db.connect,
    db.connect_memory), not the vacuum's alone."""
    temp = tmp_path / "sqlite-tmp"
    temp.mkdir()
    fd = _watch_creations(temp)
    try:
        env = dict(os.environ, SQLITE_TMPDIR=str(temp))
        r = subprocess.run([sys.executable, "-c", SORTS, str(tmp_path / "state" / "memory" / "main.sqlite")],
                           capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
        made = _names(fd)
    finally:
        os.close(fd)
    assert made == [], f"SQLite wrote temporary files into {temp}: {made}"
