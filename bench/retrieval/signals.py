"""How well each ranking signal tells the chunks holding a question's answer from the other candidates.

    python bench/retrieval/signals.py DATA_DIR [--category all]

Round 8's instrument (bench/retrieval/README.md): before building a re-ranking stage, measure whether the
signal it would rank by separates the right chunks better than the fused score does. For every LoCoMo
dev question, at default settings, on the indexes `conversations.py` built, it takes the search's
candidates (either leg's pool and the days the question names) and, per question, the AUC of each
signal: the chance that a candidate holding a gold turn scores above one that holds none (ties count
half), averaged over the questions that have both kinds, overall and by category. Signals:

- `fused`: the search's score (both legs, rescue, date boost), what min_score and the order start from;
- `chunk cosine`: the chunk vector alone;
- `best line`: the calibrated cosine of the chunk's nearest line (line vectors);
- `fused + 0.3 line`: the two blended, as the passed places are ordered (at 0.2 there);
- `prf chunk β`: the vector leg's part of `fused` recomputed with the query moved β toward the mean
  vector of the first three passed chunks (Rocchio pseudo-relevance feedback);
- `prf line β`: the nearest line to the query moved β toward the best lines of the first two passed
  places;
- `keyword feedback`: the idf of the 8 rarest words of those best lines (not in the question) that a
  candidate holds (RM3-style expansion terms, scored on the candidates only);
- `fused + feedback`: `fused` plus 0.05 of that.

The signals are computed from the candidates' stored vectors and text; the search itself is unchanged.
Last, whether a second pass over the vector matrix with the feedback query (`prf chunk β`) would bring
more of the gold chunks into the vector leg's pool: the share of a question's gold chunks among the 24
nearest chunks of the whole conversation, with the query and with the moved query.
"""

from __future__ import annotations

import argparse
import collections
import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as conv_bench  # noqa: E402
from diagnose import _record  # noqa: E402

from hermit.memory.index.line_vectors import from_line_blob  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

_WORD = re.compile(r"[a-z]{3,}")


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-9)


class _Vectors:
    """Every chunk vector of one index, read once through the store's API."""

    def __init__(self, searcher: HybridSearcher) -> None:
        blocks = list(searcher.store.iter_vectors())
        self.ids = np.concatenate([b[0] for b in blocks]).astype(int)
        self.mat = np.vstack([b[1] for b in blocks]).astype(np.float32)
        self.row_of = {int(i): k for k, i in enumerate(self.ids)}

    def get(self, i: int) -> np.ndarray | None:
        k = self.row_of.get(i)
        return None if k is None else self.mat[k]


def _auc(pos: list[float], neg: list[float]) -> float:
    return statistics.fmean((p > n) + 0.5 * (p == n) for p in pos for n in neg)


def signals(searcher: HybridSearcher, vectors: _Vectors, log: dict[str, Any],
            question: str) -> dict[str, dict[int, float]]:
    c, q = log["c"], log["q"]
    ids = list(c.rows)
    fused = dict(log["scored"])
    cal = searcher._vscore
    blobs = searcher.store.line_vector_blobs([(c.rows[i].path, c.rows[i].start_line, c.rows[i].end_line) for i in ids])
    lines = {i: from_line_blob(blobs[k]).reshape(-1, q.shape[0]) for k, i in enumerate(ids) if blobs.get(k)}
    vecs = {i: v for i in ids if (v := vectors.get(i)) is not None}

    def best_line(i: int, qv: np.ndarray) -> float:
        if i in lines:
            return cal(float((lines[i] @ qv).max()))
        return cal(float(vecs[i] @ qv)) if i in vecs else 0.0

    passed = [i for i, _ in log["passed"]]
    out: dict[str, dict[int, float]] = {
        "fused": fused,
        "chunk cosine": {i: cal(c.cos.get(i)) for i in ids},
        "best line": {i: best_line(i, q) for i in ids},
    }
    out["fused + 0.3 line"] = {i: 0.7 * fused[i] + 0.3 * out["best line"][i] for i in ids}
    top = [vecs[i] for i in passed[:3] if i in vecs]
    for beta in (0.3, 0.6):
        qq = _unit(q + beta * _unit(np.mean(top, axis=0))) if top else q
        out[f"prf chunk {beta}"] = {i: fused[i] + 0.5 * ((cal(float(vecs[i] @ qq)) if i in vecs else 0.0)
                                                         - cal(c.cos.get(i))) for i in ids}
    heads = [lines[i][int(np.argmax(lines[i] @ q))] for i in passed[:2] if i in lines]
    for beta in (0.3, 0.6):
        qq = _unit(q + beta * _unit(np.mean(heads, axis=0))) if heads else q
        out[f"prf line {beta}"] = {i: best_line(i, qq) for i in ids}
    # Keyword feedback: the rarest words of the first two passed places' best lines, idf over the candidates.
    df: collections.Counter[str] = collections.Counter()
    words = {i: set(_WORD.findall(c.rows[i].text.lower())) for i in ids}
    for w in words.values():
        df.update(w)
    asked = set(_WORD.findall(question.lower()))
    found: set[str] = set()
    for i in passed[:2]:
        text = [t for t in c.rows[i].text.split("\n") if t.strip()]
        if i in lines and len(text) == len(lines[i]):
            found |= set(_WORD.findall(text[int(np.argmax(lines[i] @ q))].lower())) - asked
    idf = {w: math.log(len(ids) / df[w]) for w in found if 0 < df[w] < 0.3 * len(ids)}
    rare = dict(sorted(idf.items(), key=lambda x: (-x[1], x[0]))[:8])
    out["keyword feedback"] = {i: sum(v for w, v in rare.items() if w in words[i]) for i in ids}
    out["fused + feedback"] = {i: fused[i] + 0.05 * out["keyword feedback"][i] for i in ids}
    return out


