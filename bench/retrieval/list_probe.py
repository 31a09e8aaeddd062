"""Round 14's probe: a question that asks for a set ("What martial arts has John done?") shares its
characters evenly among the places it finds, instead of growing the first place's window most.

    python bench/retrieval/list_probe.py DATA_DIR [--only NAME ...] [--out FILE.md]
    python bench/retrieval/list_probe.py DATA_DIR --generated NAME ...   # the generated notes suite

Why, independent of the dev conversations: the windows grow greedily by score per character weighted by
rank (`SearchTuning.rank_decay` 0.8 per place), so the first place may take up to `max_window_chars`
(2,800) of the 4,200 and the sixth gets a line or two. That is right for a question with one answer (the
first place is the likeliest to hold it, and the turns around it explain it). A question that asks for
a set — present perfect over the whole history ("has … done / read / visited"), a plural head noun
("What books", "Which cities"), "both", "how many", "what are the names" — has one item per place, told
in different sessions: the lower places' best lines are worth as much as the first's, and the first
place's 2,000 extra characters of context hold no other item. The question's form says so before any
search, in any memory. Modes (each only for questions of that form, `list_form`; the others search as
before):

- `flat`: every place's growth weighs alike (rank_decay 1);
- `cap-N`: no window past N characters (the rest goes to the other places, or to the places under
  min_score that fill free slots, round 7);
- `flat-cap-N`: both;
- `flat-all`: rank_decay 1 for every question (the control: round 4 measured 0.9 for all, 0.843 vs 0.844);
- `min-S`: min_score S (0.3 / 0.25 / 0.2 instead of 0.35) — each item of a set is one turn in a session of
  twenty, so its chunk matches the question more weakly than a chunk about one answer does; the
  configured min_score is calibrated on those (round 8's `min-score-0` for every question: 0.852);
- `same`: nothing changed (must equal `default`).
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402
from hermit.memory.search.tuning import SearchTuning  # noqa: E402

LIST_FORM = re.compile(
    r"""^(?:what|which|who|where)\b(?:\s+[\w'+/-]+){0,4}?\s+(?:has|have)\s+\w   # present perfect: has … done
     |^(?:what|which)\s+(?:[\w'+-]+\s+){0,2}?[a-z]{3,}s\s+(?:has|have|does|do|is|are)\b  # plural head noun
     |\bboth\b|^what\s+are\s+(?:the\s+)?names\b|^how\s+many\b""", re.I | re.X)


def list_form(query: str) -> bool:
    return bool(LIST_FORM.search(query.strip()))


Change = dict[str, Any]
MODES: dict[str, tuple[Change, bool]] = {
    "same": ({}, False),
    "flat": ({"rank_decay": 1.0}, False),
    "cap-1400": ({"max_window_chars": 1400}, False),
    "cap-2000": ({"max_window_chars": 2000}, False),
    "flat-cap-1400": ({"rank_decay": 1.0, "max_window_chars": 1400}, False),
    "flat-all": ({"rank_decay": 1.0}, True),
    "min-0.3": ({"min_score": 0.3}, False),
    "min-0.25": ({"min_score": 0.25}, False),
    "min-0.2": ({"min_score": 0.2}, False),
}


def patch(searcher: HybridSearcher, change: Change, every: bool) -> None:
    plain = searcher._search
    base: SearchTuning = searcher.tuning
    base_cfg = searcher.cfg
    change = dict(change)
    cfg = base_cfg.model_copy(update={"min_score": change.pop("min_score")}) if "min_score" in change else base_cfg
    other = dataclasses.replace(base, **change)

    def search(query: str, *args: Any) -> Any:
        hit = every or list_form(query)
        searcher.tuning, searcher.cfg = (other, cfg) if hit else (base, base_cfg)
        try:
            return plain(query, *args)
        finally:
            searcher.tuning, searcher.cfg = base, base_cfg

    searcher._search = search  # type: ignore[method-assign]


BILINGUAL = ("zh", "en2zh", "zh2en")
TYPES = ("paraphrase", "identifier", "name", "date", "zh", "en2zh", "zh2en", "multi", "recent")


def generated(runs: dict[str, Callable[[HybridSearcher], None]]) -> list[str]:
    """The generated notes suite (run.py's workspace, 10 results) with each run's patch on its searcher:
    overall, its bilingual questions, its no-answer owner questions, and by type."""
    import run as G
    from score import read_jsonl

    queries = read_jsonl(G.QUERIES)
    n_list = sum(list_form(str(q["query"])) for q in queries)
    out = ["", f"## The generated suite (run.py's workspace, {len(queries)} questions, 10 results; {n_list} of list "
           "form)", "", "| variant | R@6 | MRR | bilingual R@6 | bilingual MRR | absent any | "
           + " | ".join(TYPES) + " |", "|---|" + "---:|" * (5 + len(TYPES))]
    for name, fix in {"default": lambda s: None, **runs}.items():
        report, _lat, gone = G.run_changed(next(v for v in G.variants() if v.name == "default"), queries, fix)
        o = report.overall
        bi = [q for q in report.per_query if q["type"] in BILINGUAL]
        out.append(f"| {name} | {o['R@6']:.3f} | {o['MRR']:.3f} | "
                   f"{statistics.fmean(float(q['R@6']) for q in bi):.3f} | "  # type: ignore[arg-type]
                   f"{statistics.fmean(float(q['MRR']) for q in bi):.3f} | {gone['any']:.2f} | "  # type: ignore[arg-type]
                   + " | ".join(f"{report.by_type[t]['R@6']:.2f}" for t in TYPES) + " |")
        print(out[-1], file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    ap.add_argument("--generated", nargs="*", help="run these modes on the generated notes suite only")
    args = ap.parse_args(argv)
    if args.generated is not None:
        print("\n".join(generated({m: (lambda s, c=MODES[m][0], e=MODES[m][1]: patch(s, c, e))
                                   for m in args.generated})))
        return 0
    queries = C.read_jsonl(args.data / "queries.jsonl")
    forms: dict[str, list[int]] = {}
    for q in queries:
        forms.setdefault(str(q["category_name"]), [0, 0])[list_form(str(q["query"]))] += 1
    print("list form by category (no / yes): " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in forms.items()),
          file=sys.stderr)
    rows = [C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)]
    for name, (change, every) in MODES.items():
        if args.only and name not in args.only:
            continue
        v = C.Variant(name, f"{change} for {'every' if every else 'list-form'} question", family="list")
        rows.append(C.run_changed(args.data, v, queries,
                                  lambda svc, _conv, c=change, e=every: patch(svc.searcher, c, e)))
        C.progress(name, rows[-1], chars=True)
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
