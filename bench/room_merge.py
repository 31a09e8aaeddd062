"""The host's merge after a room's command, through the real sandbox (bubblewrap): how long a room of N entries holds
the turn after its command ended.

    python bench/room_merge.py [--sizes 1000,10000,65000] [--shapes flat,small,tree] [--changes none,one,all]
                               [--runs 3] [--out PREFIX]

For each shape and size it fills a room through exec (`flat`: N empty files in one folder; `small`: N files of a few
bytes; `tree`: N empty files in folders of 100, ten to a parent), then times three commands: `true` (nothing
changed), one file changed, and every file changed. Reported per command: the exec's own time (the way in, the
command, the pack), the merge after it (RoomRun.finish: wall and this process's CPU), medians of `--runs`, and the
load average. Run an older tree with PYTHONPATH=OLD/src to compare. `--out` writes PREFIX.md and PREFIX.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hermit.memory.policy.audience import Reader
from hermit.tools import ExecTool, PathResolver, RoomSandbox, RoomView
from hermit.tools.os_sandbox import SandboxLimits, detect
from hermit.tools.room_sandbox import RoomRun, sandbox_uid
from hermit.tools.rooms import Room
from hermit.tools.views import AudienceMemoryView

MAKE = {"flat": "mkdir d && cd d && seq {n} | xargs touch",
        "small": "mkdir d && cd d && seq {n} | xargs -n 500 sh -c 'for f; do echo $f > $f; done' x",
        "tree": "for a in $(seq {tops}); do for b in $(seq 10); do mkdir -p d/$a/$b; "
                "(cd d/$a/$b && seq 100 | xargs touch); done; done"}
CHANGE = {"none": "true",
          "one": "echo changed > $(find d -type f | head -1)",
          "all": "find d -type f | xargs -n 500 sh -c 'for f; do echo c >> $f; done' x"}
FINISHED: list[tuple[float, float]] = []
_finish = RoomRun.finish


def _timed_finish(self: RoomRun, apply: bool) -> list[str]:
    wall, cpu = time.monotonic(), time.process_time()
    try:
        return _finish(self, apply)
    finally:
        FINISHED.append((time.monotonic() - wall, time.process_time() - cpu))


RoomRun.finish = _timed_finish


def room(tmp: Path, quota_mb: int) -> tuple[ExecTool, Room]:
    ws = tmp / "ws"
    (ws / "memory").mkdir(parents=True)
    view = RoomView(ws, Room(tmp / "rooms", "telegram:group:1", quota_mb << 20),
                    AudienceMemoryView(ws, Reader("telegram:group:1")))
    jail = RoomSandbox(detect(), view, SandboxLimits(max_processes=64), tmp / "scratch", sandbox_uid(65534))
    return ExecTool(PathResolver(ws, True), env={"PATH": "/usr/bin:/bin"}, sandbox=jail), view.room


def exec_seconds(text: str) -> float:
    match = re.search(r"\(([\d.]+)s\)", text.splitlines()[0])
    return float(match.group(1)) if match else float("nan")


def measure(shape: str, n: int, runs: int, changes: list[str]) -> list[dict[str, Any]]:
    rows = []
    for change in changes:
        command = CHANGE[change]
        samples = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="room-merge-") as d:
                tool, _ = room(Path(d), max(16, n * 4096 * 3 // (1 << 20) + 16))
                made = tool.exec(MAKE[shape].format(n=n, tops=max(1, n // 1000)) + " && echo made", timeout=600).text
                assert "made" in made and "not kept" not in made, made[:300]
                FINISHED.clear()
                text = tool.exec(command, timeout=600).text
                assert "not kept" not in text, text[:300]
                samples.append((exec_seconds(text), *FINISHED[-1], os.getloadavg()[0]))
        med = [statistics.median(s[i] for s in samples) for i in range(4)]
        rows.append({"shape": shape, "n": n, "change": change, "exec_s": med[0], "merge_wall_s": med[1],
                     "merge_cpu_s": med[2], "load": med[3]})
        print(f"{shape:5} {n:>6} {change:4}  exec {med[0]:6.2f} s  merge {med[1]:6.2f} s wall {med[2]:5.2f} s CPU"
              f"  (load {med[3]:.1f})", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,65000")
    ap.add_argument("--shapes", default="flat,small,tree")
    ap.add_argument("--changes", default="none,one,all")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = [r for shape in args.shapes.split(",") for n in map(int, args.sizes.split(","))
            for r in measure(shape, n, args.runs, args.changes.split(","))]
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(rows, indent=1))
        lines = ["| shape | entries | changed | exec (s) | merge wall (s) | merge CPU (s) | load |",
                 "|---|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {r['shape']} | {r['n']:,} | {r['change']} | {r['exec_s']:.2f} | {r['merge_wall_s']:.2f} | "
                  f"{r['merge_cpu_s']:.2f} | {r['load']:.1f} |" for r in rows]
        Path(f"{args.out}.md").write_text(f"# Room merge ({sys.argv[0]})\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
