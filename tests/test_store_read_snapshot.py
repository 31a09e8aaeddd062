"""The SQLite store's reads held for one read transaction (IndexStore.reading): what SQLite itself returns."""

from __future__ import annotations

from pathlib import Path

from hermit.memory.index.chunking import Chunk
from hermit.memory.store.sqlite import IndexStore


def _write(store: IndexStore, path: str, text: str) -> None:
    store.replace_file(path=path, source="memory", file_hash="h", mtime=0, size=0, vectors=None, model="m",
                       chunks=[Chunk(start_line=1, end_line=1, hash=text, text=text)])


def _statements(store: IndexStore) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    return seen


def test_meta_is_read_once_per_search_transaction(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "index.sqlite", want_vec=False)
    _write(store, "memory/a.md", "apples")
    seen = _statements(store)
    with store.reading():
        for _ in range(5):
            assert store.meta()["generation"] == "1" and store.generation() == 1
            assert store.vector_backend() is None
    reads = [s for s in seen if "from meta" in s or "sqlite_master" in s]
    assert len(reads) == 3  # meta, generation, the vector table's kind: once each
    seen.clear()
    store.meta(), store.meta()
    assert len([s for s in seen if "from meta" in s]) == 2  # outside a read transaction: every call reads


def test_a_write_by_another_connection_is_seen_by_the_next_transaction(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    reader, writer = IndexStore(path, want_vec=False), IndexStore(path, want_vec=False)
    _write(writer, "memory/a.md", "apples")
    with reader.reading():
        assert reader.generation() == 1
        _write(writer, "memory/b.md", "pears")  # committed meanwhile: not in this snapshot, as SQLite says
        assert reader.generation() == 1 and reader.meta()["generation"] == "1"
        assert reader.chunk_count() == 1
    assert writer.generation() == 2 and reader.generation() == 2  # outside: read again
    with reader.reading():
        assert reader.generation() == 2 and reader.meta()["generation"] == "2" and reader.chunk_count() == 2


def test_a_write_on_the_same_connection_is_seen_at_once(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "index.sqlite", want_vec=False)
    _write(store, "memory/a.md", "apples")
    with store.reading():
        assert store.meta().get("note") is None and store.vector_backend() is None
        store.set_meta({"note": "x"})
        assert store.meta()["note"] == "x"
        store.conn.execute("update meta set value = '7' where key = 'generation'")  # any write drops them
        assert store.generation() == 7
        store.ensure_vec_table(4)
        assert store.vector_backend() in ("vec0", "blob")
