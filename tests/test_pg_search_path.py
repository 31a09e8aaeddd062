"""The PostgreSQL search path on a real server: term counts read in the server equal FTS5's, a search's
reads of the meta table are one view while other processes write, and the vector leg's own connection
(run beside the keyword leg) answers inside a reader's transaction and reconnects after a drop."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import psycopg
import pytest

from conftest import write
from hermit.config.memory_search import MemorySearchConfig, PostgresStoreConfig
from hermit.db import Connection, connect_memory
from hermit.errors import StoreError
from hermit.memory.search.fts import FTS_TOKENIZER, index_text, or_match
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.api import FileState
from hermit.memory.store.postgres.keyword import MAX_POSITIONS, phrases
from hermit.memory.store.postgres.rows import BulkChunk
from hermit.memory.store.postgres.store import PgStore
from memhelpers import HashEmbedder


def _store(dsn: str, schema: str = "hermit_t") -> PgStore:
    return PgStore(dsn, schema, PostgresStoreConfig())


def _with_fts5_beside(pg_dsn: str, texts: list[str]) -> tuple[PgStore, Connection]:
    """A PostgreSQL store holding `texts` as one chunk each, and an FTS5 table of the same texts (rowid =
    position + 1), the reference for its BM25."""
    store = _store(pg_dsn)
    files = [FileState(f"memory/{i}.md", "memory", f"h{i}", 0, 0, True) for i in range(len(texts))]
    store.bulk_add(files, [BulkChunk(f"memory/{i}.md", "memory", 1, 1, f"c{i}", t) for i, t in enumerate(texts)],
                   None, updated_at=0)
    lite = connect_memory()
    lite.execute(f"create virtual table t using fts5(x, tokenize='{FTS_TOKENIZER}')")
    lite.executemany("insert into t(rowid, x) values (?, ?)", [(i + 1, index_text(t)) for i, t in enumerate(texts)])
    return store, lite


def test_term_counts_up_to_the_tsvector_limit_score_as_fts5(pg_dsn: str) -> None:
    """Each row's count of a query token comes from ts_rank's value turned back into a count; every
    count from 1 to the 256 positions a tsvector keeps gives FTS5's bm25() to 1e-9."""
    counts = [*range(1, 41), 63, 64, 65, 100, 127, 128, 200, 255, MAX_POSITIONS]
    texts = [" ".join(["kumquat"] * k + ["filler"] * (k % 7) + ["tree"] * (k % 3)) for k in counts]
    texts += ["plain words only", "tree tree tree"]
    store, lite = _with_fts5_beside(pg_dsn, texts)
    ids = {int(r[0]): n for n, r in enumerate(store.conn.execute(f"select id from {store.s}.chunks order by id"))}
    for words in (["kumquat"], ["kumquat", "tree"], ["tree", "filler", "kumquat"], ["kumquat", "kumquat"]):
        match = or_match(words)
        assert match
        want = {int(i) - 1: float(s) for i, s in lite.execute("select rowid, -bm25(t) from t where t match ?",
                                                               (match,))}
        got = {ids[i]: s for i, s in store.fts_search(match, 1000)}
        assert set(got) == set(want), match
        for n, score in want.items():
            assert got[n] == pytest.approx(score, rel=1e-9, abs=1e-12), (match, counts[n] if n < len(counts) else n)
    store.close()


def test_a_search_reads_one_view_of_meta_while_another_process_writes(pg_dsn: str) -> None:
    reader, writer = _store(pg_dsn), _store(pg_dsn)
    writer.set_meta({"generation": "7", "identity": '{"model": "a"}'})
    with reader.reading():
        assert reader.generation() == 7
        writer.set_meta({"generation": "8", "identity": '{"model": "b"}'})
        # Within one search: the view it started with (as SQLite's read transaction gives).
        assert reader.generation() == 7 and reader.identity() == {"model": "a"}
        assert reader.meta()["generation"] == "7"
    # The next search sees the other process's write.
    assert reader.generation() == 8 and reader.identity() == {"model": "b"}
    with reader.reading():
        assert reader.meta()["generation"] == "8"
        reader.set_meta({"generation": "9"})  # its own write is seen at once
        assert reader.generation() == 9
    reader.close()
    writer.close()


def test_the_chunk_id_span_is_read_again_after_another_process_writes(pg_dsn: str) -> None:
    reader, writer = _store(pg_dsn), _store(pg_dsn)

    def add(name: str, n: int) -> None:
        chunks = [BulkChunk(f"memory/{name}.md", "memory", k, k, f"{name}{k}", f"line {k} of {name}") for k in range(n)]
        writer.bulk_add([FileState(f"memory/{name}.md", "memory", name, 0, 0, True)], chunks, None, updated_at=0)

    add("a", 3)
    assert reader.max_chunk_id() == (1, 3)
    add("b", 2)  # another process's write bumps the generation: the span is read again
    assert reader.max_chunk_id() == (1, 5)
    writer.delete_file("memory/a.md")
    with reader.reading():
        assert reader.max_chunk_id() == (4, 5)
        rows = reader.chunk_rows([4, 5])  # read once in the view, with their token counts
        assert reader.fts_doc_lengths([4, 5]) == {4: 4, 5: 4} and rows[5].text == "line 1 of b"
    reader.close()
    writer.close()


