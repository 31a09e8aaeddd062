#!/usr/bin/env python
"""PostgreSQL benchmark (issue 15): search latency, HNSW recall, build time, size and throughput at 100k/1M.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/pg_bench.py [--chunks 100000 1000000] [--queries 200]

Builds are cached under bench/out/pg/ (data, SQLite index, the PostgreSQL data dir); see pg_bench_data.py
for how the synthetic corpus is made and pg_bench_measure.py for what is timed. Results go to
bench/out/pg/results.json and the table in bench/pg_bench.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from hermit.memory.embedders.local_e5 import E5Embedder  # noqa: E402
from pg_bench_build import build_hermit_pg, build_pg, build_sqlite, server, stop  # noqa: E402
from pg_bench_data import OUT, generate, log  # noqa: E402
from pg_bench_measure import hermit_pg_latency, measure, measure_hnsw, queries  # noqa: E402
from pg_bench_report import RESULTS_MD, write  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--ef-search", type=int, nargs="+", default=[40, 64, 100, 200])
    ap.add_argument("--ef-default", type=int, default=100, help="ef_search of the latency/throughput runs")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--exact-queries", type=int, default=50, help="exact scans are slow at 1M")
    ap.add_argument("--sqlite-queries", type=int, default=100)
    ap.add_argument("--throughput-queries", type=int, default=100, help="split over the 4 clients")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--skip-raw", action="store_true", help="keep the raw-SQL figures of an earlier run")
    ap.add_argument("--no-sqlite", action="store_true", help="skip the SQLite index (e.g. an HNSW tuning run)")
    ap.add_argument("--hnsw-only", action="store_true",
                    help="re-measure only HNSW recall/latency/throughput (e.g. another --ef-search sweep)")
    ap.add_argument("--no-hermit-path", action="store_true",
                    help="skip loading the corpus through Hermit's PgStore and searching it with HybridSearcher")
    args = ap.parse_args(argv)
    e5 = E5Embedder()
    e5.embed_query("warm up")
    srv = server()
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                               "m": args.m, "ef_construction": args.ef_construction, "runs": {}}
    path = OUT / "results.json"
    if path.exists():
        results["runs"] = json.loads(path.read_text()).get("runs", {})
    try:
        with __import__("psycopg").connect(srv.dsn) as c:
            results["server"] = c.execute("show server_version").fetchone()[0]
            results["pgvector"] = c.execute(
                "select default_version from pg_available_extensions where name='vector'").fetchone()[0]
        for n in args.chunks:
            # Runs with other HNSW parameters than the defaults are kept apart: "1000000-m24-ef96".
            key = str(n) if (args.m, args.ef_construction) == (16, 64) else f"{n}-m{args.m}-ef{args.ef_construction}"
            run: dict[str, Any] = dict(results["runs"].get(key, {}))
            run["data"] = generate(n, e5)
            run["build_pg"] = build_pg(srv, n, args.m, args.ef_construction)
            if not args.no_sqlite:
                run["build_sqlite"] = build_sqlite(n, e5)
            if args.hnsw_only:
                run.update(measure_hnsw(srv, n, e5, args.queries, args.ef_search, args.ef_default,
                                        args.throughput_queries))
                run["ef_default"] = args.ef_default
            elif not args.build_only and not args.skip_raw:
                run.update(measure(srv, n, e5, args.queries, args.ef_search, args.exact_queries,
                                   args.sqlite_queries, args.throughput_queries, args.ef_default))
                run["ef_default"] = args.ef_default
                results["runs"][key] = run
                path.write_text(json.dumps(results, indent=2))
            if not args.no_hermit_path:
                run["build_hermit_pg"] = build_hermit_pg(srv, n, e5, args.m, args.ef_construction)
                if not args.build_only:
                    run["hermit_pg_hnsw"] = hermit_pg_latency(srv, n, e5, queries(args.queries)[:args.sqlite_queries],
                                                              args.ef_default)
                    log(f"{n}: hermit pg {run['hermit_pg_hnsw']}")
            results["runs"][key] = run
            path.write_text(json.dumps(results, indent=2))
            log(f"results for {key} written to {path}")
        if Path(__file__).resolve().parent / "out" / "pg" == OUT:  # a scratch run never overwrites the table
            RESULTS_MD.write_text(write(results))
    finally:
        stop(srv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
