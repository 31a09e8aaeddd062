"""Round 12's probe: spreading the places of a search over the conversation's dates (MMR on dates, not text).

    python bench/retrieval/spread_probe.py DATA_DIR [--only NAME ...] [--out FILE.md]

A multi-hop question ("What martial arts has John done?") needs turns from several sessions, often months
apart. Rounds 4 and 8 measured diversity by file (a second place of a file waiting, a file's places
discounted: 0.842–0.845 in round 4; round 8: the six places are six different sessions in 39 of the 74
multi-hop searches, two places of one file in only 8). What they did not measure is spread in time:
sessions days apart are often one episode told twice ("I'm training for the tournament" / "the
tournament went well"), and a place from another season may be the list's other item. Here, once the
first place is taken, each next place among the passed chunks (the first line_order_depth × max_results,
as the line order sees them) is the one with the best
`blended score − μ · [its day is within D days of a place already taken]`, greedily; the rest keep their
order. `date-μ-D`: μ 0.05 / 0.1 / 0.2, D 7 / 14 / 30. Undated files (MEMORY.md) are never discounted. Each
chunk keeps its own score (what the agent sees, the fill gate, round 9's rule). `same` is μ 0.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})")
MODES = {"same": (0.0, 0), **{f"date-{m}-{d}": (m, d) for m in (0.05, 0.1, 0.2) for d in (7, 14, 30)}}


def day(path: str) -> dt.date | None:
    m = _DAY.search(path)
    return dt.date.fromisoformat(m.group(1)) if m else None


def spread(ordered: list[tuple[int, float]], rows: dict[int, Any], depth: int, mu: float,
           days: int) -> list[tuple[int, float]]:
    head, tail = ordered[:depth], ordered[depth:]
    if mu <= 0 or len(head) < 2:
        return ordered
    taken: list[tuple[int, float]] = []
    when: list[dt.date] = []
    rest = list(head)
    while rest:
        def value(item: tuple[int, float]) -> float:
            d = day(rows[item[0]].path)
            near = d is not None and any(d != w and abs((d - w).days) <= days for w in when)
            return item[1] - (mu if near else 0.0)

        best = max(rest, key=value)
        rest.remove(best)
        taken.append(best)
        d = day(rows[best[0]].path)
        if d is not None:
            when.append(d)
    return taken + tail


def patch(searcher: HybridSearcher, mu: float, days: int) -> None:
    plain = searcher._order_by_lines

    def order(passed: list[tuple[int, float]], rows: dict[int, Any], q: Any, cos: dict[int, float],
              depth: int, weight: float) -> tuple[list[tuple[int, float]], float]:
        ordered, nearest = plain(passed, rows, q, cos, depth, weight)
        if weight >= 1.0:  # the fill's order is left alone
            return ordered, nearest
        return spread(ordered, rows, depth, mu, days), nearest

    searcher._order_by_lines = order  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    args = ap.parse_args(argv)
    queries = C.read_jsonl(args.data / "queries.jsonl")
    rows = [C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)]
    for name, (mu, days) in MODES.items():
        if args.only and name not in args.only:
            continue
        v = C.Variant(name, f"μ {mu}, within {days} days", family="date-spread")
        rows.append(C.run_changed(args.data, v, queries, lambda svc, _conv, m=mu, n=days: patch(svc.searcher, m, n)))
        C.progress(name, rows[-1])
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