def _indexed(dsn: str, tmp_path: Path) -> MemoryService:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# M\n- the spare key is under the mat\n")
    for i in range(12):
        write(ws / "memory" / f"d{i:02d}.md", f"# day {i}\n- errands {i} and the garden hose\n")
    cfg = MemorySearchConfig.model_validate({"store": {"backend": "postgres", "postgres": {"dsn_env": "TEST_DSN"}}})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "x.sqlite", cfg, HashEmbedder(), environ={"TEST_DSN": dsn})
    svc.sync()
    return svc


def test_the_vector_leg_runs_on_its_own_connection_beside_a_reader(pg_dsn: str, tmp_path: Path) -> None:
    svc = _indexed(pg_dsn, tmp_path)
    store = svc.store
    assert isinstance(store, PgStore)
    q = HashEmbedder().embed_query("spare key")
    out: list[list[tuple[int, float]]] = []
    with store.reading():  # the search's transaction holds the main connection
        t = threading.Thread(target=lambda: out.append(store.vec_knn(q, 5)))
        t.start()
        kw = store.fts_search(or_match(["spare"]) or "", 5)
        t.join(30)
    assert out and out[0] and kw and out[0][0][0] == kw[0][0]
    ids = [i for i, _ in out[0]] + [i for i, _ in kw]
    with store.reading():  # the rows both legs read along with their hits are the rows chunk_rows reads
        store.vec_knn(q, 5)
        assert store.fts_search(or_match(["spare"]) or "", 5) == kw  # the same hits, with their rows
        kept = store.chunk_rows(ids)
        lengths = store.fts_doc_lengths(ids)
    assert kept == store.chunk_rows(ids) and set(kept) == set(ids)
    assert lengths == store.fts_doc_lengths(ids)
    assert store.knn_conn.info.backend_pid != store.conn.info.backend_pid
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # a server restart, as the KNN connection sees it
        admin.execute("select pg_terminate_backend(%s)", (store.knn_conn.info.backend_pid,))
    with pytest.raises(StoreError) as e:
        store.vec_knn(q, 5)
    assert "postgresql://" not in str(e.value)
    assert store.vec_knn(q, 5) == out[0]  # reconnected
    svc.close()


class OneCoreEmbedder(HashEmbedder):
    """As E5Embedder once its one-core query runner is loaded: the search embeds in its worker."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def warm_queries(self) -> None:  # loaded already
        return None

    def query_uses_one_core(self) -> bool:
        return True

    def embed_query(self, text: str) -> np.ndarray:
        self.threads.add(threading.current_thread().name)
        return super().embed_query(text)


def test_search_embeds_and_runs_knn_in_the_worker_with_the_same_results(pg_dsn: str, tmp_path: Path) -> None:
    svc = _indexed(pg_dsn, tmp_path)
    base = {q: svc.search(q)["results"] for q in ("spare key", "garden hose errands 3", "mat")}
    emb = OneCoreEmbedder()
    svc.searcher.embedder = emb
    for q, want in base.items():
        got = svc.search(q)
        assert got["results"] == want, q
    assert emb.threads and all(n.startswith("hermit-vector") for n in emb.threads)
    svc.close()


def test_an_id_bounded_keyword_query_keeps_its_results_and_its_setting_to_itself(pg_dsn: str) -> None:
    """The keyword planner's newest-rows bound (`min_rowid`) is planned through the GIN index when the
    id range is large next to the rows the query matches (the primary-key walk the planner may pick
    there tested every row's tsvector: 44-47 ms against 13-23 ms at 1M chunks); the results are FTS5's
    either way, and `enable_indexscan` is back to its default after the statement, inside a search's
    transaction (the pipelined set/reset) and outside one."""
    texts = [("common " + ("rare " if i % 20 == 0 else "") + f"word{i % 7} filler") for i in range(400)]
    store, lite = _with_fts5_beside(pg_dsn, texts)
    ids = [int(r[0]) for r in store.conn.execute(f"select id from {store.s}.chunks order by id")]
    lo, hi = ids[0], ids[-1]
    kw = store.keyword
    for words, newest in ((["rare"], 300), (["common"], 50), (["rare", "word3"], 390), (["common", "rare"], 10)):
        match = or_match(words)
        assert match
        expr = store.tok.parse(match)
        assert expr is not None
        min_rowid = hi - newest + 1
        df = sum(kw._doc_freqs([p])[p] for p in dict.fromkeys(phrases(expr)))
        assert kw._gin_pays(phrases(expr), min_rowid) == (newest * 4 >= df), (words, newest, df)
        first = min_rowid - lo + 1  # FTS5 rowids are 1-based positions here
        want = {int(i): float(s) for i, s in lite.execute(
            "select rowid, -bm25(t) from t where t match ? and rowid >= ?", (match, first))}
        for inside in (False, True):
            if inside:
                with store.reading():
                    got = store.fts_search(match, 1000, min_rowid)
                    assert store.conn.execute("show enable_indexscan").fetchone()[0] == "on"
            else:
                got = store.fts_search(match, 1000, min_rowid)
            assert store.conn.execute("show enable_indexscan").fetchone()[0] == "on"
            assert {ids.index(i) + 1: s for i, s in got} == pytest.approx(want, rel=1e-9), (words, inside)
    store.close()
