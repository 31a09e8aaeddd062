"""Round 13's probe: round 12's learned combiner applied per kind of memory, with round 11's month-sparse.

    python bench/retrieval/kind_probe.py DATA_DIR [--drop FEATURE ...] [--l2 1.0] [--out FILE.md]

Round 12's combiner (combiner_probe.py: a logistic regression over the signals the search has for each
chunk it orders) passed the LoCoMo bar and lost the generated notes suite: it weighs a conversation's
words and its best turn over the chunk's vector, which is wrong for notes, above all for a note in the
other language. Here it acts only on the kind of memory it was fitted on:

- **kind** (`dialogue_shaped`): a chunk is dialogue when most of its lines are turns — a line that is
  "Name: words" (a bullet, a "[D1:3]" tag or a timestamp may come first; a full-width colon counts) —
  and its speakers speak again (at least three turns, no more distinct speakers than half the turns).
  That is what a transcript, a session dump ("user: …" / "assistant: …") or a chat log is, whoever wrote
  it; a note's "Key: value" lines name a different key each (four lines, four keys: not dialogue). The
  rule reads the chunk's text only: nothing in it is fitted to the three dev conversations.
- **per kind, slot-preserving**: the search orders the first line_order_depth × max_results passed
  chunks by `0.8 · fused + 0.2 · best line` (ordering.by_best_line). The combiner re-orders only the
  dialogue chunks among the places dialogue chunks hold in that order; every other chunk keeps its
  place and its score. A memory of notes only is searched exactly as today.
- **weights**: fitted on the dialogue chunks of two conversations (fixed L2 1.0, standardised features,
  recency left out by default: "older sessions are asked about more" is a fact about LoCoMo's
  questions, not about a user's conversations), run on all three; the cross-validated row scores each
  conversation with the model that never saw it. `kind-all` is fitted on all three (what ships:
  memory/search/dialogue_weights.py, written by kind_weights.py).
- every run here uses `SearchTuning(dialogue_order=False)` (the blend for every kind, round 12's search), so
  the probe's own combiner is what is measured, before and after the search adopted it.
- **month-sparse** (round 11, month_probe.py): "in June" as that month's days for the date boost when the
  month holds at most 7 dated notes; with the clock at the day after the conversation's last session
  (the `clock` of round 11, identical to `default`). Alone and with the combiner.

Also: how the rule classifies every chunk of the three LoCoMo workspaces and of the generated suite's
workspace (its notes, its session dumps, its bilingual notes: chunks holding Chinese), and the
generated suite with each model (all of it, and its bilingual questions: zh, en2zh, zh2en).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import re
import sqlite3
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import combiner_probe as CP  # noqa: E402
import conversations as C  # noqa: E402
import month_probe as MP  # noqa: E402

from hermit.memory.search import hybrid  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

# A turn: optional bullet, optional [tag] / timestamp, a speaker of one to four words (a parenthesised
# sender may follow: `User (3001 "Gus")`), a colon, then words.
_TURN = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:\[[^\]\n]{1,24}\]\s*)?(?:\(?\d{1,2}:\d{2}(?::\d{2})?\)?\s*)?"
    r"(?P<who>[^\W\d_][\w.'’-]*(?:\s[\w.'’-]+){0,3}?)(?:\s\([^)\n]{0,40}\))?\s*[:：]\s*\S")
_HEADING = re.compile(r"^\s*#")


def dialogue_shaped(text: str) -> bool:
    """Whether a chunk is dialogue: at least three turn lines, most of its lines (headings and blank lines
    aside) turns, and its speakers speak again (no more distinct speakers than
    half its turns, or two)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not _HEADING.match(ln)]
    who = [m.group("who").lower() for ln in lines if (m := _TURN.match(ln))]
    return len(who) >= 3 and len(who) * 2 > len(lines) and len(set(who)) <= max(2, len(who) // 2)


GEN_DB = HERE.parent / "out" / "retrieval" / "multilingual-e5-small-400-80.sqlite"
_DUMP = re.compile(r"(?:^|/)\d{4}-\d{2}-\d{2}-[^/]+\.md$")


def classify(data: Path, convs: list[str]) -> list[str]:
    """How the rule classifies every chunk of each workspace's index."""
    out = ["## How the rule classifies the chunks", "",
           "| workspace | chunks | dialogue | notes | share dialogue |", "|---|---:|---:|---:|---:|"]

    def row(name: str, texts: list[str]) -> None:
        d = sum(dialogue_shaped(t) for t in texts)
        out.append(f"| {name} | {len(texts)} | {d} | {len(texts) - d} | {d / max(1, len(texts)):.3f} |")

    for conv in convs:
        db = C.OUT / f"{conv}.sqlite"
        with sqlite3.connect(db) as con:
            row(f"LoCoMo {conv}", [t for (t,) in con.execute("select text from chunks")])
    with sqlite3.connect(GEN_DB) as con:
        rows = con.execute("select path, text, cjk from chunks").fetchall()
    row("generated suite, all", [t for _, t, _ in rows])
    row("… daily notes and MEMORY.md", [t for p, t, _ in rows if not _DUMP.search(p)])
    row("… session dumps (memory/YYYY-MM-DD-slug.md)", [t for p, t, _ in rows if _DUMP.search(p)])
    row("… bilingual notes (chunks holding Chinese)", [t for _, t, k in rows if k])
    wrong = [p for p, t, _ in rows if dialogue_shaped(t) != bool(_DUMP.search(p))]
    out += ["", f"Generated chunks whose kind differs from their file's (dump or note): {len(wrong)}"
            + (f" ({', '.join(sorted(set(wrong)))})" if wrong else ""), ""]
    return out


class KindProbe(CP.Probe):
    """The ordering stage with the combiner acting on dialogue chunks only, in their own places (`slots`);
    or, `head`, on the whole head when most of its chunks are dialogue (the kind of the search, not of
    each chunk: a note among them is ordered by the conversation model too)."""

    mode = "slots"
    kind_model: CP.Model | None = None  # applied here, to each conversation the probe is patched into

    def patch(self, searcher: HybridSearcher, conv: str) -> None:
        super().patch(searcher, conv)
        plain_order = searcher._order_by_lines  # combiner_probe's (records rows, applies passed_model)
        model = self.kind_model  # the parent's passed_model stays None: it records, this applies
        state: dict[str, Any] = {}
        plain_score = searcher._score

        def score(query: str, c: Any, *a: Any) -> Any:
            state["c"] = c
            return plain_score(query, c, *a)

        searcher._score = score  # type: ignore[method-assign]

        def order(passed: list[tuple[int, float]], rows: dict[int, Any], q: np.ndarray, cos: dict[int, float],
                  depth: int, weight: float) -> tuple[list[tuple[int, float]], float]:
            n0 = len(self.rows)
            ordered, nearest = plain_order(passed, rows, q, cos, depth, weight)
            head = passed[:depth]
            kinds = {i: dialogue_shaped(rows[i].text) for i, _ in head}
            for r, (i, _) in zip(self.rows[n0:], head, strict=False):
                r["dialogue"] = kinds[i]
            if model is None or weight >= 1.0 or sum(kinds.values()) < 2:
                return ordered, nearest
            whole = self.mode == "head"
            if whole and sum(kinds.values()) * 2 <= len(head):
                return ordered, nearest
            x = self.features(searcher, head, rows, q, cos, state["c"])
            prob = dict(zip((i for i, _ in head), model.score(x), strict=True))
            top = ordered[:len(head)]
            value = dict(top)  # each chunk keeps the search's own score
            if whole:
                kinds = dict.fromkeys(kinds, True)
            return [(j, value[j]) for j in _slots(top, kinds, prob)] + ordered[len(head):], nearest

        searcher._order_by_lines = order  # type: ignore[method-assign]


def _slots(top: list[tuple[int, float]], kinds: dict[int, bool], prob: dict[int, float]) -> list[int]:
    """The chunks of `top` with the dialogue ones re-ordered by `prob` among the places they hold."""
    dial = iter(sorted((i for i, _ in top if kinds[i]), key=lambda i: -prob[i]))
    return [next(dial) if kinds[i] else i for i, _ in top]


def with_month_sparse(service: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(data: Path, conv: str, v: C.Variant) -> Any:
        MP.DAYS = MP.note_days(data / "workspaces" / conv)
        svc = service(data, conv, v)
        day = dt.datetime.combine(MP.last_day(data / "workspaces" / conv) + dt.timedelta(days=1), dt.time(12))
        svc.searcher.clock = day.timestamp
        return svc
    return wrapped


def run(data: Path, probe: KindProbe | None, name: str, note: str, queries: list[dict[str, Any]],
        month: bool = False) -> dict[str, Any]:
    plain_service = C.service_for

    def service(d: Path, conv: str, v: C.Variant) -> Any:
        svc = plain_service(d, conv, v)
        if probe is not None:
            probe.patch(svc.searcher, conv)
        return svc

    C.service_for = with_month_sparse(service) if month else service  # type: ignore[assignment]
    if month:
        hybrid.query_day_ranges = MP.with_months  # type: ignore[assignment]
    try:
        return C.run_variant(data, C.Variant(name, note, tuning=BLEND), queries)
    finally:
        C.service_for = plain_service  # type: ignore[assignment]
        hybrid.query_day_ranges = MP._plain_ranges  # type: ignore[assignment]
        MP.DAYS = None


BILINGUAL = ("zh", "en2zh", "zh2en")
# Every run here starts from the hand-picked blend for every kind (round 12's order), so its figures stay
# the same once the combiner is the search's own (SearchTuning.dialogue_order).
BLEND = C.T(dialogue_order=False)


def generated(models: dict[str, CP.Model | None], month_models: tuple[str, ...]) -> list[str]:
    """The generated suite (run.py: 10 results) with each model acting per kind, with and without
    month-sparse: overall, its bilingual questions, and by type."""
    import run as G
    from score import read_jsonl

    queries = read_jsonl(G.QUERIES)
    out = ["", "## The generated suite (run.py's workspace, 204 questions, 10 results)", "",
           "| variant | R@6 | MRR | bilingual R@6 (69) | bilingual MRR | absent any | "
           + " | ".join(f"{t}" for t in ("paraphrase", "identifier", "name", "date", "zh", "en2zh", "zh2en",
                                          "multi", "recent")) + " |",
           "|---|" + "---:|" * 14]
    runs = [(n, m, False) for n, m in models.items()] + [(f"{n}+month-sparse", models[n], True) for n in month_models]
    for name, model, month in runs:
        def change(s: HybridSearcher, m: CP.Model | None = model) -> None:
            if m is not None:
                p = KindProbe({})
                p.kind_model = m
                p.patch(s, "generated")

        if month:
            hybrid.query_day_ranges = MP.with_months  # type: ignore[assignment]
            MP.DAYS = MP.note_days(G.WORKSPACE)
        try:
            report, _lat, gone = G.run_changed(dataclasses.replace(
                next(v for v in G.variants() if v.name == "default"), tuning=BLEND), queries, change)
        finally:
            hybrid.query_day_ranges = MP._plain_ranges  # type: ignore[assignment]
            MP.DAYS = None
        o = report.overall
        bi = [q for q in report.per_query if q["type"] in BILINGUAL]
        out.append(f"| {name} | {o['R@6']:.3f} | {o['MRR']:.3f} | "
                   f"{statistics.fmean(float(q['R@6']) for q in bi):.3f} | "  # type: ignore[arg-type]
                   f"{statistics.fmean(float(q['MRR']) for q in bi):.3f} | {gone['any']:.2f} | "  # type: ignore[arg-type]
                   + " | ".join(f"{report.by_type[t]['R@6']:.2f}" for t in ("paraphrase", "identifier", "name", "date",
                                                                          "zh", "en2zh", "zh2en", "multi", "recent"))
                   + " |")
        print(out[-1], file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--drop", nargs="*", default=["recency"], choices=CP.FEATURES)
    ap.add_argument("--dump", type=Path, help="the dump run's rows: read from here when it exists, else written")
    ap.add_argument("--no-generated", action="store_true")
    ap.add_argument("--mode", choices=("slots", "head"), default="slots",
                    help="slots: dialogue chunks re-ordered among their own places; head: the whole head when "
                    "most of it is dialogue")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    cols = tuple(k for k, f in enumerate(CP.FEATURES) if f not in args.drop)
    KindProbe.mode = args.mode
    queries = C.read_jsonl(args.data / "queries.jsonl")
    convs = sorted({str(q["conv"]) for q in queries})
    lines = ["# Round 13: the learned combiner per kind of memory, and month-sparse", "",
             f"`python bench/retrieval/kind_probe.py DATA_DIR {' '.join(sys.argv[2:])}`".replace(" `", "`"), ""]
    lines += classify(args.data, convs)
    gold = {(str(q["conv"]), str(q["query"])): [(str(g["path"]), int(g["line"])) for g in q["gold"]] for q in queries}
    rows = [C.run_variant(args.data, C.Variant("default", "the hand-picked blend for every kind (round 12)",
                                               tuning=BLEND), queries)]
    dump = KindProbe(gold)
    if args.dump and args.dump.is_file():
        dump.rows = json.loads(args.dump.read_text())
    else:
        rows.append(run(args.data, dump, "same", "the probe, observing only (must equal default)", queries))
        if args.dump:
            args.dump.write_text(json.dumps(dump.rows))
    train = [r for r in dump.rows if r.get("dialogue")]
    n_pass = [r for r in dump.rows if r["kind"] == "passed"]
    lines += [f"Training rows (dev questions, default search, passed chunks): {len(n_pass)}, of which "
              f"{sum(1 for r in n_pass if r.get('dialogue'))} dialogue-shaped "
              f"({sum(r['y'] for r in n_pass if r.get('dialogue'))} hold a gold line). Features: "
              f"{', '.join(CP.FEATURES[c] for c in cols)}; L2 {args.l2} (fixed, not tuned).", "", "Weights (standardised):", ""]
    models: dict[str, CP.Model | None] = {"default": None}
    names: dict[str, dict[str, str]] = {"kind": {}, "kind+month": {}}
    rows.append(run(args.data, None, "month-sparse", "round 11's month-sparse, clock at the day after the last "
                    "session", queries, month=True))
    for h in convs:
        tune = [c for c in convs if c != h]
        m = CP.fit(train, tune, "passed", args.l2, cols)
        models[f"kind-hold-{h[5:]}"] = m
        lines.append(f"- hold out {h[5:]}: `{json.dumps(m.weights())}`")
        for fam, month in (("kind", False), ("kind+month", True)):
            p = KindProbe(gold)
            p.kind_model = m
            name = f"{fam}-hold-{h[5:]}"
            r = run(args.data, p, name, f"{fam}: combiner fitted on {' + '.join(tune)}, dialogue chunks only",
                    queries, month)
            rows.append(r)
            names[fam][h] = name
            print(f"{name}: seen {r['seen']:.3f} MRR {r['MRR']:.3f} multi-hop "
                  f"{r['by_category']['multi-hop']['seen']:.3f} absent {r['absent']['any']:.3f}", file=sys.stderr)
    everything = CP.fit(train, convs, "passed", args.l2, cols)
    models["kind-all"] = everything
    lines.append(f"- fitted on all three: `{json.dumps(everything.weights())}`; standardisation mean "
                 f"`{[round(float(v), 4) for v in everything.mu]}` sd `{[round(float(v), 4) for v in everything.sd]}`")
    lines += ["", "## Cross-validated (each conversation scored by the model fitted on the other two)", "",
              "| | seen R@6 | chunk R@6 | MRR | multi-hop | chars mean / max | absent any |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for label, nm in (("default", {c: "default" for c in convs}), ("month-sparse", {c: "month-sparse" for c in convs}),
                      ("kind (cross-validated)", names["kind"]),
                      ("kind + month-sparse (cross-validated)", names["kind+month"])):
        f = CP.held_out(rows, nm)
        lines.append(f"| {label} | {f['seen']:.3f} | {f['chunk']:.3f} | {f['MRR']:.3f} | {f['multi-hop']:.3f} | "
                     f"{f['chars']:,.0f} / {f['chars_max']:,.0f} | {f['absent']:.3f} |")
    if not args.no_generated:
        lines += generated(models, ("default", "kind-all"))
    return C.emit("\n".join(lines) + "\n\n" + C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
