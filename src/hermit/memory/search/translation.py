"""A query's EN ↔ ZH dictionary translation: its keyword terms, and one query vector made of cached word vectors."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import Embedder
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search.lexicon import Lexicon

WORD_VECTOR_CACHE = 20_000


@dataclass(frozen=True)
class Translation:
    """A query's EN ↔ ZH dictionary translation: every term (keyword leg) and the words whose vectors
    make the translated query vector."""

    terms: list[str]
    vector_words: list[str]
    # The translations of each query word (alternatives for one word; the query's BM25 scale counts
    # one of them per word).
    groups: tuple[tuple[str, ...], ...] = ()


NO_TRANSLATION = Translation([], [])


def translate(lexicon: Lexicon, query: str, vector_words: int) -> Translation:
    """The query's translation: every alternative of every word for the keyword leg, and the best
    translation of each word, at most `vector_words` of them, for the translated query vector."""
    groups = lexicon.translate_groups(query)
    terms = list(dict.fromkeys(t for g in groups for t in g))
    best = list(dict.fromkeys(g[0] for g in groups if g))[:vector_words]
    return Translation(terms, best, tuple(tuple(g) for g in groups if g))


class WordVectors:
    """Word vectors kept between searches (least recently used out first): a translated word costs one
    embedding the first time only; a joint embedding of the translated words cost ~10 ms on every search."""

    def __init__(self) -> None:
        self._vecs: OrderedDict[str, np.ndarray] = OrderedDict()
        self.stats = {"hits": 0, "misses": 0}

    def query_vector(self, embedder: Embedder, words: list[str]) -> np.ndarray | None:
        """The query's translation as one vector: the normalised sum of its (cached) word vectors."""
        vecs: list[np.ndarray] = []
        for w in words:
            v = self._vecs.get(w)
            if v is None:
                self.stats["misses"] += 1
                try:
                    v = embedder.embed_query(w)
                except EmbeddingError:
                    continue
                self._vecs[w] = v
                if len(self._vecs) > WORD_VECTOR_CACHE:
                    self._vecs.popitem(last=False)
            else:
                self.stats["hits"] += 1
                self._vecs.move_to_end(w)
            vecs.append(v)
        if not vecs:
            return None
        total = np.sum(vecs, axis=0)
        norm = float(np.linalg.norm(total))
        return total / norm if norm > 0 and np.isfinite(norm) else None
