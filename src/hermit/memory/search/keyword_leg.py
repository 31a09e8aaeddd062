"""The keyword leg of a hybrid search: BM25 hits of the query and of its dictionary translation, on one scale.

memory.search.keyword ranks the chunks holding a set of words (FTS5's BM25 with a bounded cost); this
adds the translated query's hits (EN ↔ ZH, discounted), and puts the relevances on the query's own scale
(text_normalization "query"), so memory.search.hybrid fuses them with the vector leg's cosines.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hermit.config.memory_search import QueryConfig
from hermit.memory.search.fts import query_terms, translated_phrases
from hermit.memory.search.keyword import KeywordSearcher
from hermit.memory.search.reader_counts import DEEPEST_POOL, ReaderCounts
from hermit.memory.search.translation import Translation
from hermit.memory.search.tuning import SearchTuning
from hermit.memory.store.api import ChunkRow

SMALL_MEMORY_CHUNKS = 100


class KeywordLeg:
    """The keyword hits of one query (its words and their translation), relevance on [0, 1]."""

    def __init__(self, keyword: KeywordSearcher, cfg: QueryConfig, tuning: SearchTuning,
                 chunk_count: Callable[[], int]) -> None:
        self.keyword = keyword
        self.cfg = cfg
        self.tuning = tuning
        self.chunk_count = chunk_count  # chunks in the index, read once per generation by the searcher

    def run(self, query: str, tr: Translation, pool: int, rows: dict[int, ChunkRow],
            counts: ReaderCounts | None = None) -> tuple[list[tuple[int, float]], set[int], float]:
        """Keyword hits of the query and its translation, and the chunks the translation matched.

        With `counts` (a reader who may not see every note), only the hits it may see, scored with its
        own word counts (memory.search.reader_counts): nothing it may not see shapes its scores."""
        t0 = time.perf_counter()
        terms = query_terms(query)
        hits = self._search(terms, pool, rows, counts)
        hits, held = self._merge_translated(hits, tr, pool, rows, counts)
        return self._on_query_scale(hits, terms, tr, counts), held, (time.perf_counter() - t0) * 1000

    def _search(self, phrases: list[str], pool: int, rows: dict[int, ChunkRow],
                counts: ReaderCounts | None) -> list[tuple[int, float]]:
        """The best `pool` hits of `phrases`; for a restricted reader, the best `pool` of those it may see.

        Those are searched deeper until `pool` of them are found or the matches end (at most
        DEEPEST_POOL): otherwise enough owner-only notes holding a word would crowd the reader's own note
        with that word out of its results, which would say that the owner writes about it."""
        if counts is None:
            return self.keyword.search(phrases, pool, rows)
        limit = pool
        while True:
            hits = self.keyword.search(phrases, limit, rows)
            seen = counts.rescore(phrases, hits)
            if len(seen) >= pool or len(hits) < limit or limit >= DEEPEST_POOL:
                return seen[:pool]
            limit = min(limit * 4, DEEPEST_POOL)

    def _on_query_scale(self, hits: list[tuple[int, float]], terms: list[str],
                        tr: Translation, counts: ReaderCounts | None = None) -> list[tuple[int, float]]:
        """With text_normalization "query": relevance divided by the larger of the best hit's and a share
        of the query's own BM25 (a chunk of average length holding each query word once; in the
        language it is matched more easily when it has a translation), so a question whose best hit
        holds only its everyday words scores low, and one whose best hit holds most of the query scores
        as under "max". A memory of fewer than three chunks is on the "max" scale: there FTS5 gives every
        word it holds the floor idf (one chunk of two is half of them), so no hit can show how much of the
        query it holds."""
        if self.cfg.hybrid.text_normalization != "query" or not hits:
            return hits
        scale = max(r for _, r in hits)
        if self.keyword.doc_count() >= 3:
            doc_freq = self.keyword.doc_freq if counts is None else counts.doc_freq
            ideal = self.keyword.ideal(terms, doc_freq)
            if tr.groups and self.cfg.translation_weight > 0:
                ideal = min(ideal, self._translation_ideal(tr.groups, doc_freq) or ideal)
            scale = max(scale, self.tuning.query_scale_share * ideal)
        return [(i, r / scale) for i, r in hits] if scale > 0 else hits

    def _translation_ideal(self, groups: tuple[tuple[str, ...], ...],
                           doc_freq: Callable[[str], int]) -> float | None:
        """The translated query's own BM25: per query word, the idf of its commonest translation that the
        index holds (the alternatives are one word's), or of its first when none is held; None when the
        index holds none of them (a memory without that language)."""
        total, any_held = 0.0, False
        for group in groups:
            held, every = [], []
            for term in group:
                phrases = translated_phrases([term])
                value = self.keyword.ideal(phrases, doc_freq)
                every.append(value)
                if phrases and all(doc_freq(p) > 0 for p in phrases):
                    held.append(value)
            total += min(held) if held else (every[0] if every else 0.0)
            any_held = any_held or bool(held)
        return total if any_held else None

    def _merge_translated(self, kw_hits: list[tuple[int, float]], tr: Translation, pool: int,
                          rows: dict[int, ChunkRow],
                          counts: ReaderCounts | None = None) -> tuple[list[tuple[int, float]], set[int]]:
        """Add keyword hits for the dictionary translation of the query, discounted (EN ↔ ZH)."""
        w = self.cfg.translation_weight
        phrases = translated_phrases(tr.terms) if w > 0 else []
        if not phrases:
            return kw_hits, set()
        best = dict(kw_hits)
        translated_hits = self._search(phrases, pool, rows, counts)
        # FTS5 clamps the idf of a term found in over half the chunks to ~1e-6. In a large memory that
        # rightly marks a word as uninformative; in a small one ("database" in 2 of a new user's 4
        # notes) it would rank an exact original-language match below any translated match. There,
        # the original matches are put back on the translated leg's scale.
        top_orig = max((r for _, r in kw_hits), default=0.0)
        top_tr = max((r for _, r in translated_hits), default=0.0)
        if 0 < top_orig < 1e-3 and top_tr > 0 and self.chunk_count() < SMALL_MEMORY_CHUNKS:
            best = {cid: r * top_tr / top_orig for cid, r in best.items()}
        for cid, r in translated_hits:
            best[cid] = max(best.get(cid, 0.0), w * r)
        return sorted(best.items(), key=lambda x: -x[1])[: max(pool, len(kw_hits))], {c for c, _ in translated_hits}
