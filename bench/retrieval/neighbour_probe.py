"""Round 18's probe for knowing when nothing matches: is a question word that no note holds near any word a note holds?

    python bench/retrieval/neighbour_probe.py DATA_DIR [--json FILE] [--show]

Why, independent of the dev conversations: round 14 (`unseen_probe.py`) found that a question about something the
memory never mentions names it with a word in no note ("skydiving", "passport"), but so do answered questions, whose
word is a framing word or a variant of one the notes use ("participated", "grandmother" for grandma, "accident" for a
crash, "October" beside September, a typo). What tells them apart is not the word's absence but whether the memory
has a word *like* it. This probe embeds every word of a workspace once (e5, as a passage: round 10 found e5 places
single words by kind) and, for each question word in no note (memory.search.fts.query_terms with document frequency
0), takes its nearest word of the workspace and that cosine. The rule measured: "return nothing when a question word
in no note has no workspace word within τ (raw cosine) and the best returned place's vector score is under V"; per
(τ, V), the no-answer searches it empties and the answered dev questions it loses, per conversation, the rotations
(τ, V picked on two conversations as the rule that empties most and loses nothing, applied to the third), and the
generated notes suite (its questions at 10 results as run.py asks them; its no-answer questions at 6).
Nothing in the search changes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import absent  # noqa: E402
import conversations as C  # noqa: E402
import run as R  # noqa: E402
from unseen_probe import probe  # noqa: E402

from hermit.config.memory_search import QueryConfig  # noqa: E402
from hermit.memory.search.fts import query_terms  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402
from hermit.memory.search.lexicon import load_lexicon  # noqa: E402

WORD = re.compile(r"[^\W\d_]+")
# The rotations pick on the fine grid; the table prints the coarse one.
TAUS = tuple(round(0.85 + 0.005 * i, 3) for i in range(19))
VS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 1.01)
TABLE_TAUS = (0.86, 0.87, 0.88, 0.89, 0.90, 0.91, 0.92, 0.93)
TABLE_VS = (0.2, 0.3, 0.4, 1.01)


def vocabulary(ws: Path) -> list[str]:
    words: set[str] = set()
    for f in sorted(ws.rglob("*.md")):
        words.update(w.lower() for w in WORD.findall(f.read_text(encoding="utf-8")))
    return sorted(words)


class Nearest:
    """The nearest workspace word to a term, by e5 passage vectors (the workspace's words embedded once)."""

    def __init__(self, emb: Any, ws: Path, cache: Path) -> None:
        self.emb = emb
        self.vocab = vocabulary(ws)
        if cache.exists() and json.loads(cache.with_suffix(".json").read_text()) == self.vocab:
            self.vecs = np.load(cache)
        else:
            self.vecs = np.vstack([emb.embed_documents(self.vocab[i:i + 256]) for i in range(0, len(self.vocab), 256)])
            np.save(cache, self.vecs)
            cache.with_suffix(".json").write_text(json.dumps(self.vocab))
        self.memo: dict[str, tuple[str, float]] = {}

    def __call__(self, term: str) -> tuple[str, float]:
        if term not in self.memo:
            sims = self.vecs @ np.asarray(self.emb.embed_documents([term]))[0]
            j = int(np.argmax(sims))
            self.memo[term] = (self.vocab[j], float(sims[j]))
        return self.memo[term]


def annotate(row: dict[str, Any], near: Nearest) -> dict[str, Any]:
    row["near"] = {t: near(t) for t in row["missing"]}
    row["floor"] = min((c for _, c in row["near"].values()), default=1.0)
    return row


def fires(row: dict[str, Any], tau: float, v: float) -> bool:
    return bool(row["results"]) and row["floor"] < tau and row["vector"] < v


def count(rows: list[dict[str, Any]], tau: float, v: float) -> tuple[int, int]:
    emptied = sum(fires(r, tau, v) for r in rows if r["kind"] != "dev")
    lost = sum(fires(r, tau, v) and r["seen"] > 0 for r in rows if r["kind"] == "dev")
    return emptied, lost


def generated(cache: Path) -> list[dict[str, Any]]:
    v = next(x for x in R.variants() if x.name == "default")
    svc = R.service_for(v)
    emb = R._embedders[v.model]
    qcfg = QueryConfig.model_validate(v.query)
    lexicon = load_lexicon(R.OUT / "cache") if qcfg.translation_weight > 0 else None
    searcher = HybridSearcher(svc.store, emb, qcfg, use_matrix=True, clock=lambda: R.NOW, lexicon=lexicon,
                              tuning=v.tuning)
    near = Nearest(emb.inner, R.WORKSPACE, cache / "generated-vocab.npy")
    rows: list[dict[str, Any]] = []

    def one(text: str, kind: str, gold: list[str] | None, k: int) -> None:
        out = searcher.search(text, k)
        seen = 0.0
        if gold:
            seen = sum(any(h.path == g.rsplit(":", 1)[0] and h.start_line <= int(g.rsplit(":", 1)[1]) <= h.end_line
                           for h in out.hits) for g in gold) / len(gold)
        rows.append(annotate({"conv": "generated", "kind": kind, "query": text, "results": len(out.hits), "seen": seen,
                              "missing": [t for t in query_terms(text) if searcher.keyword.doc_freq(t) == 0],
                              "vector": max((h.vector_score or 0.0 for h in out.hits), default=0.0)}, near))

    for q in R.read_jsonl(HERE / "queries.jsonl"):
        one(str(q["query"]), "dev", [str(g) for g in q["gold"]], 10)
    for a in absent.questions(R.WORKSPACE, "generated"):
        one(a.query, a.kind, None, 6)
    return rows


def collect(data: Path, cache: Path) -> list[dict[str, Any]]:
    v = next(v for v in C.variants() if v.name == "default")
    queries = C.read_jsonl(data / "queries.jsonl")
    rows: list[dict[str, Any]] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = C.service_for(data, conv, v)
        ws = data / "workspaces" / conv
        near = Nearest(C._embedder, ws, cache / f"{conv}-vocab.npy")
        try:
            for q in (q for q in queries if q["conv"] == conv):
                rows.append(annotate(probe(svc, conv, str(q["query"]), "dev",
                                           [(str(g["path"]), int(g["line"])) for g in q["gold"]]), near))
            for a in absent.questions(ws, conv):
                rows.append(annotate(probe(svc, conv, a.query, a.kind, None), near))
        finally:
            svc.close()
    return rows


def pick(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The rule that empties most no-answer searches and loses no answer (ties: the looser τ, the lower V)."""
    best: tuple[int, float, float] = (0, 0.0, 0.0)
    for tau in TAUS:
        for v in VS:
            emptied, lost = count(rows, tau, v)
            if lost == 0 and emptied > best[0]:
                best = (emptied, tau, v)
    return best[1], best[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--cache", type=Path, default=C.OUT)
    a = ap.parse_args(argv)
    a.cache.mkdir(parents=True, exist_ok=True)
    rows = collect(a.data, a.cache)
    gen = generated(a.cache)
    if a.json:
        a.json.write_text(json.dumps(rows + gen, indent=1))
    convs = sorted({r["conv"] for r in rows})
    ab = [r for r in rows if r["kind"] != "dev"]
    returned = sum(r["results"] > 0 for r in ab)
    gab = [r for r in gen if r["kind"] != "dev"]
    print(f"LoCoMo: {len(ab)} no-answer searches, {returned} return something (any {returned / len(ab):.3f}); "
          f"generated: {len(gab)}, {sum(r['results'] > 0 for r in gab)} return something")
    print("")
    print("| τ | V | emptied | absent any | lost | " + " | ".join(f"{c[5:]} emptied / lost" for c in convs)
          + " | generated emptied / lost |")
    print("|---:|---:|---:|---:|---:|" + "---:|" * (len(convs) + 1))
    for tau in TABLE_TAUS:
        for v in TABLE_VS:
            emptied, lost = count(rows, tau, v)
            per = [count([r for r in rows if r["conv"] == c], tau, v) for c in convs]
            ge, gl = count(gen, tau, v)
            print(f"| {tau:.2f} | {v if v <= 1 else 'any'} | {emptied} | {(returned - emptied) / len(ab):.3f} | {lost} | "
                  + " | ".join(f"{e} / {lo}" for e, lo in per) + f" | {ge} / {gl} |")
    print("")
    print("Rotations (τ, V picked on the two others: most emptied, nothing lost):")
    for held in convs:
        tau, v = pick([r for r in rows if r["conv"] != held])
        e, lo = count([r for r in rows if r["conv"] == held], tau, v)
        n = sum(r["kind"] != "dev" and r["results"] > 0 for r in rows if r["conv"] == held)
        ge, gl = count(gen, tau, v)
        print(f"- held out {held[5:]}: τ {tau:.3f}, V {v}: emptied {e} of {n}, lost {lo} (generated: emptied {ge}, "
              f"lost {gl})")
    if a.show:
        print("")
        for r in rows + gen:
            if r["missing"] and r["results"] and (r["kind"] != "dev" or r["seen"] > 0):
                near = ", ".join(f"{t}→{w} {c:.3f}" for t, (w, c) in r["near"].items())
                print(f"- {r['conv'][-2:]} {r['kind']} vec {r['vector']:.2f} seen {r['seen']:.2f} [{near}] {r['query']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
