"""Pieces memory_bench.py shares with memory_probes.py, memory_report.py and memory_machine.py: its
directories, the agent id, the watcher's debounce, the target goals, the memory service as the CLI
composes it, and the percentile summary.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from hermit.cli.context import CliContext
from hermit.memory.service import MemoryService

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out" / "memory"
RESULTS_DIR = BENCH_DIR / "results"
AGENT_ID = "main"
DEBOUNCE_MS = 1500

TARGETS = {
    "search_p50_ms": 30.0,
    "search_p95_ms": 80.0,
    "cold_cli_s": 1.5,
    "index_overhead_pct": 15.0,
    "searchable_after_debounce_s": 0.5,
}


def index_path(home: Path) -> Path:
    return home / "memory" / f"{AGENT_ID}.sqlite"


def make_service(home: Path, embedder: Any, *, long_lived: bool) -> MemoryService:
    """The service exactly as the CLI composes it for `home` (config, lexicon, paths), with `embedder`."""
    home = home.resolve()
    ctx = CliContext.from_args(str(home), None, None, False)
    # The CLI imports create_embedder when it builds the service, so the package's name is patched.
    with mock.patch("hermit.memory.embedders.create_embedder", lambda *_a, **_k: embedder):
        svc = ctx.memory_service(long_lived=long_lived)
    assert svc.index_path == index_path(home) and svc.workspace == home / "workspace", "unexpected state layout"
    return svc


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), p)) if xs else float("nan")


def summary(xs: list[float], nd: int = 2) -> dict[str, float]:
    if not xs:
        return {}
    return {"n": len(xs), "p50": round(pct(xs, 50), nd), "p95": round(pct(xs, 95), nd),
            "mean": round(statistics.fmean(xs), nd), "min": round(min(xs), nd), "max": round(max(xs), nd)}
