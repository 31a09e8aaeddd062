"""Delete means delete on disk: text taken out of a note leaves no bytes in the SQLite index file or its -wal.

A removed line used to stay in the file after the sync that stopped search finding it: FTS5 segments kept its
tokens until merged, freed pages kept the old chunk text, the embedding cache kept the removed chunk's row.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import write
from hermit.db import connect, migrate
from hermit.memory.store.sqlite import IndexStore
from hermit.memory.store.sqlite_schema import MIGRATIONS
from memhelpers import Backend, service

SECRET_LINE = "- the garage door code is 4111, ask Quixwell at the Brambledown lodge\n"
SECRET_WORDS = [b"4111", b"Quixwell", b"quixwel", b"Brambledown", b"brambledown", b"garage door code"]
OTHER = "".join(f"- errand {i}: bought apples and pears at the market on day {i}\n" for i in range(40))


@pytest.fixture
def sqlite_only() -> Iterator[None]:
    before = Backend.name
    Backend.name = "sqlite"
    try:
        yield
    finally:
        Backend.name = before


def _left(db: Path) -> list[str]:
    """Which of the secret's words are still in the index file or its -wal (raw bytes)."""
    found = []
    for f in (db, db.with_name(db.name + "-wal")):
        if f.exists():
            raw = f.read_bytes()
            found += [f"{w.decode()} in {f.name}" for w in SECRET_WORDS if w in raw]
    return found


def _remove(ws: Path, how: str) -> None:
    note = ws / "memory" / "2026-03-04.md"
    if how == "edit":  # the owner edits the line out (or sessions/scrub.py takes a deleted message out)
        write(note, "# March 4\n" + OTHER)
    elif how == "replace":  # another file put in its place
        tmp = ws / "memory" / ".new.md"
        write(tmp, "# March 4\n- nothing much happened\n")
        os.replace(tmp, note)
    else:
        note.unlink()


@pytest.mark.parametrize("how", ["edit", "replace", "delete"])
def test_removed_text_leaves_no_bytes_keyword_only(workspace: Path, tmp_path: Path, sqlite_only: None,
                                                     how: str) -> None:
    db = tmp_path / "idx.sqlite"
    write(workspace / "memory" / "2026-03-04.md", "# March 4\n" + OTHER + SECRET_LINE)
    svc = service(workspace, db, None)
    svc.sync()
    assert svc.search("Quixwell")["results"], "indexed"
    svc.close()
    assert _left(db), "the secret is in the index before (else the test proves nothing)"

    svc = service(workspace, db, None)
    _remove(workspace, how)
    svc.sync()
    assert svc.search("Quixwell")["results"] == []
    svc.close()
    assert _left(db) == []
    assert _secure_delete(db) == "1", "still on after the write that kept the unchanged chunks"


def test_a_deleted_long_note_leaves_no_bytes_in_freed_pages(workspace: Path, tmp_path: Path,
                                                             sqlite_only: None) -> None:
    """A long note frees whole pages when it goes (its chunks' text, their FTS5 content and segments):
    `secure_delete = fast` would leave those as they were on the freelist."""
    db = tmp_path / "idx.sqlite"
    write(workspace / "MEMORY.md", "# Memory\n" + OTHER)
    write(workspace / "memory" / "2026-03-04.md", "# March 4\n" + "".join(
        f"- visit {i}: {SECRET_LINE[2:]}" for i in range(300)))
    svc = service(workspace, db, None)
    svc.sync()
    svc.close()
    svc = service(workspace, db, None)
    _remove(workspace, "delete")
    svc.sync()
    assert svc.search("Quixwell")["results"] == []
    svc.close()
    assert _left(db) == []


def test_removed_text_leaves_no_bytes_with_e5_and_its_cache(workspace: Path, tmp_path: Path, sqlite_only: None,
                                                              e5: object) -> None:
    db = tmp_path / "idx.sqlite"
    write(workspace / "memory" / "2026-03-04.md", "# March 4\n" + SECRET_LINE)
    write(workspace / "MEMORY.md", "# Memory\n- likes green tea\n")
    svc = service(workspace, db, e5)  # type: ignore[arg-type]
    svc.sync()
    store = svc.store
    assert isinstance(store, IndexStore)
    old = {h for (h,) in store.conn.execute("select hash from chunks where path = 'memory/2026-03-04.md'")}
    kept = {h for (h,) in store.conn.execute("select hash from chunks where path = 'MEMORY.md'")}
    assert old and old <= {h for (h,) in store.conn.execute("select hash from embedding_cache")}

    write(workspace / "memory" / "2026-03-04.md", "# March 4\n- a quiet day\n")
    svc.sync()
    cached = {h for (h,) in store.conn.execute("select hash from embedding_cache")}
    assert not old & cached, "the removed chunk's vector left the embedding cache"
    assert kept <= cached, "the chunks still indexed keep theirs"
    r = svc.sync()
    assert r.embedded == 0, "nothing unchanged is embedded again"
    svc.close()
    assert _left(db) == []


