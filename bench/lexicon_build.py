"""Measure the CPU time of the lexicon's first build (`build_lexicon`: CC-CEDICT parsed into a SQLite file), which
each new state dir's first translating search pays. Each run is a fresh interpreter that builds into a new temp
dir and prints the build's own CPU time (process_time: user + system of this process) and the file's size. CPU
time, not wall time: the machine is shared.

Usage: python bench/lexicon_build.py [--runs 7] [--compare REF] [--out bench/results/lexicon_build.md]

`--compare REF` also measures the `src/` of a git ref (e.g. d141dae, before s23 t12), extracted to a temporary
directory and put first on PYTHONPATH, interleaved run by run so that both see the same machine load.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, tempfile, time
from pathlib import Path
from hermit.memory.search.lexicon import build_lexicon
with tempfile.TemporaryDirectory() as d:
    dest = Path(d) / "cache" / "lexicon.sqlite"
    t0 = time.process_time()
    build_lexicon(dest)
    print(json.dumps({"cpu": time.process_time() - t0, "bytes": dest.stat().st_size}))
"""


def _run(src: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _extract(ref: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--compare")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    trees = {"work tree": ROOT / "src"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.compare:
            trees = {args.compare: _extract(args.compare, Path(tmp)), **trees}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, src in trees.items():
                runs[name].append(_run(src))
    lines = [f"# Lexicon first build — CPU seconds of `build_lexicon`, {args.runs} interleaved runs",
             "", f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores (shared).", "",
             "| tree | median CPU s | min | max | file bytes |", "|---|---|---|---|---|"]
    for name, got in runs.items():
        cpu = [r["cpu"] for r in got]
        lines.append(f"| {name} | {statistics.median(cpu):.2f} | {min(cpu):.2f} | {max(cpu):.2f} | {int(got[0]['bytes'])} |")
    if args.compare:
        old = statistics.median(r["cpu"] for r in runs[args.compare])
        new = statistics.median(r["cpu"] for r in runs["work tree"])
        lines += ["", f"Ratio work tree / {args.compare}: {new / old:.2f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