def _reach(searcher: HybridSearcher, m: _Vectors, log: dict[str, Any], q: dict[str, Any],
           out: dict[str, dict[str, list[float]]]) -> None:
    rows = searcher.store.chunk_rows([int(i) for i in m.ids])
    gold = {int(i) for i in m.ids if any(rows[int(i)].path == g["path"] and
                                          rows[int(i)].start_line <= int(g["line"]) <= rows[int(i)].end_line
                                          for g in q["gold"])}
    if not gold:
        return
    top = [v for i, _ in log["passed"][:3] if (v := m.get(i)) is not None]
    for beta in (0.0, 0.3, 0.6):
        qq = _unit(log["q"] + beta * _unit(np.mean(top, axis=0))) if top and beta else log["q"]
        near = {int(m.ids[k]) for k in np.argsort(-(m.mat @ qq))[:24]}
        share = len(gold & near) / len(gold)
        out[f"β {beta}"][q["category_name"]].append(share)
        out[f"β {beta}"]["all"].append(share)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--category", default="all", help="a LoCoMo category, or 'all'")
    args = ap.parse_args(argv)
    queries = conv_bench.read_jsonl(args.data / "queries.jsonl")
    if args.category != "all":
        queries = [q for q in queries if q["category_name"] == args.category]
    v = next(x for x in conv_bench.variants() if x.name == "default")
    aucs: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    held = collections.Counter[str]()
    reach: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = conv_bench.service_for(args.data, conv, v)
        log: dict[str, Any] = {}
        _record(svc.searcher, log)
        vectors: _Vectors | None = None
        try:
            for q in (q for q in queries if q["conv"] == conv):
                svc.search_outcome(str(q["query"]), v.max_results)
                if log.get("q") is None:
                    continue
                rows = log["c"].rows
                gold: Callable[[int], bool] = lambda i, g=q["gold"], rows=rows: any(  # noqa: E731
                    rows[i].path == x["path"] and rows[i].start_line <= int(x["line"]) <= rows[i].end_line for x in g)
                pos_ids = [i for i in rows if gold(i)]
                held[q["category_name"]] += 1 if pos_ids else 0
                if not pos_ids or len(pos_ids) == len(rows):
                    continue
                vectors = vectors or _Vectors(svc.searcher)
                _reach(svc.searcher, vectors, log, q, reach)
                for name, s in signals(svc.searcher, vectors, log, str(q["query"])).items():
                    a = _auc([s[i] for i in pos_ids], [s[i] for i in rows if i not in pos_ids])
                    aucs[name][q["category_name"]].append(a)
                    aucs[name]["all"].append(a)
        finally:
            svc.close()
    cats = ["all", *conv_bench.CATEGORIES]
    print("| signal | " + " | ".join(cats) + " |")
    print("|---|" + "---:|" * len(cats))
    for name, by in aucs.items():
        print(f"| {name} | " + " | ".join(f"{statistics.fmean(by[c]):.3f}" if by[c] else "—" for c in cats) + " |")
    print(f"\nquestions with a gold turn among the candidates: {dict(held)}")
    print("\nGold chunks among the vector leg's 24 nearest (the query, and moved toward the first three passed):\n")
    print("| query | " + " | ".join(cats) + " |")
    print("|---|" + "---:|" * len(cats))
    for name, by in reach.items():
        print(f"| {name} | " + " | ".join(f"{statistics.fmean(by[c]):.3f}" if by[c] else "—" for c in cats) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
