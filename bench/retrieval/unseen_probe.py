"""Round 14's probe for knowing when nothing matches: a question word that occurs in no note.

    python bench/retrieval/unseen_probe.py DATA_DIR [--show]

Why, independent of the dev conversations: a question about something the memory never mentions ("When
did Caroline go skydiving?", "what is my blood type") usually names it with a word no note holds, while the
places it returns matched its everyday words (a name, "go", "type": round 9's case). Round 6 already
counts such a word in the keyword leg's scale; here the question is whether the word's absence plus a
weak vector match (the best returned place's calibrated chunk cosine under V) tells the no-answer
searches apart as a rule "return nothing". For every dev question and every no-answer question
(absent.py), at default settings: whether one of its keyword terms (memory.search.fts.query_terms) has
document frequency 0, how many results it returns, the best vector score among them, and for the dev
questions the share of gold lines seen. Then, per V, how many no-answer searches the rule would empty and
how many answered dev questions it would lose, per conversation. `--show` lists the answered dev
questions that hold such a word.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import absent  # noqa: E402
import conversations as C  # noqa: E402

from hermit.memory.search.fts import query_terms  # noqa: E402


def probe(svc: Any, conv: str, text: str, kind: str, golds: list[tuple[str, int]] | None) -> dict[str, Any]:
    hits = svc.search_outcome(text, 6).hits
    seen = (sum(any(h.path == p and h.start_line <= ln <= h.end_line for h in hits) for p, ln in golds)
            / len(golds)) if golds else 0.0
    return {"conv": conv, "kind": kind, "query": text, "results": len(hits), "seen": seen,
            "missing": [t for t in query_terms(text) if svc.searcher.keyword.doc_freq(t) == 0],
            "vector": max((h.vector_score or 0.0 for h in hits), default=0.0)}


def collect(data: Path) -> list[dict[str, Any]]:
    v = next(v for v in C.variants() if v.name == "default")
    queries = C.read_jsonl(data / "queries.jsonl")
    rows: list[dict[str, Any]] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = C.service_for(data, conv, v)
        try:
            for q in (q for q in queries if q["conv"] == conv):
                rows.append(probe(svc, conv, str(q["query"]), "dev",
                                  [(str(g["path"]), int(g["line"])) for g in q["gold"]]))
            for a in absent.questions(data / "workspaces" / conv, conv):
                rows.append(probe(svc, conv, a.query, a.kind, None))
        finally:
            svc.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args(argv)
    rows = collect(args.data)
    dev = [r for r in rows if r["kind"] == "dev"]
    ab = [r for r in rows if r["kind"] != "dev"]
    convs = sorted({r["conv"] for r in rows})
    returned = sum(r["results"] > 0 for r in ab)
    print(f"dev questions with a word in no note: {sum(bool(r['missing']) for r in dev)} / {len(dev)} "
          f"({sum(bool(r['missing']) and r['seen'] > 0 for r in dev)} of them answered)")
    print(f"no-answer questions with a word in no note: {sum(bool(r['missing']) for r in ab)} / {len(ab)} "
          f"({sum(bool(r['missing']) and r['results'] > 0 for r in ab)} of them return something; "
          f"{returned} return something in all)")
    print("")
    print("| best vector score under | no-answer searches emptied | absent any | answered dev questions lost | "
          + " | ".join(f"{c[5:]} emptied / lost" for c in convs) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(convs))
    for cut in (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 1.01):
        lost = [r for r in dev if r["missing"] and r["results"] and r["vector"] < cut and r["seen"] > 0]
        emptied = [r for r in ab if r["missing"] and r["results"] and r["vector"] < cut]
        print(f"| {cut if cut <= 1 else 'any'} | {len(emptied)} | {(returned - len(emptied)) / len(ab):.3f} | "
              f"{len(lost)} | " + " | ".join(f"{sum(r['conv'] == c for r in emptied)} / {sum(r['conv'] == c for r in lost)}"
                                            for c in convs) + " |")
    if args.show:
        print("")
        for r in dev:
            if r["missing"] and r["seen"] > 0:
                print(f"- {r['conv'][5:]} vector {r['vector']:.2f} seen {r['seen']:.2f} {r['missing']}: {r['query']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
