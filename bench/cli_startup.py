"""Measure how long the CLI takes to start: the median wall time of `hermit --help` (and two other
quick commands) over several runs, and what `python -X importtime` says the biggest imports are; then
what real commands cost before they do anything (`memory status`, `doctor`, `cron list`, ...): the median
CPU time (user + system) of each, in a state dir made by `hermit init` with keyword-only memory (no model
is loaded or downloaded), and the largest imports of each. CPU time, not wall time, because the machine is
shared: a loaded machine stretches wall time, not the work a process does.

Usage: python bench/cli_startup.py [--runs 15] [--compare REF] [--out bench/results/cli_startup.md]

`--compare REF` also measures the `src/` of a git ref (e.g. one from before a change), extracted to a
temporary directory and put first on PYTHONPATH, with the same interpreter, interleaved run by run so
that both see the same machine load.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["memory", "--help"], ["--version"])
# Commands that read the state dir (`gateway status` finds no gateway running: exit 1, its answer).
# `init` runs on the made state dir: it keeps the config and the workspace, as a second `hermit init` does.
REAL_COMMANDS = (["memory", "status"], ["memory", "search", "x"], ["memory", "index"], ["doctor"], ["cron", "list"],
                 ["channels", "status"], ["gateway", "status"], ["sessions", "list"], ["init"])


def _run(src: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_WAIT_POLICY": "PASSIVE"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hermit.cli.main", *argv], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _state_env(src: Path, home: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")},
            "PYTHONPATH": str(src), "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}


def _make_state(src: Path, home: Path) -> None:
    subprocess.run([sys.executable, "-m", "hermit", "init"], env=_state_env(src, home), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n", encoding="utf-8")
    (home / "workspace" / "MEMORY.md").write_text("# Notes\n\n- the piano lesson is on Tuesday\n", encoding="utf-8")
    for argv in (["memory", "index"], ["memory", "search", "x"]):  # the search builds the lexicon cache once
        subprocess.run([sys.executable, "-m", "hermit", *argv], env=_state_env(src, home), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _cpu(src: Path, home: Path, argv: list[str]) -> float:
    """CPU seconds (user + system) of `hermit ARGV` as its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "hermit", *argv], env=_state_env(src, home), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _top_imports_of(src: Path, home: Path, argv: list[str], n: int = 5) -> list[tuple[str, int]]:
    """The largest imports `hermit ARGV` makes, by cumulative time, each not inside another one listed."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "hermit", *argv], env=_state_env(src, home),
                         capture_output=True, text=True, stdin=subprocess.DEVNULL).stderr
    return _largest(err, "  ", n)


def _top_imports(src: Path, n: int = 8) -> list[tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = "import sys; from hermit.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True,
                         text=True).stderr
    return _largest(err, "    ", n)


def _largest(err: str, nested: str, n: int) -> list[tuple[str, int]]:
    """The n largest imports of `-X importtime` output by cumulative time, leaving out names indented by `nested`
    (each level indents two spaces after one: "  " keeps the top level only, "    " one level more)."""
    rows = []
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((parts[2].rstrip(), int(parts[1])))
    kept = [(name.strip(), us) for name, us in rows if not name.startswith(nested)]
    return sorted(kept, key=lambda r: -r[1])[:n]


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
        homes = {label: Path(tmp) / f"state-{i}" for i, label in enumerate(sources)}
        for label, src in sources.items():
            _make_state(src, homes[label])
        cpu: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for argv in REAL_COMMANDS:
                for label, src in sources.items():
                    cpu.setdefault((" ".join(argv), label), []).append(_cpu(src, homes[label], argv))
        real_imports = {" ".join(argv): _top_imports_of(sources["worktree"], homes["worktree"], argv)
                        for argv in REAL_COMMANDS}
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
    labels = list(sources)
    lines += ["", "## Real commands: CPU time before they do anything", "",
              f"User + system CPU seconds of each command as its own process (median of {args.runs}, interleaved), "
              "in a state dir made by `hermit init` with keyword-only memory and one indexed note.", "",
              "| command | " + " | ".join(f"{label} CPU s" for label in labels) + " |",
              "|---|" + "---|" * len(labels)]
    for argv in REAL_COMMANDS:
        cmd = " ".join(argv)
        lines.append(f"| `hermit {cmd}` | " + " | ".join(f"{statistics.median(cpu[(cmd, label)]):.3f}"
                                                          for label in labels) + " |")
    lines += ["", "Largest imports of each (worktree, `python -X importtime`, cumulative; one run, a loaded "
              "machine stretches these):", ""]
    for cmd, rows in real_imports.items():
        lines.append(f"- `hermit {cmd}`: " + ", ".join(f"`{name}` {us / 1000:.0f} ms" for name, us in rows))
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
