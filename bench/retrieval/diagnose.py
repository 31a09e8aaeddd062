"""Where each gold turn of the LoCoMo dev questions ends up in one search: the breakdown behind a round's choice.

    python bench/retrieval/diagnose.py DATA_DIR [--category multi-hop] [--show N]

For every gold turn of the chosen questions (default: multi-hop), run at default settings (6 results,
minScore 0.35) on the indexes `conversations.py` built, one of:

- seen: inside a returned window (what the agent sees);
- window: in a returned place (the chunks it was ranked on) but outside the returned window, cut by
  the characters the windows share;
- past-6: in a chunk that passed minScore but not among the six places returned;
- below: in a candidate chunk (either leg's pool, or a day the question names) under minScore;
- absent: in no candidate chunk at all.

It also counts the sessions (files) a question's gold turns lie in and how many of those the returned
places cover, and, with --show, prints the questions that lose turns.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as conv_bench  # noqa: E402

from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

KINDS = ("seen", "window", "past-6", "below", "absent")


def _record(searcher: HybridSearcher, log: dict[str, Any]) -> None:
    """Keep each search's candidates (`c`, their `rows`), scores, passed order and query vector `q`
    (instance wrappers, no behaviour change; signals.py uses it too)."""
    score, order = searcher._score, searcher._order

    def _score(query, c, q, match):  # type: ignore[no-untyped-def]
        out = score(query, c, q, match)
        log["c"], log["rows"], log["scored"], log["q"] = c, c.rows, out, q
        return out

    def _order(scored, c, q, max_results, min_score, timings, *judged):  # type: ignore[no-untyped-def]
        out = order(scored, c, q, max_results, min_score, timings, *judged)
        log["passed"] = out
        return out

    searcher._score = _score  # type: ignore[method-assign]
    searcher._order = _order  # type: ignore[method-assign]


def classify(q: dict[str, Any], hits: list[Any], log: dict[str, Any]) -> list[str]:
    rows, passed = log["rows"], {i for i, _ in log["passed"]}
    out = []
    for g in q["gold"]:
        path, line = str(g["path"]), int(g["line"])
        if any(h.path == path and h.start_line <= line <= h.end_line for h in hits):
            out.append("seen")
        elif any(h.path == path and h.place[0] <= line <= h.place[1] for h in hits):
            out.append("window")
        else:
            holders = [i for i, r in rows.items() if r.path == path and r.start_line <= line <= r.end_line]
            if any(i in passed for i in holders):
                out.append("past-6")
            elif holders:
                out.append("below")
            else:
                out.append("absent")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--category", default="multi-hop", help="a LoCoMo category, or 'all'")
    ap.add_argument("--show", type=int, default=0, help="print this many questions that lose turns")
    ap.add_argument("--variant", default="default", help="a variant of conversations.py")
    args = ap.parse_args(argv)
    queries = conv_bench.read_jsonl(args.data / "queries.jsonl")
    if args.category != "all":
        queries = [q for q in queries if q["category_name"] == args.category]
    v = next(x for x in conv_bench.variants() if x.name == args.variant)
    counts: collections.Counter[str] = collections.Counter()
    by_conv: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    sessions = covered = 0
    places = []
    shown = 0
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = conv_bench.service_for(args.data, conv, v)
        log: dict[str, Any] = {}
        _record(svc.searcher, log)
        try:
            for q in (q for q in queries if q["conv"] == conv):
                hits = svc.search_outcome(str(q["query"]), v.max_results).hits
                kinds = classify(q, hits, log)
                counts.update(kinds)
                by_conv[conv].update(kinds)
                files = {str(g["path"]) for g in q["gold"]}
                sessions += len(files)
                covered += len(files & {h.path for h in hits})
                places.append(len(hits))
                if args.show and shown < args.show and any(k != "seen" for k in kinds):
                    shown += 1
                    print(f"\n{conv} {q['query']!r} → {q['answer']!r}")
                    for g, k in zip(q["gold"], kinds, strict=True):
                        print(f"   {k:7s} {g['path']}:{g['line']}")
                    for h in hits:
                        print(f"   hit {h.score:.3f} {h.path}:{h.start_line}-{h.end_line} (place {h.place}) "
                              f"{len(h.snippet)} ch")
        finally:
            svc.close()
    total = sum(counts.values())
    print(f"\n{len(queries)} questions ({args.category}), {total} gold turns, "
          f"{sum(places) / max(1, len(places)):.2f} places per search")
    print("| | " + " | ".join(KINDS) + " |")
    print("|---|" + "---:|" * len(KINDS))
    print("| all | " + " | ".join(str(counts[k]) for k in KINDS) + " |")
    for conv, c in sorted(by_conv.items()):
        print(f"| {conv} | " + " | ".join(str(c[k]) for k in KINDS) + " |")
    print(f"gold sessions {sessions}, among the returned places' files {covered} ({covered / max(1, sessions):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
