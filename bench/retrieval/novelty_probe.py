"""Round 14's probe: among the places that passed, one whose answering turn says what a place above it
already said gives way to the next (maximal marginal relevance on the best line's vector).

    python bench/retrieval/novelty_probe.py DATA_DIR [--only NAME ...] [--out FILE.md]
    python bench/retrieval/novelty_probe.py DATA_DIR --generated NAME ...   # the generated notes suite

Why, independent of the dev conversations: a question that asks for a set ("What has Melanie painted?",
"Where has Melanie camped?") is answered by one turn in each of several sessions, and the sessions
that share the question's words often tell the same item again ("I painted that sunset" / "the sunset
painting is in the hall"). Round 4's MMR compared whole chunks by their words (a chunk is twenty
turns: two sessions about painting look alike whatever item each names; 0.851, −0.005 on the generated
suite) and round 12's spread compared their days (0.853–0.862). Neither compares what the place would
answer with. The line vectors already give each place's best line (round 5); here, once the first place
is taken, each next one among the first line_order_depth × max_results passed chunks is the one with
the best `score − μ · max cosine(its best line, the best line of a place already taken)` (raw e5
cosines, which sit 0.7–1.0; the excess over `floor` counts, so unrelated lines weigh nothing), greedily;
the rest keep their order. Applied after the search's whole order (line blend, notes first, the dialogue
combiner), each chunk keeping its own score. `nov-μ-floor`: μ 0.1 / 0.2 / 0.4 / 1 / 2 at floor 0.85 / 0.9;
`list-…`: only for questions of list form (list_probe.list_form). `same`: nothing changed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402
from list_probe import generated, list_form  # noqa: E402

from hermit.memory.index.line_vectors import from_line_blob  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

MODES: dict[str, tuple[float, float, bool]] = {
    "same": (0.0, 0.9, False),
    **{f"nov-{m}-{f}": (m, f, False) for m in (0.1, 0.2, 0.4, 1.0, 2.0) for f in (0.85, 0.9)},
    **{f"list-nov-{m}-{f}": (m, f, True) for m in (0.4, 1.0) for f in (0.85, 0.9)},
}


def best_line_vectors(searcher: HybridSearcher, head: list[tuple[int, float]], rows: dict[int, Any],
                      q: np.ndarray) -> list[np.ndarray | None]:
    spans = [(rows[i].path, rows[i].start_line, rows[i].end_line) for i, _ in head]
    blobs = searcher.store.line_vector_blobs(spans)
    dim = q.shape[0]
    out: list[np.ndarray | None] = []
    for k in range(len(head)):
        b = blobs.get(k)
        if not b:
            out.append(None)
            continue
        m = from_line_blob(b).reshape(-1, dim)
        out.append(m[int(np.argmax(m @ q))])
    return out


def novel(searcher: HybridSearcher, ordered: list[tuple[int, float]], rows: dict[int, Any], q: np.ndarray,
          depth: int, mu: float, floor: float) -> list[tuple[int, float]]:
    head, tail = ordered[:depth], ordered[depth:]
    if mu <= 0 or len(head) < 2:
        return ordered
    vecs = best_line_vectors(searcher, head, rows, q)
    rank = {i: r for r, (i, _) in enumerate(head)}
    n = len(head)
    # The order's own value: each place keeps its score's rank as value (scores may not be monotone after
    # the combiner); a linear value from 1 (first) to 0 (last of the head) on the order given.
    value0 = {i: 1.0 - r / max(1, n - 1) for i, r in rank.items()}
    taken: list[tuple[int, float]] = []
    taken_vecs: list[np.ndarray] = []
    rest = list(head)
    while rest:
        def value(item: tuple[int, float]) -> float:
            v = vecs[rank[item[0]]]
            if v is None or not taken_vecs:
                return value0[item[0]]
            sim = max(float(v @ w) for w in taken_vecs)
            return value0[item[0]] - mu * max(0.0, sim - floor) / (1 - floor)

        best = max(rest, key=value)
        rest.remove(best)
        taken.append(best)
        v = vecs[rank[best[0]]]
        if v is not None:
            taken_vecs.append(v)
    return taken + tail


def patch(searcher: HybridSearcher, mu: float, floor: float, list_only: bool) -> None:
    plain_order = searcher._order
    plain_search = searcher._search
    state = {"query": ""}

    def search(query: str, *args: Any) -> Any:
        state["query"] = query
        return plain_search(query, *args)

    def order(scored: list[tuple[int, float]], c: Any, q: Any, max_results: int, min_score: float,
              timings: dict[str, float], judged: bool = True) -> list[tuple[int, float]]:
        out = plain_order(scored, c, q, max_results, min_score, timings, judged)
        if q is None or not out or (list_only and not list_form(state["query"])):
            return out
        return novel(searcher, out, c.rows, q, searcher.tuning.line_order_depth * max_results, mu, floor)

    searcher._search = search  # type: ignore[method-assign]
    searcher._order = order  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    ap.add_argument("--generated", nargs="*", help="run these modes on the generated notes suite only")
    args = ap.parse_args(argv)
    if args.generated is not None:
        print("\n".join(generated({m: (lambda s, a=MODES[m]: patch(s, *a)) for m in args.generated})))
        return 0
    queries = C.read_jsonl(args.data / "queries.jsonl")
    rows = [C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)]
    for name, (mu, floor, list_only) in MODES.items():
        if args.only and name not in args.only:
            continue
        v = C.Variant(name, f"μ {mu} over cosine {floor}{' (list form only)' if list_only else ''}",
                      family="novelty-list" if list_only else "novelty")
        rows.append(C.run_changed(args.data, v, queries,
                                  lambda svc, _conv, m=mu, f=floor, lo=list_only: patch(svc.searcher, m, f, lo)))
        C.progress(name, rows[-1], chars=True)
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
