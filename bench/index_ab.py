"""First-index time of two source trees on the same workspaces, interleaved (issue 25, goal 1).

    python bench/index_ab.py OLD_SRC [--rounds 3] [--workspaces conv-26 bench-320] [--data DIR]

OLD_SRC is a `src/` directory of the code to compare against (`git archive main src | tar -x -C
/tmp/old`). Each round runs `hermit --home H memory index --json` as a subprocess, once with OLD_SRC
and once with this tree (which goes first alternates), each in a fresh home: no embedding cache, no
index, no built graph, exactly a new user's first index (chunks and line vectors, model load
included). Workspaces: `conv-26` is the LoCoMo dev conversation of the shared data (`--data`, the
converted LoCoMo folder), `bench-320` memory_bench's seeded EN/ZH daily logs cut at ~320 chunks (its
real-e5 throughput workspace). The 1-minute load average is read before every run: the machine is
shared, so only the ratio of the medians of one run means much. Results: bench/results/index_ab.{md,json}.
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
ROOT = BENCH.parent
OUT = BENCH / "out" / "index_ab"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_DATA = Path("/work/shared/data/locomo-dev")


def prepare(name: str, data: Path) -> Path:
    """The workspace folder for `name`, made once under bench/out/index_ab/."""
    ws = OUT / "workspaces" / name
    if ws.exists():
        return ws
    if name.startswith("conv-"):
        src = data / "workspaces" / name
        if not src.is_dir():
            raise SystemExit(f"error: {src} not found; pass --data (the converted LoCoMo folder)")
        shutil.copytree(src, ws)
    elif name.startswith("bench-"):
        import memory_bench as mb

        tmp = OUT / "workspaces" / f"{name}.home"
        mb.generate_workspace(tmp, int(name.split("-", 1)[1]))
        shutil.move(str(tmp / "workspace"), ws)
        shutil.rmtree(tmp)
    else:
        raise SystemExit(f"error: unknown workspace {name} (conv-NN or bench-N)")
    return ws


def one_run(src: Path, ws: Path, home: Path) -> dict[str, Any]:
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    shutil.copytree(ws, home / "workspace")
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_WAIT_POLICY": "PASSIVE"}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "memory", "index", "--json"],
                         env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"index failed with {src}:\n{out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    shutil.rmtree(home)
    return {"wall_s": round(wall, 2), "load_before": round(load, 2), "chunks": report.get("chunks_indexed"),
            "lines": report.get("lines_indexed"), "embedded": report.get("embedded"),
            "embed_s": round(float(report.get("embed_seconds", 0.0)), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_src", type=Path, help="src/ of the code to compare against (e.g. main's)")
    ap.add_argument("--new-src", type=Path, default=ROOT / "src",
                    help="src/ of the new code (default this tree; a snapshot keeps edits out of a long run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workspaces", nargs="*", default=["conv-26", "bench-320"])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=BENCH / "results", help="where index_ab.md/.json go")
    args = ap.parse_args(argv)
    trees = {"old": args.old_src.resolve(), "new": args.new_src.resolve()}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in args.workspaces:
        ws = prepare(name, args.data)
        results[name] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for label in order:
                run = one_run(trees[label], ws, OUT / "homes" / f"{name}-{label}")
                results[name][label].append(run)
                print(f"{name} round {r + 1} {label}: {run}", file=sys.stderr)
    summary = summarise(results)
    doc = {"argv": sys.argv[1:], "trees": {k: str(v) for k, v in trees.items()}, "nproc": os.cpu_count(),
           "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": summary, "runs": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "index_ab.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(summary, args.rounds)
    (args.out / "index_ab.md").write_text(md)
    print(md)
    return 0


def summarise(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, by in results.items():
        row: dict[str, Any] = {}
        for label, runs in by.items():
            row[label] = {"wall_s": statistics.median(r["wall_s"] for r in runs),
                          "embed_s": statistics.median(r["embed_s"] for r in runs),
                          "chunks": runs[0]["chunks"], "lines": runs[0]["lines"],
                          "load": statistics.median(r["load_before"] for r in runs)}
        row["speedup"] = round(row["old"]["wall_s"] / row["new"]["wall_s"], 2)
        out[name] = row
    return out


def markdown(summary: dict[str, Any], rounds: int) -> str:
    lines = [
        "# First index: this tree against the old one (bench/index_ab.py)",
        "",
        f"`hermit memory index` in a fresh home (no cache, no index), {rounds} interleaved rounds per tree, "
        "medians; load = the 1-minute load average before each run (2 cores, shared).",
        "",
        "| workspace | chunks | line vectors | old s | new s | speed-up | old embed s | new embed s | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in summary.items():
        o, n = row["old"], row["new"]
        lines.append(f"| {name} | {n['chunks']} | {n['lines']} | {o['wall_s']:.1f} | {n['wall_s']:.1f} | "
                     f"{row['speedup']:.2f}× | {o['embed_s']:.1f} | {n['embed_s']:.1f} | "
                     f"{statistics.median([o['load'], n['load']]):.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
