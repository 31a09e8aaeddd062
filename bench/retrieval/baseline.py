"""The original design's memory search, reproduced for the baseline row of the retrieval benchmark.

What it reproduces (SPEC §14): the keyword query is the ASCII tokens of the question AND-joined, so a
natural question whose words are not all in one chunk finds nothing and CJK text has no keyword leg;
every keyword hit's BM25 score is flattened to 1.0; a candidate found by only one leg gets 0 on the
other; vector score is the raw cosine; merge 0.7 * vector + 0.3 * text; minScore 0.35. It runs over
the same index (same chunks and vectors) as Hermit, so only the search logic differs.
"""

from __future__ import annotations

import re

import numpy as np

from hermit.memory.embedders.base import Embedder
from hermit.memory.store.sqlite import IndexStore


def original_match(query: str) -> str | None:
    tokens = re.findall(r"[A-Za-z0-9_]+", query)
    if not tokens:
        return None
    return " AND ".join('"' + t.replace('"', "") + '"' for t in tokens)


def original_search(store: IndexStore, embedder: Embedder, query: str, max_results: int = 10,
                    min_score: float = 0.35) -> list[dict[str, object]]:
    pool = max_results * 4
    q: np.ndarray = embedder.embed_query(query)
    vec = dict(store.vec_knn(q, pool))
    match = original_match(query)
    kw = {i for i, _ in store.fts_search(match, pool)} if match else set()
    scored = []
    for cid in set(vec) | kw:
        score = 0.7 * vec.get(cid, 0.0) + 0.3 * (1.0 if cid in kw else 0.0)
        if score >= min_score:
            scored.append((score, cid))
    scored.sort(reverse=True)
    rows = store.chunk_rows([cid for _, cid in scored[:max_results]])
    return [{"path": rows[cid].path, "startLine": rows[cid].start_line, "endLine": rows[cid].end_line,
             "score": round(s, 4), "source": rows[cid].source} for s, cid in scored[:max_results]]
