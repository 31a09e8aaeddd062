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

`--probe bench-2000` (goal 2) starts a first index of that workspace with each tree and, from another
process, runs `hermit memory search "<a line of the newest daily log>" --json` every few seconds for
`--probe-seconds` (default 45): when the newest log is first found, what the result says is still
being embedded, and whether a search 30 s in finds it. The index is then killed (a full first index of
~2,000 chunks takes minutes with the new tree, most of an hour with the old).
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
    with open(home / "out.json", "w+") as so, open(home / "err.txt", "w+") as se:
        proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "memory", "index",
                                 "--json"], env=env, stdout=so, stderr=se)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if proc.returncode != 0:
        raise SystemExit(f"index failed with {src}:\n{stderr[-2000:]}")
    report = json.loads(stdout)
    graphs = sum(p.stat().st_size for p in (home / "cache").glob("*.onnx"))
    index_bytes = sum(p.stat().st_size for p in (home / "memory").glob("*.sqlite*"))
    shutil.rmtree(home)
    return {"wall_s": round(wall, 2), "load_before": round(load, 2), "chunks": report.get("chunks_indexed"),
            "lines": report.get("lines_indexed"), "embedded": report.get("embedded"),
            "embed_s": round(float(report.get("embed_seconds", 0.0)), 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "graph_cache_mib": round(graphs / 2**20, 1),
            "index_mib": round(index_bytes / 2**20, 1)}


def newest_phrase(ws: Path) -> tuple[str, str]:
    """A line of the newest daily log found in no other file: (its path, the phrase)."""
    logs = sorted((ws / "memory").glob("*.md"))
    newest = logs[-1]
    others = "\n".join(p.read_text(encoding="utf-8") for p in [ws / "MEMORY.md", *logs[:-1]] if p.exists())
    for line in newest.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("-# ").strip()
        if len(text.split()) >= 5 and text not in others:
            return f"memory/{newest.name}", text
    raise SystemExit(f"no line of {newest} is unique to it")


def _locked(path: Path) -> bool:
    """Whether another process holds the index's writer lock (an advisory lock on the .lock file)."""
    import fcntl

    try:
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def probe(src: Path, ws: Path, home: Path, seconds: float) -> dict[str, Any]:
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    shutil.copytree(ws, home / "workspace")
    path, phrase = newest_phrase(ws)
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_WAIT_POLICY": "PASSIVE"}
    load = os.getloadavg()[0]
    index = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "memory", "index"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.perf_counter()
    searches: list[dict[str, Any]] = []
    try:
        # The indexer must hold the writer lock before the first search, or that search's own sync
        # (a cold CLI search syncs a dirty index when nobody else is) would do the whole first index.
        lock = home / "memory" / "main.sqlite.lock"
        while not _locked(lock) and index.poll() is None and time.perf_counter() - t0 < 30:
            time.sleep(0.1)
        while time.perf_counter() - t0 < seconds:
            started = time.perf_counter() - t0
            out = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "memory", "search",
                                  phrase, "--json"], env=env, capture_output=True, text=True, check=False)
            try:
                res = json.loads(out.stdout)
            except ValueError:
                res = {"results": [], "error": out.stderr[-300:]}
            hit = any(r.get("path") == path for r in res.get("results", []))
            searches.append({"at_s": round(started, 1), "took_s": round(time.perf_counter() - t0 - started, 2),
                             "found": hit, "results": len(res.get("results", [])),
                             "chunks_pending": res.get("indexing", {}).get("chunksPending")})
            time.sleep(2.0)
    finally:
        index.kill()
        index.wait()
    first = next((s["at_s"] for s in searches if s["found"]), None)
    at30 = next((s for s in searches if s["at_s"] >= 30), None)
    shutil.rmtree(home)
    return {"phrase": phrase, "path": path, "load_before": round(load, 2), "first_found_at_s": first,
            "found_at_30s": bool(at30 and at30["found"]), "at_30s": at30, "searches": searches}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_src", type=Path, help="src/ of the code to compare against (e.g. main's)")
    ap.add_argument("--new-src", type=Path, default=ROOT / "src",
                    help="src/ of the new code (default this tree; a snapshot keeps edits out of a long run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workspaces", nargs="*", default=["conv-26", "bench-320"])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=BENCH / "results", help="where index_ab.md/.json go")
    ap.add_argument("--probe", default=None, metavar="WORKSPACE", help="goal 2: search during a first index of it")
    ap.add_argument("--probe-seconds", type=float, default=45.0)
    args = ap.parse_args(argv)
    trees = {"old": args.old_src.resolve(), "new": args.new_src.resolve()}
    if args.probe:
        ws = prepare(args.probe, args.data)
        found = {label: probe(tree, ws, OUT / "homes" / f"probe-{label}", args.probe_seconds)
                 for label, tree in trees.items()}
        for label, res in found.items():
            print(f"{label}: first found at {res['first_found_at_s']} s; at 30 s: {res['at_30s']}", file=sys.stderr)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "index_probe.json").write_text(json.dumps(
            {"workspace": args.probe, "trees": {k: str(v) for k, v in trees.items()}, "nproc": os.cpu_count(),
             "finished": time.strftime("%Y-%m-%d %H:%M:%S"), **found}, indent=1) + "\n")
        (args.out / "index_probe.md").write_text(probe_markdown(args.probe, found))
        print(probe_markdown(args.probe, found))
        return 0
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
                          "rss": max(r.get("peak_rss_mib", 0) for r in runs),
                          "graph": runs[0].get("graph_cache_mib", 0), "index": runs[0].get("index_mib", 0),
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
        "| workspace | chunks | line vectors | old s | new s | speed-up | old embed s | new embed s | "
        "peak RSS old / new | index MiB old / new | graph cache | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in summary.items():
        o, n = row["old"], row["new"]
        lines.append(f"| {name} | {n['chunks']} | {n['lines']} | {o['wall_s']:.1f} | {n['wall_s']:.1f} | "
                     f"{row['speedup']:.2f}× | {o['embed_s']:.1f} | {n['embed_s']:.1f} | "
                     f"{o['rss']:.0f} / {n['rss']:.0f} MiB | {o['index']:.1f} / {n['index']:.1f} | "
                     f"{n['graph']:.0f} MiB | {statistics.median([o['load'], n['load']]):.1f} |")
    return "\n".join(lines) + "\n"


def probe_markdown(name: str, found: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"# A search during a first index of {name} (bench/index_ab.py --probe)",
        "",
        "`hermit memory index` runs in one process; another runs `hermit memory search` for a line of the "
        "newest daily log every ~2 s. load = the 1-minute load average at the start.",
        "",
        "| tree | first found at | found 30 s in | chunks still to embed then | load |",
        "|---|---:|---|---:|---:|",
    ]
    for label, r in found.items():
        at30 = r["at_30s"] or {}
        first = f"{r['first_found_at_s']:.0f} s" if r["first_found_at_s"] is not None else "not in the probe"
        lines.append(f"| {label} | {first} | {'yes' if r['found_at_30s'] else 'no'} | "
                     f"{at30.get('chunks_pending') if at30.get('chunks_pending') is not None else '-'} | "
                     f"{r['load_before']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
