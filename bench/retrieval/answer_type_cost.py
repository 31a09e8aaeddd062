"""What the answer type (round 17) costs a search, paired in one process on memory_bench's 10k-chunk home.

    python bench/retrieval/answer_type_cost.py

The home is ab_latency.py's (`bench/out/memory/home-ab-10000`, built by `ab_latency.ensure_home(10000)`).
memory_bench's 120 questions run three times, each with SearchTuning.time_line_bonus 0 and 0.3 in turn (the order
alternating per pass): the search thread's CPU time (thread_time: what the load of a shared box moves least) and the
line stage's wall time (`lines_ms`), overall and for the questions that ask for a time.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))

import memory_bench as mb  # noqa: E402
from hermit.memory.search.answer_type import asks_time  # noqa: E402
from hermit.memory.search.tuning import DEFAULT_TUNING  # noqa: E402
from memory_world import SEED, make_queries  # noqa: E402

HOME = BENCH / "out" / "memory" / "home-ab-10000"
LIFTS = (0.0, 0.3)


def main() -> int:
    e5 = mb.E5Embedder(stamp_dir=HOME / "cache")
    svc = mb.make_service(HOME, e5, long_lived=True)
    qs = make_queries(SEED, 130)
    for q in qs[:10]:
        svc.search(q)
    warming = getattr(e5, "warming", None)
    if warming is not None:
        warming.join()
    s = svc.searcher
    cpu: dict[float, list[float]] = {b: [] for b in LIFTS}
    lines: dict[float, list[float]] = {b: [] for b in LIFTS}
    timed: dict[float, list[float]] = {b: [] for b in LIFTS}
    try:
        for rep in range(3):
            for q in qs[10:]:
                for b in LIFTS if rep % 2 == 0 else LIFTS[::-1]:
                    s.tuning = dataclasses.replace(DEFAULT_TUNING, time_line_bonus=b)
                    t0 = time.thread_time()
                    out = s.search(q, 6)
                    ms = (time.thread_time() - t0) * 1000
                    cpu[b].append(ms)
                    lines[b].append(out.timings.get("lines_ms", 0.0))
                    if asks_time(q):
                        timed[b].append(ms)
    finally:
        svc.close()
    print(f"questions asking for a time: {sum(1 for q in qs[10:] if asks_time(q))} of {len(qs) - 10}")
    for b in LIFTS:
        c = sorted(cpu[b])
        print(f"lift {b}: search-thread CPU p50 {statistics.median(c):.2f} ms, p95 {c[int(0.95 * len(c))]:.2f} ms; "
              f"lines_ms p50 {statistics.median(lines[b]):.2f}; questions asking for a time: CPU p50 "
              f"{statistics.median(timed[b]) if timed[b] else 0.0:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
