"""In-process search latency of two source trees on the same indexes, interleaved (a noisy shared box).

    python bench/retrieval/ab_latency.py OLD_SRC [--rounds 5] [--n-queries 120] [--sizes 10000 100000]

OLD_SRC is a `src/` directory of the code to compare against (e.g. `git archive main src bench | tar -x -C
/tmp/old`; with the tree's `bench/` next to it, its own memory_bench.py runs its worker). The 10k/100k-chunk homes are those of bench/memory_bench.py (synthetic EN/ZH daily logs,
pseudo-random document vectors, the real e5 model for queries), built once under bench/out/memory/ and
reused. Each round runs memory_bench's search worker (matrix mode, as long-lived processes search)
once with OLD_SRC and once with this tree, alternating which goes first; the report gives per-run p50s,
their medians and new/old ratios, and the median of each round's own new/old ratio (robust to the load
changing between rounds), with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_src", type=Path)
    ap.add_argument("--new-src", type=Path, default=None, help="a snapshot of this tree's src/ (default: live)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n-queries", type=int, default=120)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    args = ap.parse_args(argv)
    if not (args.old_src / "hermit").is_dir():
        print(f"error: {args.old_src} holds no hermit package; pass a src/ directory", file=sys.stderr)
        return 2
    report: dict[str, Any] = {}
    for n in args.sizes:
        home = ensure_home(n)
        runs: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = [("old", args.old_src), ("new", args.new_src)]
            for name, src in order if r % 2 == 0 else order[::-1]:
                res = worker(home, src, args.n_queries)
                runs[name].append(float(res["engine_total_ms"]["p50"]))
                print(f"  {n:>7} round {r + 1} {name}: p50 {runs[name][-1]:.1f} ms", file=sys.stderr)
        old, new = statistics.median(runs["old"]), statistics.median(runs["new"])
        # Each round's two runs are back to back, so their ratio survives a change of load between
        # rounds (another process starting on a shared machine) that moves both medians.
        paired = statistics.median(b / a for a, b in zip(runs["old"], runs["new"], strict=True))
        report[str(n)] = {"old_p50_ms": runs["old"], "new_p50_ms": runs["new"], "old_median": old,
                          "new_median": new, "ratio": round(new / old, 3), "paired_ratio": round(paired, 3),
                          "load_avg_1m": os.getloadavg()[0]}
        print(f"{n:>7} chunks: old {old:.1f} ms, new {new:.1f} ms, new/old {new / old:.3f}, "
              f"median of the rounds' new/old {paired:.3f} (load {os.getloadavg()[0]:.2f})")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
