"""Measure how long the CLI takes to start: the median wall time of `hermit --help` (and two other
quick commands) over several runs, and what `python -X importtime` says the biggest imports are.

Usage: python bench/cli_startup.py [--runs 15] [--compare REF] [--out bench/results/cli_startup.md]

`--compare REF` also measures the `src/` of a git ref (e.g. one from before a change), extracted to a
temporary directory and put first on PYTHONPATH, with the same interpreter, interleaved run by run so
that both see the same machine load.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["memory", "--help"], ["--version"])


def _run(src: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_WAIT_POLICY": "PASSIVE"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hermit.cli.main", *argv], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _top_imports(src: Path, n: int = 8) -> list[tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = "import sys; from hermit.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True,
                         text=True).stderr
    rows = []
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((parts[2].rstrip(), int(parts[1])))
    top_level = [(name.strip(), us) for name, us in rows if not name.startswith("    ")]
    return sorted(top_level, key=lambda r: -r[1])[:n]


def _extract(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True).stdout
    tar_path = into / "src.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per command (median reported)")
    ap.add_argument("--compare", metavar="REF", help="also measure this git ref's src/")
    ap.add_argument("--out", type=Path, help="write the Markdown report here")
    args = ap.parse_args()
    sources = {"worktree": ROOT / "src"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.compare:
            sources[args.compare] = _extract(args.compare, Path(tmp))
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for label, src in sources.items():
                for argv in COMMANDS:
                    times.setdefault((label, " ".join(argv)), []).append(_run(src, argv))
        imports = {label: _top_imports(src) for label, src in sources.items()}
    load = os.getloadavg()[0]
    lines = [
        "# CLI start-up time (`bench/cli_startup.py`)",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} cores, 1-min load average {load:.1f} at the end "
        f"(the machine is shared); median of {args.runs} runs, interleaved.",
        "",
        "| code | command | median s | min s |",
        "|---|---|---|---|",
    ]
    for (label, cmd), ts in times.items():
        lines.append(f"| {label} | `hermit {cmd}` | {statistics.median(ts):.3f} | {min(ts):.3f} |")
    for label, rows in imports.items():
        lines += ["", f"Largest top-level imports for `hermit --help` ({label}, `python -X importtime`):", ""]
        lines += [f"- `{name}` {us / 1000:.0f} ms" for name, us in rows]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
