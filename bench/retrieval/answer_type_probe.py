"""Would the answer's type, read from the question, order the places better?

    python bench/retrieval/answer_type_probe.py DATA_DIR [--only when-0.1 ...] [--out TABLE.md]

Round 17's instrument (bench/retrieval/README.md). A question says what kind of answer it wants before any
search: "When did Melanie go camping?" is answered by a turn carrying a time ("last week", "yesterday", "in
May", "two years ago"), whatever the topic. The search orders the places that passed min_score by their
best line's cosine blended in (memory.search.ordering.by_best_line, and the dialogue combiner's best-line
feature), and fills the slots left in their best line's order; e5 sees the topic, not the answer's type.

Modes (each changes one thing from the outside; `same` is the probe with nothing changed and must equal
`default`):
Every mode runs with the search's own answer type off (`SearchTuning.time_line_bonus` 0, what round 17 adopted
from this probe's `when-order` modes), so its `default` is round 16's search. The two patterns are the search's
(memory.search.answer_type).

- `when-δ`: for a question asking for a time (when, what day/date/month/year, how long ago), a line that
  carries an English time expression (not a heading) counts δ more (calibrated cosine units) when a
  chunk's best line is taken — in the order of the passed places, the combiner's feature, the fill's order
  and round 9's nearest line alike. Every other question is untouched.
- `when-order-δ`: `when-δ` in the order only; round 9's nearest line (whether anything said is close to the
  question) is read from the plain cosines, since a time word is no closeness.
- `when-only-δ`: the same, but a chunk's best line is taken among its time-carrying lines when it has any
  (δ then lifts that line): the answer-type as a filter on the line, not a bonus.

The rules read English only (the time words are a short fixed list, not learned from these conversations);
no index change.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.index import line_vectors as LV  # noqa: E402
from hermit.memory.search import hybrid, ordering  # noqa: E402
from hermit.memory.search.answer_type import ASKS_TIME, CARRIES_TIME  # noqa: E402
from hermit.memory.search.tuning import DEFAULT_TUNING  # noqa: E402

# The search's own answer type off: every mode starts from round 16's search.
OFF = dataclasses.replace(DEFAULT_TUNING, time_line_bonus=0.0)
# Set per search (the question) and per conversation (its workspace), read by the patched functions.
STATE: dict[str, Any] = {"query": "", "ws": None, "delta": 0.0, "only": False, "spans": []}
_files: dict[Path, list[str]] = {}
_plain_best = LV.best_cosines


def _line_text(path: str, line: int) -> str:
    ws: Path = STATE["ws"]
    f = ws / path
    if f not in _files:
        _files[f] = f.read_text(encoding="utf-8").split("\n")
    lines = _files[f]
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _typed_best(blobs: dict[int, bytes], query: np.ndarray, n: int) -> list[float | None]:
    """best_cosines with the answer-type prior: per line of each span (the spans the last line_vector_blobs
    call asked for), a time-carrying line gains δ (raw cosine: δ × the calibration span)."""
    spans = STATE["spans"]
    if not ASKS_TIME.search(STATE["query"]) or len(spans) != n or STATE["ws"] is None:
        return _plain_best(blobs, query, n)
    store = STATE["store"]
    bump = STATE["delta"] * 0.14  # e5's calibration: 0.78 → 0, 0.92 → 1
    q = np.asarray(query, dtype=np.float32)
    out: list[float | None] = [None] * n
    for k, (path, a, b) in enumerate(spans):
        got = store.conn.execute("select line, embedding from line_vectors where path=? and line between ? and ?"
                                 " order by line", (path, a, b)).fetchall()
        if not got:
            continue
        sims = LV.from_line_blob(b"".join(r[1] for r in got)).reshape(-1, q.shape[0]) @ q
        timed = np.array([bool(CARRIES_TIME.search(t)) and not t.lstrip().startswith("#")
                          for t in (_line_text(path, int(r[0])) for r in got)])
        if STATE["only"] and timed.any():
            out[k] = float((sims[timed] + bump).max())
        else:
            out[k] = float((sims + bump * timed).max())
    return out


def _plain_nearest_by_best_line(*a: Any, **k: Any) -> tuple[list[tuple[int, float]], float]:
    """by_best_line with the prior in the order only: round 9's nearest line (is anything said close to the
    question?) is read from the plain cosines, as a time word is no closeness."""
    order, _ = _plain_by_best_line(*a, **k)
    ordering.best_cosines = _plain_best  # type: ignore[assignment]
    try:
        _, nearest = _plain_by_best_line(*a, **k)
    finally:
        ordering.best_cosines = _typed_best  # type: ignore[assignment]
    return order, nearest


_plain_by_best_line = ordering.by_best_line


def _install(s: Any, ws: Path, delta: float, only: bool) -> None:
    store = s.store
    plain_blobs = store.line_vector_blobs
    plain_search = s._search

    def blobs(spans: Any) -> dict[int, bytes]:
        STATE["spans"] = list(spans)
        return plain_blobs(spans)

    def search(query: str, *a: Any) -> Any:
        STATE.update(query=query, ws=ws, delta=delta, only=only, store=store)
        return plain_search(query, *a)

    store.line_vector_blobs = blobs  # type: ignore[method-assign]
    s._search = search  # type: ignore[method-assign]


def modes() -> dict[str, tuple[float, bool, bool]]:
    out = {"same": (0.0, False, False)}
    for d in (0.05, 0.1, 0.2, 0.4):
        out[f"when-{d}"] = (d, False, False)
    for d in (0.0, 0.1):
        out[f"when-only-{d}"] = (d, True, False)
    for d in (0.05, 0.1, 0.2, 0.3, 0.4):
        out[f"when-order-{d}"] = (d, False, True)
    return out


def _patched(plain_near: bool) -> None:
    ordering.best_cosines = _typed_best  # type: ignore[assignment]
    hybrid.best_cosines = _typed_best  # type: ignore[assignment]
    hybrid.by_best_line = _plain_nearest_by_best_line if plain_near else _plain_by_best_line  # type: ignore


def _unpatched() -> None:
    ordering.best_cosines = _plain_best  # type: ignore[assignment]
    hybrid.best_cosines = _plain_best  # type: ignore[assignment]
    hybrid.by_best_line = _plain_by_best_line  # type: ignore[assignment]


def generated(names: list[str]) -> None:
    """The generated notes suite (run.py's default, 10 results) with each mode: R@6 / MRR overall, by type, and
    its owner questions with no answer."""
    import run as R

    qs = R.read_jsonl(R.QUERIES)
    v = dataclasses.replace(next(x for x in R.variants() if x.name == "default"), tuning=OFF)
    print(f"generated: questions asking for a time: {sum(1 for q in qs if ASKS_TIME.search(str(q['query'])))} "
          f"of {len(qs)}", file=sys.stderr)
    for name in ["default", *names]:
        if name == "default":
            rep, _, gone = R.run_variant(v, qs)
        else:
            delta, only, plain_near = modes()[name]
            _patched(plain_near)
            try:
                rep, _, gone = R.run_changed(v, qs, lambda s, d=delta, o=only: _install(s, R.WORKSPACE, d, o))
            finally:
                _unpatched()
        o = rep.overall
        print(f"generated {name}: R@6 {o['R@6']:.3f} MRR {o['MRR']:.3f} " + " ".join(
            f"{t} {m['R@6']:.2f}/{m['MRR']:.3f}" for t, m in rep.by_type.items()) + f" absent any {gone['any']:.2f}",
            file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    ap.add_argument("--generated", nargs="*", help="run these modes on the generated notes suite instead")
    args = ap.parse_args(argv)
    if args.generated is not None:
        generated(args.generated)
        return 0
    queries = C.read_jsonl(args.data / "queries.jsonl")
    asks = sum(1 for q in queries if ASKS_TIME.search(str(q["query"])))
    print(f"questions asking for a time: {asks} of {len(queries)}", file=sys.stderr)
    default = dataclasses.replace(next(v for v in C.variants() if v.name == "default"), tuning=OFF)
    rows = [C.run_variant(args.data, default, queries)]
    C.progress("default", rows[0], chars=True)
    try:
        for name, (delta, only, plain_near) in modes().items():
            if args.only and name not in args.only:
                continue
            _patched(plain_near)
            v = C.Variant(name, f"answer type: time-carrying lines +{delta}" + (" (best among them)" if only else ""),
                          tuning=OFF, family="" if name == "same" else "when")
            r = C.run_changed(args.data, v, queries,
                                lambda svc, conv, d=delta, o=only: _install(svc.searcher, args.data / "workspaces" / conv, d, o))
            C.progress(name, r, chars=True)
            rows.append(r)
    finally:
        _unpatched()
    text = {str(q["qid"]): str(q["query"]) for q in queries}
    for r in rows[1:]:
        changed = [(a, b) for a, b in zip(rows[0]["per_query"], r["per_query"], strict=True)
                   if (a["seen"], a["MRR"]) != (b["seen"], b["MRR"])]
        print(f"{r['variant']}: {len(changed)} questions change", file=sys.stderr)
        for a, b in changed[:12]:
            print(f"  {a['qid']} {text[a['qid']]!r}: seen {a['seen']:.2f} → {b['seen']:.2f}, MRR {a['MRR']:.3f} → "
                  f"{b['MRR']:.3f}", file=sys.stderr)
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