def test_wal_is_emptied_while_a_reader_keeps_the_file_open(workspace: Path, tmp_path: Path,
                                                            sqlite_only: None) -> None:
    """With a search connection open (the gateway's), closing the writer does not checkpoint the WAL: the
    sync that removed text does, so the old page images do not wait in -wal."""
    db = tmp_path / "idx.sqlite"
    write(workspace / "memory" / "2026-03-04.md", "# March 4\n" + OTHER + SECRET_LINE)
    svc = service(workspace, db, None)
    svc.sync()
    reader = IndexStore(db, readonly=True)
    try:
        assert reader.chunk_count() > 0  # the reader has read (it holds the WAL index), and is idle now
        _remove(workspace, "edit")
        svc.sync()
        svc.close()
        wal = db.with_name(db.name + "-wal")
        assert wal.exists() and wal.stat().st_size == 0, "the reader kept the WAL; the sync emptied it"
        assert _left(db) == []
        assert reader.fts_search('"quixwell"', 5) == []
    finally:
        reader.close()


def _secure_delete(db: Path) -> str | None:
    conn, _ = connect(db, load_vec=False)
    try:
        row = conn.execute("select v from chunks_fts_config where k = 'secure-delete'").fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def test_an_index_of_the_previous_schema_gets_secure_delete(tmp_path: Path, workspace: Path,
                                                             sqlite_only: None) -> None:
    db = tmp_path / "idx.sqlite"
    conn, _ = connect(db, load_vec=False)
    migrate(conn, MIGRATIONS[:7])  # the schema before this change
    conn.close()
    assert _secure_delete(db) is None
    IndexStore(db, want_vec=False).close()
    assert _secure_delete(db) == "1"

    fresh = tmp_path / "fresh.sqlite"
    IndexStore(fresh, want_vec=False).close()
    assert _secure_delete(fresh) == "1"


def test_an_old_index_loses_text_removed_before_the_upgrade(tmp_path: Path, workspace: Path,
                                                            sqlite_only: None) -> None:
    """Text removed while the index had the previous schema (FTS5 delete markers, freed pages, a cache row
    nothing uses) is gone once the upgraded Hermit has opened it."""
    db = tmp_path / "idx.sqlite"
    write(workspace / "memory" / "2026-03-04.md", "# March 4\n" + OTHER + SECRET_LINE)
    svc = service(workspace, db, None)
    svc.sync()
    svc.close()
    # Remove the chunks as the previous Hermit did: no secure-delete anywhere, and a cache row left behind.
    conn, _ = connect(db, load_vec=False)
    conn.execute("pragma secure_delete = off")
    conn.execute("insert into chunks_fts(chunks_fts, rank) values ('secure-delete', 0)")
    rows = conn.execute("select id, hash from chunks").fetchall()
    conn.executemany("delete from chunks_fts where rowid = ?", [(i,) for i, _ in rows])
    conn.execute("delete from chunks")
    conn.execute("delete from token_docs")
    conn.execute("delete from files")
    conn.execute("insert into embedding_cache values ('p', 'm', 'k', ?, ?, 4, 0)",
                 (rows[0][1], np.ones(4, dtype=np.float32).tobytes()))
    conn.execute("delete from meta where key = 'residue_vacuum'")
    conn.execute("pragma user_version = 7")  # an index of the previous schema
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.close()
    assert _left(db), "the old schema left the secret behind (else the test proves nothing)"

    after = IndexStore(db, want_vec=False)
    assert after.conn.execute("select count(*) from embedding_cache").fetchone()[0] == 0
    after.close()
    assert _left(db) == []


def test_a_sync_killed_before_its_end_leaves_the_cache_rows_to_the_next(workspace: Path, tmp_path: Path,
                                                                         sqlite_only: None) -> None:
    """The hashes of removed chunks are noted in the write's own transaction: a sync killed after a write but
    before its end (where the cache rows go) leaves them to the next sync, which drops them."""
    db = tmp_path / "idx.sqlite"
    write(workspace / "memory" / "2026-03-04.md", "# March 4\n" + SECRET_LINE)
    svc = service(workspace, db, None)
    svc.sync()
    store = svc.store
    assert isinstance(store, IndexStore)
    [(h,)] = store.conn.execute("select hash from chunks")
    store.cache_put("p", "m", "k", {h: np.ones(4, dtype=np.float32)})
    store.delete_file("memory/2026-03-04.md")  # the write, and then the kill: no cache_prune
    svc.close()
    (workspace / "memory" / "2026-03-04.md").unlink()

    svc = service(workspace, db, None)
    svc.sync()
    store = svc.store
    assert isinstance(store, IndexStore)
    assert store.conn.execute("select count(*) from embedding_cache").fetchone()[0] == 0
    assert store.conn.execute("select count(*) from cache_unused").fetchone()[0] == 0
    svc.close()
    assert _left(db) == []
