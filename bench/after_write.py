"""The search right after a write, two source trees interleaved (a long-lived process whose index just changed).

    python bench/after_write.py OLD_SRC [--rounds 2] [--size 100000] [--n-queries 60] [--out PREFIX]

A long-lived process (the gateway, `memory watch`) searches an index that the watcher or the agent's own
daily-log append has just changed: the first search after a write pays for reading that index generation
(the vector matrix's new rows, per-word counts cached per generation). Each query here follows a
one-chunk write to a scratch note (memory/zz-bench-write.md, removed at the end) and is timed; then the same
query again, warm. The homes are bench/retrieval/ab_latency.py's (memory_bench's synthetic EN/ZH logs);
OLD_SRC searches its own copy (`home-ab-N-old`), as the new tree may migrate the index to a schema it
refuses. Reports each run's p50/mean, their medians and the load; `--out` writes PREFIX.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "retrieval"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run_worker(home: Path, n_queries: int) -> dict[str, Any]:
    import memory_bench as mb
    from hermit.memory.index.chunking import Chunk

    e5 = mb.E5Embedder(stamp_dir=home / "cache")
    e5.embed_query("warm up")
    svc = mb.make_service(home, e5, long_lived=True)
    queries = mb.make_queries(mb.SEED, n_queries + 10)
    svc.search(queries[0])
    warming = getattr(e5, "warming", None)
    if warming is not None:
        warming.join()
    for q in queries[1:10]:
        svc.searcher.search(q)
    store = svc.searcher.store
    after: list[float] = []
    again: list[float] = []
    try:
        for k, q in enumerate(queries[10:]):
            store.replace_file(path="memory/zz-bench-write.md", source="memory", file_hash=str(k), mtime=0, size=0,
                               chunks=[Chunk(start_line=1, end_line=1, hash=str(k), text=f"bench write {k}")],
                               vectors=None, model="m")
            t0 = time.perf_counter()
            svc.searcher.search(q)
            after.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            svc.searcher.search(q)
            again.append((time.perf_counter() - t0) * 1000)
    finally:
        store.delete_file("memory/zz-bench-write.md")
        svc.close()
    return {"after_write_p50": round(statistics.median(after), 1), "after_write_mean": round(statistics.fmean(after), 1),
            "again_p50": round(statistics.median(again), 1)}


def worker(src: Path | None, home: Path, n_queries: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(home), "--n-queries", str(n_queries)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker failed ({src}):\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_src", type=Path, nargs="?")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--n-queries", type=int, default=60)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(run_worker(args.worker, args.n_queries)))
        return 0
    if args.old_src is None or not (args.old_src / "hermit").is_dir():
        ap.error("OLD_SRC must be a src/ directory holding the hermit package")
    import ab_latency

    import memory_bench as mb

    home = mb.OUT_DIR / f"home-ab-{args.size}"
    old_home = home.with_name(home.name + "-old")
    if not old_home.exists() and home.exists():
        shutil.copytree(home, old_home)
    home = ab_latency.ensure_home(args.size)
    if not old_home.exists():
        shutil.copytree(home, old_home)
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    loads: list[float] = []
    for r in range(args.rounds):
        order = [("old", args.old_src.resolve(), old_home), ("new", None, home)]
        for name, src, at in order if r % 2 == 0 else order[::-1]:
            loads.append(round(os.getloadavg()[0], 2))
            runs[name].append(worker(src, at, args.n_queries))
            print(f"round {r + 1} {name}: {runs[name][-1]} (load {loads[-1]})", file=sys.stderr)

    def med(name: str, key: str) -> float:
        return round(statistics.median(x[key] for x in runs[name]), 1)

    rows = [("first search after a one-chunk write, p50 ms", "after_write_p50"),
            ("… mean ms", "after_write_mean"), ("the same query again, p50 ms", "again_p50")]
    md = "\n".join([
        f"# The search after a write, {args.size:,} chunks (`bench/after_write.py`)", "",
        f"old = `{args.old_src}`, new = this tree; {args.rounds} interleaved rounds of {args.n_queries} queries, "
        f"medians of the runs; 1-minute load before each run: {', '.join(map(str, loads))}.", "",
        "| | old | new |", "|---|---:|---:|",
        *[f"| {label} | {med('old', key)} | {med('new', key)} |" for label, key in rows], "",
        f"per run: old {runs['old']}; new {runs['new']}", ""])
    print(md)
    if args.out:
        args.out.with_suffix(".md").write_text(md)
        args.out.with_suffix(".json").write_text(json.dumps({"runs": runs, "loads": loads}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
