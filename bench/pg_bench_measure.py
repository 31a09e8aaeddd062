"""Measurements for the PostgreSQL benchmark: latency (query embedding included), HNSW recall, concurrency.

Every timed search embeds its query with the real e5 model first, as Hermit does. SQLite goes through
Hermit's own HybridSearcher on its IndexStore (vec0 KNN + bounded BM25 + fusion). PostgreSQL runs raw SQL on
the benchmark's table (pgvector `<=>` KNN, and a GIN `tsvector` keyword leg capped at 4,000 candidate rows
like Hermit's keyword budget); the tables say which figure is which path.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from typing import Any

import numpy as np

from memory_world import SEED, make_queries
from pg_bench_build import SCHEMA, pg_dsn, sqlite_path
from pg_bench_data import OUT, log, vectors

KNN = f"select id from {SCHEMA}.chunks order by embedding <=> %s::vector limit %s"
KEYWORD = (f"select id, ts_rank_cd(tsv, q) r from (select id, tsv, q from {SCHEMA}.chunks,"
           " websearch_to_tsquery('simple', %s) q where tsv @@ q limit 4000) s order by r desc limit 24")


def queries(n: int) -> list[str]:
    return make_queries(SEED + 1, n)


def vec_literal(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v.tolist()) + "]"


def pct(xs: list[float], p: float) -> float:
    return round(float(np.percentile(np.asarray(xs), p)), 1) if xs else float("nan")


def stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50": pct(xs, 50), "p95": pct(xs, 95), "mean": round(statistics.fmean(xs), 1)}


def truth(n: int, qvecs: np.ndarray, k: int = 10) -> np.ndarray:
    """Exact top-k ids (1-based) by cosine for each query vector, by numpy over the stored vectors (cached)."""
    path = OUT / f"truth-{n}-{len(qvecs)}.npy"
    if path.exists():
        return np.load(path)
    mat = vectors(n)
    best_s = np.full((len(qvecs), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(qvecs), k), dtype=np.int64)
    for lo in range(0, n, 200_000):
        s = qvecs @ np.asarray(mat[lo:lo + 200_000]).T
        top = np.argpartition(-s, k, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + lo + 1], axis=1)
        order = np.argsort(-cand_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    np.save(path, best_i)
    return best_i


def _conn(dsn: str) -> Any:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("set jit = off")
    return conn


def pg_latency(dsn: str, e5: Any, qs: list[str], *, exact: bool, ef_search: int = 40,
               keyword: bool = False, gold: np.ndarray | None = None) -> dict[str, Any]:
    conn = _conn(dsn)
    if exact:
        # Force the sequential scan (the exact answer); parallel workers may help it on 2 cores.
        conn.execute("set enable_indexscan = off")
    else:
        conn.execute(f"set hnsw.ef_search = {int(ef_search)}")
    for q in qs[:5]:
        conn.execute(KNN, (vec_literal(e5.embed_query(q)), 10)).fetchall()
    totals, embeds, knns, kws, recalls = [], [], [], [], []
    for i, q in enumerate(qs):
        t0 = time.perf_counter()
        v = e5.embed_query(q)
        t1 = time.perf_counter()
        ids = [r[0] for r in conn.execute(KNN, (vec_literal(v), 10)).fetchall()]
        t2 = time.perf_counter()
        if keyword:
            conn.execute(KEYWORD, (" or ".join(q.split()),)).fetchall()
        t3 = time.perf_counter()
        totals.append((t3 - t0) * 1000)
        embeds.append((t1 - t0) * 1000)
        knns.append((t2 - t1) * 1000)
        kws.append((t3 - t2) * 1000)
        if gold is not None:
            recalls.append(len(set(ids) & set(gold[i].tolist())) / 10)
    conn.close()
    out: dict[str, Any] = {"total_ms": stats(totals), "embed_ms": stats(embeds), "knn_ms": stats(knns)}
    if keyword:
        out["keyword_ms"] = stats(kws)
    if recalls:
        out["recall_at_10"] = round(statistics.fmean(recalls), 4)
    return out


def recall_only(dsn: str, qvecs: np.ndarray, gold: np.ndarray, ef_search: int) -> dict[str, Any]:
    conn = _conn(dsn)
    conn.execute(f"set hnsw.ef_search = {int(ef_search)}")
    rec, ms = [], []
    for i, v in enumerate(qvecs):
        t0 = time.perf_counter()
        ids = [r[0] for r in conn.execute(KNN, (vec_literal(v), 10)).fetchall()]
        ms.append((time.perf_counter() - t0) * 1000)
        rec.append(len(set(ids) & set(gold[i].tolist())) / 10)
    conn.close()
    return {"ef_search": ef_search, "recall_at_10": round(statistics.fmean(rec), 4), "knn_ms": stats(ms)}


def sqlite_searcher(n: int, e5: Any) -> Any:
    from hermit.config.memory_search import QueryConfig
    from hermit.memory.search.hybrid import HybridSearcher
    from hermit.memory.store.sqlite import IndexStore

    store = IndexStore(sqlite_path(n), readonly=True)
    return HybridSearcher(store, e5, QueryConfig(), use_matrix=False)


def searcher_latency(searcher: Any, qs: list[str]) -> dict[str, Any]:
    """Hermit's HybridSearcher.search per query (5 warm-ups first), with its own vector/keyword timings."""
    for q in qs[:5]:
        searcher.search(q)
    totals, vec, kw = [], [], []
    for q in qs:
        t0 = time.perf_counter()
        out = searcher.search(q)
        totals.append((time.perf_counter() - t0) * 1000)
        vec.append(out.timings.get("vector_ms", 0.0))
        kw.append(out.timings.get("keyword_ms", 0.0))
    return {"total_ms": stats(totals), "vector_ms": stats(vec), "keyword_ms": stats(kw)}


