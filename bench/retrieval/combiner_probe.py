"""Round 12's probe: a small learned combiner of the search's own signals, trained on two conversations and
tested on the third.

    python bench/retrieval/combiner_probe.py DATA_DIR [--only lr lr-fill lr-both] [--drop FEATURE ...]
        [--l2 1.0] [--dump FILE.json] [--generated] [--mixed] [--out FILE.md]

The search orders the chunks that passed min_score by `0.8 · fused + 0.2 · best line` (hand-picked in
round 5) and the weaker places that fill unused results by their best line alone (memory/search/ordering.py
`by_best_line`). A logistic regression over the signals the search already has for each of those
chunks (no new index work, no model call) might generalise better than constants picked on the dev set:

    fused score, BM25 text score, chunk cosine, best line cosine (all calibrated, on [0, 1]), whether the
    chunk is of a day the question names (date boost), its rank and its gap to the best in the fused
    order, and how recent its day is among the places ranked (recency)

First a dump run (the default search) records these for every chunk the search orders (the first
line_order_depth × max_results passed chunks, and the weaker candidates ranked for the fill), labelled
1 when the chunk holds a gold line of the question. Then, for each conversation held out, a model is
fitted on the other two (L2-regularised, standardised features, Newton's method; no new dependency)
and the search runs with it in place of the hand-picked order:

- `lr-hold-XX` (passed places): the passed chunks in order of the model's probability; their scores
  (what the agent sees, the fill gate, round 9's rule) stay the search's own;
- `lr-fill-hold-XX`: the weaker places of the fill in the order of a model fitted on those;
- `lr-both-hold-XX`: both.

Each variant runs on all three conversations (the rotation table shows its change on the two it was
fitted on and on the one held out); the summary assembles the held-out figure of each conversation
(each scored by the model that never saw it) into one cross-validated row. `same` is the probe with the
search's own order (must equal `default`). `--drop` leaves features out of the models; `--dump` keeps
the dump run's rows for the next run; `--generated` also runs the generated suite (run.py's workspace
and queries, 10 results) with each rotation's passed-places model and one fitted on all three
conversations — a different kind of memory (notes, EN/ZH), which none of them saw; `--mixed` fits on
two conversations and half of the generated questions and tests on the third conversation and the other
half.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.index.line_vectors import best_cosines  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402
from hermit.memory.search.ordering import by_best_line  # noqa: E402

FEATURES = ("fused", "text", "cosine", "line", "dated", "rank", "gap", "recency")
_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})")


class Model:
    """Logistic regression on standardised features (Newton's method with an L2 penalty)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, l2: float = 1.0, cols: tuple[int, ...] = ()) -> None:
        self.cols = cols or tuple(range(x.shape[1]))
        x = x[:, self.cols]
        self.mu = x.mean(axis=0)
        self.sd = np.maximum(x.std(axis=0), 1e-6)
        z = np.hstack([(x - self.mu) / self.sd, np.ones((len(x), 1))])
        w = np.zeros(z.shape[1])
        reg = l2 * np.eye(z.shape[1])
        reg[-1, -1] = 0.0
        for _ in range(50):
            p = 1 / (1 + np.exp(-(z @ w)))
            grad = z.T @ (p - y) + reg @ w
            hess = (z * (p * (1 - p))[:, None]).T @ z + reg
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        self.w = w

    def score(self, x: np.ndarray) -> np.ndarray:
        x = x[:, self.cols]
        z = np.hstack([(x - self.mu) / self.sd, np.ones((len(x), 1))])
        return 1 / (1 + np.exp(-(z @ self.w)))

    def weights(self) -> dict[str, float]:
        return {**{FEATURES[c]: round(float(v), 3) for c, v in zip(self.cols, self.w[:-1], strict=True)},
                "bias": round(float(self.w[-1]), 3)}


class Probe:
    """The searcher's ordering stage, observed (dump) or replaced by a model (apply)."""

    def __init__(self, gold: dict[tuple[str, str], list[tuple[str, int]]]) -> None:
        self.gold = gold
        self.rows: list[dict[str, Any]] = []
        self.passed_model: Model | None = None
        self.fill_model: Model | None = None
        self.conv = ""

    def patch(self, searcher: HybridSearcher, conv: str) -> None:
        state: dict[str, Any] = {}
        plain_search, plain_score = searcher._search, searcher._score

        def search(query: str, *a: Any) -> Any:
            state["query"] = query
            return plain_search(query, *a)

        def score(query: str, c: Any, *a: Any) -> Any:
            state["c"] = c
            return plain_score(query, c, *a)

        def order(passed: list[tuple[int, float]], rows: dict[int, Any], q: np.ndarray, cos: dict[int, float],
                  depth: int, weight: float) -> tuple[list[tuple[int, float]], float]:
            ordered, nearest = by_best_line(passed, rows, searcher.store, q, cos, searcher._vscore, depth, weight)
            head = passed[:depth]
            if not head:
                return ordered, nearest
            x = self.features(searcher, head, rows, q, cos, state["c"])
            kind = "fill" if weight >= 1.0 else "passed"
            golds = self.gold.get((conv, state["query"]))
            if golds is not None:
                for (i, _), f in zip(head, x, strict=True):
                    r = rows[i]
                    self.rows.append({"conv": conv, "query": state["query"], "kind": kind, "x": f.tolist(),
                                      "y": int(any(p == r.path and r.start_line <= ln <= r.end_line
                                                   for p, ln in golds))})
            model = self.passed_model if kind == "passed" else self.fill_model
            if model is None:
                return ordered, nearest
            prob = model.score(x)
            if kind == "fill":  # nearest_first orders the fill by these values
                return [(i, float(p)) for (i, _), p in sorted(zip(head, prob, strict=True), key=lambda t: -t[1])], nearest
            value = dict(ordered)  # the search's own scores, in the model's order
            return [(i, value[i]) for (i, _), _p in sorted(zip(head, prob, strict=True), key=lambda t: -t[1])] \
                + ordered[len(head):], nearest

        searcher._search = search  # type: ignore[method-assign]
        searcher._score = score  # type: ignore[method-assign]
        searcher._order_by_lines = order  # type: ignore[method-assign]

    @staticmethod
    def features(searcher: HybridSearcher, head: list[tuple[int, float]], rows: dict[int, Any], q: np.ndarray,
                 cos: dict[int, float], c: Any) -> np.ndarray:
        spans = [(rows[i].path, rows[i].start_line, rows[i].end_line) for i, _ in head]
        best = best_cosines(searcher.store.line_vector_blobs(spans), q, len(spans))
        days = [m.group(1) if (m := _DAY.search(rows[i].path)) else "" for i, _ in head]
        known = sorted({d for d in days if d})
        top = max(s for _, s in head)
        out = []
        for r, ((i, s), b, d) in enumerate(zip(head, best, days, strict=True)):
            v = searcher._vscore(cos.get(i))
            out.append([s, searcher._tscore(c.rel.get(i, 0.0), c.rel), v,
                        searcher._vscore(b) if b is not None else v, float(i in c.dated),
                        r / max(1, len(head) - 1), top - s,
                        (known.index(d) / max(1, len(known) - 1)) if d else 0.5])
        return np.asarray(out, dtype=np.float64)


def fit(rows: list[dict[str, Any]], convs: list[str], kind: str, l2: float = 1.0,
        cols: tuple[int, ...] = ()) -> Model:
    use = [r for r in rows if r["conv"] in convs and r["kind"] == kind]
    return Model(np.asarray([r["x"] for r in use]), np.asarray([r["y"] for r in use], dtype=np.float64), l2, cols)


def run(data: Path, probe: Probe, name: str, note: str, queries: list[dict[str, Any]]) -> dict[str, Any]:
    return C.run_changed(data, C.Variant(name, note), queries, lambda svc, conv: probe.patch(svc.searcher, conv))


def held_out(rows: list[dict[str, Any]], names: dict[str, str]) -> dict[str, Any]:
    """Each conversation's figures from the variant whose model never saw it, pooled."""
    per_q = [q for conv, n in names.items() for q in next(r for r in rows if r["variant"] == n)["per_query"]
             if q["conv"] == conv]
    per_a = [a for conv, n in names.items() for a in next(r for r in rows if r["variant"] == n)["per_absent"]
             if a["conv"] == conv]
    mh = [q["seen"] for q in per_q if q["category"] == "multi-hop"]
    return {"seen": statistics.fmean(q["seen"] for q in per_q), "MRR": statistics.fmean(q["MRR"] for q in per_q),
            "chunk": statistics.fmean(q["chunk"] for q in per_q), "multi-hop": statistics.fmean(mh),
            "chars": statistics.fmean(q["chars"] for q in per_q), "chars_max": max(q["chars"] for q in per_q),
            "absent": statistics.fmean(a["results"] > 0 for a in per_a)}


def generated(models: dict[str, Model]) -> list[str]:
    """The generated suite (run.py: its own workspace, 10 results, R@6 / MRR by type) with each passed-places
    model, against the search's own order."""
    import run as G
    from score import read_jsonl

    queries = read_jsonl(G.QUERIES)
    out = ["", "Generated suite (run.py's workspace, 204 questions, 10 results; R@6 / MRR, then R@6 by type):", ""]
    for name, model in {"default": None, **models}.items():
        def change(s: HybridSearcher, m: Model | None = model) -> None:
            if m is not None:
                p = Probe({})
                p.passed_model = m
                p.patch(s, "generated")

        report, _lat, gone = G.run_changed(next(v for v in G.variants() if v.name == "default"), queries, change)
        o = report.overall
        out.append(f"- `{name}`: R@6 {o['R@6']:.3f}, MRR {o['MRR']:.3f}; " + ", ".join(
            f"{t} {m['R@6']:.2f}" for t, m in report.by_type.items()) + f"; absent any {gone['any']:.2f}")
        print(out[-1], file=sys.stderr)
    return out


def mixed(data: Path, dump: Probe, convs: list[str], queries: list[dict[str, Any]], l2: float,
          cols: tuple[int, ...]) -> list[str]:
    """A model fitted on both kinds of memory: two conversations and half of the generated suite's
    questions (by their order, even / odd), tested on the third conversation and the other half."""
    import run as G
    from score import norm_path, read_jsonl

    gq = read_jsonl(G.QUERIES)
    gold = {("generated", str(q["query"])): [(norm_path(str(g).rpartition(":")[0]), int(str(g).rpartition(":")[2]))
                                            for g in q["gold"]]  # type: ignore[attr-defined]
            for q in gq}
    half = {str(q["query"]): k % 2 for k, q in enumerate(gq)}
    default = next(v for v in G.variants() if v.name == "default")

    def generated_run(probe: Probe) -> Any:
        return G.run_changed(default, gq, lambda s: probe.patch(s, "generated"))[0]

    gdump = Probe(gold)
    base = generated_run(gdump)
    for r in gdump.rows:
        r["conv"] = f"generated-{half[r['query']]}"

    def figures(report: Any, part: int) -> str:
        rows = [q for k, q in enumerate(report.per_query) if k % 2 == part]
        return (f"{statistics.fmean(float(q['R@6']) for q in rows):.3f} / "
                f"{statistics.fmean(float(q['MRR']) for q in rows):.3f}")

    out = ["", "Fitted on both kinds (two conversations + one half of the generated suite's questions), tested on "
           "the third conversation and the other half (generated R@6 / MRR on that half; default in brackets):", ""]
    for h in convs:
        for part in (0, 1):
            tune = [c for c in convs if c != h] + [f"generated-{part}"]
            p = Probe({})
            p.passed_model = fit(dump.rows + gdump.rows, tune, "passed", l2, cols)
            name = f"mixed-hold-{h[5:]}-g{1 - part}"
            r = run(data, p, name, f"fitted on {' + '.join(tune)}", queries)
            g = generated_run(p)
            b = r
            out.append(f"- `{name}` (`{json.dumps(p.passed_model.weights())}`): held out {h[5:]} seen "
                       f"{C._pooled(b, [h], 'seen'):.3f} / MRR {C._pooled(b, [h], 'MRR'):.3f} / multi-hop "
                       f"{C._pooled(b, [h], 'multi-hop'):.3f}; generated half {1 - part}: {figures(g, 1 - part)} "
                       f"({figures(base, 1 - part)})")
            print(out[-1], file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--only", nargs="*", help="kinds to run: lr, lr-fill, lr-both (default: all)")
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--drop", nargs="*", default=[], choices=FEATURES, help="features left out of the models")
    ap.add_argument("--dump", type=Path, help="the dump run's rows: read from here when it exists, else written")
    ap.add_argument("--generated", action="store_true",
                    help="also run the generated suite with each rotation's model and one fitted on all three")
    ap.add_argument("--mixed", action="store_true",
                    help="also fit on two conversations and half of the generated suite, test on the rest")
    ap.add_argument("--out", type=Path, help="write the table here")
    args = ap.parse_args(argv)
    cols = tuple(k for k, f in enumerate(FEATURES) if f not in args.drop)
    queries = C.read_jsonl(args.data / "queries.jsonl")
    gold = {(str(q["conv"]), str(q["query"])): [(str(g["path"]), int(g["line"])) for g in q["gold"]] for q in queries}
    base = C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)
    dump = Probe(gold)
    rows = [base]
    if args.dump and args.dump.is_file():
        dump.rows = json.loads(args.dump.read_text())
    else:
        rows.append(run(args.data, dump, "same", "the probe, observing only (must equal default)", queries))
        if args.dump:
            args.dump.write_text(json.dumps(dump.rows))
    convs = sorted({str(q["conv"]) for q in queries})
    lines = ["Learned combiner (combiner_probe.py): logistic regression over "
             f"{', '.join(FEATURES[c] for c in cols)}; L2 {args.l2}. Weights on standardised features per rotation:",
             ""]
    picks: dict[str, dict[str, str]] = {}
    models: dict[str, Model] = {}
    for kind in ("lr", "lr-fill", "lr-both"):
        if args.only and kind not in args.only:
            continue
        picks[kind] = {}
        for h in convs:
            tune = [c for c in convs if c != h]
            p = Probe(gold)
            if kind in ("lr", "lr-both"):
                p.passed_model = fit(dump.rows, tune, "passed", args.l2, cols)
                models[f"lr-hold-{h[5:]}"] = p.passed_model
                lines.append(f"- {kind} hold out {h[5:]}, passed: `{json.dumps(p.passed_model.weights())}`")
            if kind in ("lr-fill", "lr-both"):
                p.fill_model = fit(dump.rows, tune, "fill", args.l2, cols)
                lines.append(f"- {kind} hold out {h[5:]}, fill: `{json.dumps(p.fill_model.weights())}`")
            name = f"{kind}-hold-{h[5:]}"
            r = run(args.data, p, name, f"{kind}: model fitted on {' + '.join(tune)}", queries)
            rows.append(r)
            picks[kind][h] = name
            print(f"{name}: seen {r['seen']:.3f} MRR {r['MRR']:.3f} multi-hop {r['by_category']['multi-hop']['seen']:.3f}"
                  f" absent {r['absent']['any']:.3f}", file=sys.stderr)
    everything = fit(dump.rows, convs, "passed", args.l2, cols)
    lines.append(f"- fitted on all three, passed: `{json.dumps(everything.weights())}`; standardisation "
                 f"mean `{[round(float(v), 4) for v in everything.mu]}` sd `{[round(float(v), 4) for v in everything.sd]}`")
    n_pass = sum(1 for r in dump.rows if r["kind"] == "passed")
    lines += ["", f"Training rows (dev questions, default search): {n_pass} passed chunks "
              f"({sum(r['y'] for r in dump.rows if r['kind'] == 'passed')} hold a gold line), "
              f"{len(dump.rows) - n_pass} fill candidates "
              f"({sum(r['y'] for r in dump.rows if r['kind'] == 'fill')} hold one).", "",
              "Cross-validated (each conversation scored by the model fitted on the other two):", "",
              "| | seen R@6 | chunk R@6 | MRR | multi-hop | chars mean / max | absent any |", "|---|---:|---:|---:|---:|---:|---:|"]
    b = held_out(rows, {c: "default" for c in convs})
    lines.append(f"| default | {b['seen']:.3f} | {b['chunk']:.3f} | {b['MRR']:.3f} | {b['multi-hop']:.3f} | "
                 f"{b['chars']:,.0f} / {b['chars_max']:,.0f} | {b['absent']:.3f} |")
    for kind, names in picks.items():
        f = held_out(rows, names)
        lines.append(f"| {kind} | {f['seen']:.3f} | {f['chunk']:.3f} | {f['MRR']:.3f} | {f['multi-hop']:.3f} | "
                     f"{f['chars']:,.0f} / {f['chars_max']:,.0f} | {f['absent']:.3f} |")
    if args.generated:
        lines += generated({**models, "lr-all": everything})
    if args.mixed:
        lines += mixed(args.data, dump, convs, queries, args.l2, cols)
    return C.emit("\n".join(lines) + "\n\n" + C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
