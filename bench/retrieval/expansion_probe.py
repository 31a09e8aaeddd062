"""Round 10's probes for multi-hop: would the question's words, widened or narrowed, find more turns?

    python bench/retrieval/expansion_probe.py DATA_DIR expand [--tau 0.9] [--max 4] [--weight 0.4]
    python bench/retrieval/expansion_probe.py DATA_DIR names drop|person
    python bench/retrieval/expansion_probe.py DATA_DIR off

`expand`: each content word and word pair of the question is embedded with e5 (as a passage, as the
words of a note are), and the conversation's own words within `--tau` cosine of one of them join the
keyword leg as extra terms at `--weight` (the seam the EN↔ZH translation uses): "martial arts" →
karate 0.93, kickboxing 0.92, taekwondo 0.91, against painting 0.85. Morphological variants of a
question word (same first four letters), names and apostrophe forms are left out.
`names`: the speakers' names are taken out of the question's vector (`drop`) or replaced by
"someone" (`person`): a name is on every line of its speaker, so it might only blur the vector.
Prints seen R@6 / MRR overall, by category and by conversation (the conversations' indexes are those
of conversations.py, built on first use).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conversations as C  # noqa: E402

from hermit.memory.search import hybrid, keyword_leg  # noqa: E402
from hermit.memory.search.fts import STOPWORDS  # noqa: E402
from hermit.memory.search.translation import Translation  # noqa: E402

WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
SPEAKER = re.compile(r"^- \[D\d+:\d+\] ([A-Z][a-z]+):", re.M)


def words_of(text: str) -> list[str]:
    return [w.lower().strip("'-") for w in WORD.findall(text)]


def vocabulary(ws: Path) -> list[str]:
    """The conversation's words that could name a thing: not stopwords, not names (mostly capitalised),
    not apostrophe forms, in at most 2 % of the lines."""
    df: dict[str, int] = {}
    caps: dict[str, list[int]] = {}
    lines = 0
    for f in sorted((ws / "memory").glob("*.md")):
        for line in f.read_text(encoding="utf-8").splitlines():
            lines += 1
            for raw in WORD.findall(line.split(":", 1)[-1]):
                c = caps.setdefault(raw.lower().strip("'-"), [0, 0])
                c[0] += 1
                c[1] += raw[0].isupper()
            for w in set(words_of(line)):
                df[w] = df.get(w, 0) + 1
    return [w for w, n in df.items() if w not in STOPWORDS and len(w) > 2 and n <= 0.02 * lines
            and "'" not in w and w in caps and caps[w][1] < 0.5 * caps[w][0]]


def expansions(emb: Any, ws: Path, questions: list[str], tau: float, most: int) -> dict[str, list[str]]:
    """Per question, the conversation's words within `tau` of one of its words or word pairs."""
    vocab = vocabulary(ws)
    vecs = emb.embed_documents(vocab)
    out: dict[str, list[str]] = {}
    for question in questions:
        qw = [w for w in words_of(question) if w not in STOPWORDS and len(w) > 2]
        grams = qw + [" ".join(qw[i:i + 2]) for i in range(len(qw) - 1)]
        if not grams:
            continue
        best = (emb.embed_documents(grams) @ vecs.T).max(axis=0)
        near = [vocab[j] for j in np.argsort(-best) if best[j] >= tau]
        out[question] = [w for w in near if not any(w[:4] == x[:4] for x in qw)][:most]
    return out


def unnamed(emb: Any, ws: Path, how: str) -> Any:
    """`emb`'s embed_query with the conversation's speakers taken out of the question."""
    names = {n for f in (ws / "memory").glob("*.md") for n in SPEAKER.findall(f.read_text(encoding="utf-8"))}
    fill = "" if how == "drop" else "someone"
    embed_query = type(emb).embed_query

    def embed(text: str) -> np.ndarray:
        for n in names:
            text = re.sub(rf"\b{n}\b", fill, re.sub(rf"\b{n}'s\b", "their", text))
        return embed_query(emb, re.sub(r"\s+", " ", text).strip())

    return embed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("mode", choices=["off", "expand", "names"])
    ap.add_argument("names_mode", nargs="?", choices=["drop", "person"], default="drop")
    ap.add_argument("--tau", type=float, default=0.9)
    ap.add_argument("--max", type=int, default=4)
    ap.add_argument("--weight", type=float, default=0.4)
    a = ap.parse_args(argv)
    queries = C.read_jsonl(a.data / "queries.jsonl")
    v = next(x for x in C.variants() if x.name == "default")
    extra: dict[str, list[str]] = {}
    translate = hybrid.HybridSearcher._translate
    merge = keyword_leg.KeywordLeg._merge_translated

    def widened(self: Any, query: str) -> Translation:
        tr = translate(self, query)
        more = extra.get(query, [])
        return Translation(tr.terms + more, tr.vector_words, tr.groups) if more else tr

    def weighted(self: Any, *args: Any) -> Any:
        saved = self.cfg
        self.cfg = saved.model_copy(update={"translation_weight": a.weight})
        try:
            return merge(self, *args)
        finally:
            self.cfg = saved

    if a.mode == "expand":
        hybrid.HybridSearcher._translate = widened  # type: ignore[method-assign]
        keyword_leg.KeywordLeg._merge_translated = weighted  # type: ignore[method-assign]
    rows: list[dict[str, Any]] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = C.service_for(a.data, conv, v)
        emb = C._embedder
        assert emb is not None
        ws = a.data / "workspaces" / conv
        mine = [q for q in queries if q["conv"] == conv]
        if a.mode == "expand":
            extra.update(expansions(emb, ws, [str(q["query"]) for q in mine], a.tau, a.max))
        if a.mode == "names":
            emb.embed_query = unnamed(emb, ws, a.names_mode)  # type: ignore[method-assign]
        try:
            for q in mine:
                out = svc.search_outcome(str(q["query"]), v.max_results)
                rows.append({"conv": conv, "cat": q["category_name"], **C.score_question(q, out.hits)})
        finally:
            if a.mode == "names":
                del emb.embed_query
            svc.close()

    def mean(rs: list[dict[str, Any]], k: str) -> float:
        return sum(float(r[k]) for r in rs) / max(1, len(rs))

    print(f"{a.mode}: seen {mean(rows, 'seen'):.3f} MRR {mean(rows, 'MRR'):.3f} chars {mean(rows, 'chars'):,.0f}")
    for key, values in (("cat", ("single-hop", "multi-hop", "temporal", "open-domain")),
                        ("conv", sorted({str(r["conv"]) for r in rows}))):
        for val in values:
            rs = [r for r in rows if r[key] == val]
            print(f"  {val} ({len(rs)}): seen {mean(rs, 'seen'):.3f} MRR {mean(rs, 'MRR'):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