def sqlite_latency(n: int, e5: Any, qs: list[str]) -> dict[str, Any]:
    searcher = sqlite_searcher(n, e5)
    try:
        return searcher_latency(searcher, qs)
    finally:
        searcher.store.close()


def _client(args: tuple[str, int, str, int, list[str], Any]) -> tuple[int, float]:
    kind, n, dsn, ef, qs, barrier = args
    from hermit.memory.embedders.local_e5 import E5Embedder

    e5 = E5Embedder()
    e5.embed_query("warm up")
    if kind == "sqlite":
        searcher = sqlite_searcher(n, e5)
        searcher.search(qs[0])
        run = searcher.search
    else:
        conn = _conn(dsn)
        conn.execute(f"set hnsw.ef_search = {int(ef)}")

        def run(q: str) -> None:
            conn.execute(KNN, (vec_literal(e5.embed_query(q)), 10)).fetchall()
            conn.execute(KEYWORD, (" or ".join(q.split()),)).fetchall()

        run(qs[0])
    barrier.wait()
    t0 = time.perf_counter()
    for q in qs:
        run(q)
    return len(qs), time.perf_counter() - t0


def throughput(kind: str, n: int, dsn: str, ef: int, qs: list[str], clients: int = 4) -> dict[str, Any]:
    """`clients` processes (own e5, own connection) searching at once: searches per second overall."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as mgr:
        barrier = mgr.Barrier(clients)
        jobs = [(kind, n, dsn, ef, qs[i::clients] * 1, barrier) for i in range(clients)]
        with ctx.Pool(clients) as pool:
            t0 = time.perf_counter()
            res = pool.map(_client, jobs)
    done = sum(r[0] for r in res)
    wall = max(r[1] for r in res)
    log(f"throughput {kind} {n}: {done} searches in {wall:.1f} s ({time.perf_counter() - t0:.1f} s with startup)")
    return {"clients": clients, "searches": done, "seconds": round(wall, 1), "per_s": round(done / wall, 1)}


def measure(srv: Any, n: int, e5: Any, n_queries: int, ef_list: list[int], exact_queries: int,
            sqlite_queries: int, tp_queries: int, ef_default: int) -> dict[str, Any]:
    qs = queries(n_queries)
    qvecs = np.stack([e5.embed_query(q) for q in qs]).astype(np.float32)
    gold = truth(n, qvecs)
    dsn = pg_dsn(srv, n)
    res: dict[str, Any] = {"chunks": n, "queries": len(qs)}
    res["recall"] = [recall_only(dsn, qvecs, gold, ef) for ef in ef_list]
    log(f"{n}: recall {res['recall']}")
    res["pg_hnsw"] = pg_latency(dsn, e5, qs, exact=False, ef_search=ef_default, gold=gold)
    res["pg_hnsw_hybrid"] = pg_latency(dsn, e5, qs, exact=False, ef_search=ef_default, keyword=True)
    log(f"{n}: hnsw {res['pg_hnsw']}")
    res["pg_exact"] = pg_latency(dsn, e5, qs[:exact_queries], exact=True, gold=gold[:exact_queries])
    log(f"{n}: exact {res['pg_exact']}")
    res["sqlite"] = sqlite_latency(n, e5, qs[:sqlite_queries])
    log(f"{n}: sqlite {res['sqlite']}")
    res["throughput_pg_hnsw_hybrid"] = throughput("pg", n, dsn, ef_default, qs[:tp_queries])
    res["throughput_sqlite"] = throughput("sqlite", n, dsn, ef_default, qs[:tp_queries])
    return res


def hermit_pg_latency(srv: Any, n: int, e5: Any, qs: list[str], ef_search: int) -> dict[str, Any]:
    """Hermit's HybridSearcher on its PgStore: the end-to-end search path (embedding, HNSW KNN, BM25, fusion)."""
    from hermit.config.memory_search import PostgresStoreConfig, QueryConfig
    from hermit.memory.search.hybrid import HybridSearcher
    from hermit.memory.store.postgres.store import PgStore
    from pg_bench_build import hermit_db

    dsn = f"postgresql://postgres@127.0.0.1:{srv.port}/{hermit_db(n)}"
    store = PgStore(dsn, "hermit_main", PostgresStoreConfig(ef_search=ef_search))  # upgrades an older cached schema
    searcher = HybridSearcher(store, e5, QueryConfig(), use_matrix=False)
    try:
        return {**searcher_latency(searcher, qs), "hnsw": store.has_hnsw()}
    finally:
        store.close()


def measure_hnsw(srv: Any, n: int, e5: Any, n_queries: int, ef_list: list[int], ef_default: int,
                 tp_queries: int) -> dict[str, Any]:
    """Only the HNSW figures: recall at each ef_search, then latency and throughput at `ef_default`."""
    qs = queries(n_queries)
    qvecs = np.stack([e5.embed_query(q) for q in qs]).astype(np.float32)
    gold = truth(n, qvecs)
    dsn = pg_dsn(srv, n)
    res: dict[str, Any] = {"recall": [recall_only(dsn, qvecs, gold, ef) for ef in ef_list]}
    log(f"{n}: recall {res['recall']}")
    res["pg_hnsw"] = pg_latency(dsn, e5, qs, exact=False, ef_search=ef_default, gold=gold)
    res["pg_hnsw_hybrid"] = pg_latency(dsn, e5, qs, exact=False, ef_search=ef_default, keyword=True)
    res["throughput_pg_hnsw_hybrid"] = throughput("pg", n, dsn, ef_default, qs[:tp_queries])
    log(f"{n}: hnsw {res['pg_hnsw']}")
    return res
