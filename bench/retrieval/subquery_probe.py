"""Round 12's probe: a question naming two people or two things, run as one search for each.

    python bench/retrieval/subquery_probe.py DATA_DIR [--only NAME ...] [--out FILE.md]

"What type of volunteering have John and Maria both done?" needs John's turns and Maria's, often in
different sessions; one search ranks the sessions where both names and "volunteering" meet, and the
places a multi-hop question needs from each of them may not be among the six. Measured here before it
is built: when a question joins two capitalised words with "and" ("John and Maria", "Coco and Shadow";
not its first word), each is asked on its own ("What type of volunteering have John done?", with
"both" dropped), through the real search at default settings, and the results are interleaved:

- `sub-ab`: A1, B1, A2, B2, …;
- `sub-full-ab`: the whole question's first, then the sub-questions' (F1, A1, B1, F2, A2, B2, …).

A place overlapping one already taken (same file, overlapping lines) is skipped; the merged results stop
at max_results, and a result that would take the search past its character budget (700 × the results
asked for, 4,200 for six) is skipped, so the cap per search holds. Other questions run as they are.
`same` is the probe with no question split (must equal `default`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.search.hybrid import Hit, SearchOutcome  # noqa: E402

# "X and Y", both capitalised, X not the question's first word.
_PAIR = re.compile(r"(?<=\s)([A-Z][\w'-]*) and ([A-Z][\w'-]*)\b")
_BOTH = re.compile(r"\bboth\s+", re.IGNORECASE)


def split(query: str) -> list[str]:
    """The sub-questions of `query` (none when it names no pair)."""
    m = _PAIR.search(query)
    if m is None:
        return []
    return [_BOTH.sub("", query[:m.start()] + part + query[m.end():]) for part in (m.group(1), m.group(2))]


def merge(lists: list[list[Hit]], max_results: int, budget: int) -> list[Hit]:
    """The hits of `lists` interleaved (first of each, then second of each, …), without a place twice,
    at most `max_results` and `budget` characters."""
    out: list[Hit] = []
    used = 0
    for k in range(max(map(len, lists), default=0)):
        for hits in lists:
            if k >= len(hits) or len(out) >= max_results:
                continue
            h = hits[k]
            if any(o.path == h.path and o.start_line <= h.end_line and h.start_line <= o.end_line for o in out):
                continue
            if used + len(h.snippet) > budget:
                continue
            out.append(h)
            used += len(h.snippet)
    return out


def patch(svc: Any, mode: str, affected: list[str]) -> None:
    plain = svc.search_outcome

    def search_outcome(query: str, max_results: int | None = None, min_score: float | None = None) -> SearchOutcome:
        parts = split(query) if mode != "same" else []
        if not parts:
            return plain(query, max_results, min_score)
        affected.append(query)
        n = max_results or 6
        subs = [plain(p, max_results, min_score) for p in parts]
        lists = [s.hits for s in subs]
        if mode == "sub-full-ab":
            lists = [plain(query, max_results, min_score).hits, *lists]
        return SearchOutcome(merge(lists, n, svc.searcher.tuning.search_budget(n)), subs[0].mode)

    svc.search_outcome = search_outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--only", nargs="*", help="modes to run (default: all)")
    ap.add_argument("--out", type=Path, help="write the table here")
    args = ap.parse_args(argv)
    queries = C.read_jsonl(args.data / "queries.jsonl")
    base = C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)
    rows = [base]
    plain_service = C.service_for
    notes: list[str] = []
    for mode in ("same", "sub-ab", "sub-full-ab"):
        if args.only and mode not in args.only:
            continue
        affected: list[str] = []

        def service(d: Path, conv: str, v: C.Variant, m: str = mode, a: list[str] = affected) -> Any:
            svc = plain_service(d, conv, v)
            patch(svc, m, a)
            return svc

        C.service_for = service  # type: ignore[assignment]
        try:
            rows.append(C.run_variant(args.data, C.Variant(mode, f"{mode}: questions joining two names split"),
                                      queries))
        finally:
            C.service_for = plain_service  # type: ignore[assignment]
        r = rows[-1]
        changed = []
        for q0, q1 in zip(base["per_query"], r["per_query"], strict=True):
            if (q0["seen"], q0["MRR"]) != (q1["seen"], q1["MRR"]):
                changed.append(f"  - {q0['qid']} ({q0['category']}): seen {q0['seen']:.2f} → {q1['seen']:.2f}, "
                               f"MRR {q0['MRR']:.2f} → {q1['MRR']:.2f}")
        notes += [f"- `{mode}`: {len(affected)} searches split (of {len(base['per_query'])} questions and "
                  f"{len(base['per_absent'])} without an answer); {len(changed)} questions change:", *changed]
        print(f"{mode}: seen {r['seen']:.3f} MRR {r['MRR']:.3f} multi-hop {r['by_category']['multi-hop']['seen']:.3f}"
              f" absent {r['absent']['any']:.3f} split {len(affected)}", file=sys.stderr)
    return C.emit("Sub-questions (subquery_probe.py):\n\n" + "\n".join(notes) + "\n\n" + C.markdown(rows),
                  args.out)


if __name__ == "__main__":
    raise SystemExit(main())
