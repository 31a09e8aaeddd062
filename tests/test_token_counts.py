"""Chunks per FTS5 token kept beside the SQLite index (memory/store/token_counts.py): always FTS5's own count."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from hermit.db import connect
from hermit.memory.index.chunking import Chunk
from hermit.memory.store.sqlite import MIGRATIONS, IndexStore

WORDS = ["apple", "banana", "cherry", "running", "runs", "ran", "café", "cafe", "Ünïcode", "don't", "e-mail",
         "TICKET-4821", "x", "中文", "测试", "钢琴课", "notes", "noted"]


def _vocab(store: IndexStore) -> dict[str, int]:
    """FTS5's own document count per token, read from its vocabulary."""
    store.conn.execute("create virtual table if not exists temp.v using fts5vocab(main, chunks_fts, row)")
    return {str(t): int(d) for t, d in store.conn.execute("select term, doc from temp.v")}


def _table(store: IndexStore) -> dict[str, int]:
    return {str(t): int(d) for t, d in store.conn.execute("select token, docs from token_docs")}


def _walk(match: str, store: IndexStore) -> int:
    return int(store.conn.execute("select count(*) from chunks_fts where chunks_fts match ?", (match,)).fetchone()[0])


def _random_writes(store: IndexStore, r: random.Random, steps: int) -> None:
    for _ in range(steps):
        path = f"memory/2026-01-0{r.randint(1, 8)}.md"
        if r.random() < 0.2:
            store.delete_file(path)
            continue
        chunks = [Chunk(start_line=i, end_line=i, hash=f"{r.random()}",
                        text=" ".join(r.choice(WORDS) for _ in range(r.randint(0, 14))))
                  for i in range(r.randint(0, 6))]
        store.replace_file(path=path, source="memory", file_hash="h", mtime=0, size=0, chunks=chunks,
                           vectors=None, model="m")


def test_counts_follow_every_write_and_delete(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "index.sqlite", want_vec=False)
    r = random.Random(5)
    for _ in range(4):
        _random_writes(store, r, 25)
        vocab = _vocab(store)
        assert vocab and _table(store) == vocab  # no token left at 0, none missing, every count FTS5's
    for word in [*WORDS, "nowhere", "café au lait", 'say "hi"', "runner"]:
        match = '"' + word.replace('"', '""') + '"'
        assert store.fts_count(match) == _walk(match, store), word
    assert store.fts_count('"apple" OR "cherry"') == _walk('"apple" OR "cherry"', store)


def test_a_write_by_another_connection_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    reader, writer = IndexStore(path, want_vec=False), IndexStore(path, want_vec=False)
    assert reader.fts_count('"kumquat"') == 0
    writer.replace_file(path="memory/a.md", source="memory", file_hash="h", mtime=0, size=0, vectors=None,
                        model="m", chunks=[Chunk(start_line=1, end_line=1, hash="1", text="Kumquats, kumquat jam")])
    assert reader.fts_count('"kumquat"') == 1
    writer.delete_file("memory/a.md")
    assert reader.fts_count('"kumquat"') == 0 and _table(reader) == {}


def test_an_index_made_before_the_table_gets_it_filled(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = IndexStore(path, want_vec=False)
    _random_writes(store, random.Random(9), 30)
    want = _vocab(store)
    store.conn.execute("drop table token_docs")
    store.conn.execute("pragma user_version = 5")  # the schema of a Hermit before this table
    store.close()
    old = tmp_path / "old.sqlite"
    shutil.copy(path, old)

    # Opened read-only (a searcher beside a writer that has not migrated it yet): counted through FTS5.
    readonly = IndexStore(old, want_vec=False, readonly=True)
    assert readonly.fts_count('"apple"') == _walk('"apple"', readonly) > 0
    readonly.close()

    migrated = IndexStore(old, want_vec=False)
    assert _table(migrated) == want
    conn, _ = connect(old, load_vec=False)
    assert conn.execute("pragma user_version").fetchone()[0] == len(MIGRATIONS)


@pytest.mark.parametrize("word", ["apple", "running", "中文"])
def test_a_killed_write_leaves_the_counts_of_the_old_index(tmp_path: Path, word: str) -> None:
    """The counts change in the write's transaction: a write that fails half-way changes none of them."""
    store = IndexStore(tmp_path / "index.sqlite", want_vec=False)
    _random_writes(store, random.Random(3), 20)
    before = _table(store)
    bad = [Chunk(start_line=1, end_line=1, hash="1", text=f"{word} {word}"), None]
    with pytest.raises(AttributeError):
        store.replace_file(path="memory/2026-01-01.md", source="memory", file_hash="h", mtime=0, size=0,
                           chunks=bad, vectors=None, model="m")  # type: ignore[arg-type]
    assert _table(store) == before == _vocab(store)
