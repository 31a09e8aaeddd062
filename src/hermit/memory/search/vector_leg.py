"""The vector leg of a hybrid search: the query embedded, its nearest chunks found, a reader's kept.

memory.search.hybrid runs one search; this is its vector side. The nearest chunks come from the
in-memory matrix (memory.search.vectors), whose pass a worker thread starts while the search thread runs
the keyword leg (memory.search.keyword_leg) and both finish; or from the store's KNN, here or in the
worker on a connection of its own (a server store); or, when the query embeds on one core, the worker
embeds it first (memory.search.query_runner). Split from hybrid.py by responsibility; no SQL or numpy
beyond the store's and the matrix's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import Embedder
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search.query_runner import EmbedBeside, EmbedQuery, store_knn
from hermit.memory.search.reader_counts import DEEPEST_POOL, ReaderCounts
from hermit.memory.search.vectors import AnyPass, VectorMatrix
from hermit.memory.store.api import MemoryStore


@dataclass
class VectorLeg:
    """The vector leg of one search: its hits, or the matrix pass a worker runs meanwhile (or the query
    embedding and then that pass, `beside`: the query vector is known once the leg is finished)."""

    hits: list[tuple[int, float]] = field(default_factory=list)
    matrix_pass: AnyPass | None = None
    job: Future[None] | None = None
    matrix_ok: bool = False  # scores of further chunks come from the matrix (else from the store)
    beside: EmbedBeside | None = None
    q: np.ndarray | None = None  # with `beside`: the query vector, once finished (None: why not in `reason`)
    reason: str | None = None
    # The store's KNN (and the query embedding before it, when that runs on one core) in the worker,
    # on the store's own KNN connection (a server store: `knn_beside`): (vector, why not, hits).
    knn: Future[tuple[np.ndarray | None, str | None, list[tuple[int, float]]]] | None = None


def usable_vector(q: np.ndarray) -> bool:
    """A query vector with a direction: finite, and not (almost) all zeros."""
    norm = float(np.linalg.norm(q))
    return bool(np.isfinite(norm)) and norm > 1e-6


def embed_query(embedder: Embedder, query: str, timings: dict[str, float]) -> tuple[np.ndarray | None, str | None]:
    """The query vector, or None and why not.

    The query embedding runs alone: the model uses every core with briefly spinning OpenMP
    workers, and a concurrent SQLite thread made both slower on 2 cores."""
    t0 = time.perf_counter()
    q: np.ndarray | None = None
    reason: str | None = None
    try:
        q = embedder.embed_query(query)
    except EmbeddingError as e:
        reason = f"query embedding failed: {e.message}"
    if q is not None and not usable_vector(q):
        # A broken or remote embedder's zero (or NaN) vector has no direction: sqlite-vec answers
        # NULL distances (a TypeError here, losing the keyword hits) and every cosine is 0 or NaN.
        q = None
        reason = ("the embedding model returned an all-zero (or invalid) query vector; check the "
                  "embedder (`hermit memory status`)")
    timings["embed_ms"] = (time.perf_counter() - t0) * 1000
    return q, reason


class VectorLegs:
    """The vector legs of one searcher's searches, over its store and matrix; `embed` is its query
    embedding stage, `worker` its one worker thread, `matrix_ok` whether the matrix is used."""

    def __init__(self, store: MemoryStore, matrix: VectorMatrix, embed: EmbedQuery,
                 worker: Callable[[], ThreadPoolExecutor], matrix_ok: Callable[[], bool]) -> None:
        self.store = store
        self.matrix = matrix
        self.embed = embed
        self._worker = worker
        self._matrix_ok = matrix_ok

    def start(self, q: np.ndarray | None, pool: int, timings: dict[str, float],
              beside_query: str | None = None, knn_query: str | None = None) -> VectorLeg:
        """The vector leg's nearest chunks: over the in-memory matrix, started in a worker so that it
        overlaps the keyword leg (finished by `finish`); otherwise the store's KNN, done here, or
        with `knn_query` in the worker (embedding `knn_query` first when `q` is None).
        With `beside_query` (the matrix is usable), the worker embeds that query first."""
        if knn_query is not None:
            job = self._worker().submit(store_knn, self.embed, self.store, q, knn_query, pool, timings)
            return VectorLeg(q=q, knn=job)
        if beside_query is not None:
            self.matrix.refresh(self.store)
            beside = EmbedBeside(self.embed, self.matrix, self._worker(), beside_query, timings, pool)
            return VectorLeg(matrix_ok=True, beside=beside)
        if q is None:
            return VectorLeg()
        t0 = time.perf_counter()
        if not self._matrix_ok():
            hits = self.store.vec_knn(q, pool)
            timings["vector_ms"] = (time.perf_counter() - t0) * 1000
            return VectorLeg(hits)
        # The pass over the matrix is memory-bound; it runs in a worker while this thread does the
        # keyword leg (SQLite, regexes). Only numpy runs there, no SQL.
        self.matrix.refresh(self.store)
        matrix_pass = self.matrix.start_pass(q)
        return VectorLeg([], matrix_pass, self._worker().submit(matrix_pass.work), matrix_ok=True)

    def finish(self, leg: VectorLeg, pool: int, timings: dict[str, float]) -> list[tuple[int, float]]:
        """The vector leg's hits, once the matrix pass (when there is one) is done."""
        if leg.knn is not None:
            t0 = time.perf_counter()
            leg.q, leg.reason, leg.hits = leg.knn.result()
            # What the search thread waited for after its keyword leg (the rest overlapped).
            timings["vector_ms"] = (time.perf_counter() - t0) * 1000
            return leg.hits
        if leg.beside is not None:
            leg.q, leg.reason, leg.hits = leg.beside.finish(timings)
            leg.matrix_ok = leg.q is not None
            return leg.hits
        if leg.job is None or leg.matrix_pass is None:
            return leg.hits
        t0 = time.perf_counter()
        leg.matrix_pass.work()  # take the blocks the worker has not reached
        leg.job.result()
        hits = self.matrix.finish(leg.matrix_pass, pool)
        # Time the matrix pass kept this thread beyond the keyword leg (the rest overlapped).
        timings["vector_ms"] = (time.perf_counter() - t0) * 1000
        timings["matrix_busy_ms"] = leg.matrix_pass.busy_ms
        return hits

    def visible_hits(self, q: np.ndarray, hits: list[tuple[int, float]], pool: int, counts: ReaderCounts,
                     matrix_ok: bool) -> list[tuple[int, float]]:
        """A restricted reader's nearest `pool` chunks among those it may see: searched deeper (at most
        DEEPEST_POOL) while hidden chunks hold places, so none of them can crowd its own out."""
        seen, limit = counts.keep(hits), pool
        while len(seen) < pool and len(hits) >= limit and limit < DEEPEST_POOL:
            limit = min(limit * 4, DEEPEST_POOL)
            hits = self.matrix.topk(q, limit) if matrix_ok else self.store.vec_knn(q, limit)
            seen = counts.keep(hits)
        return seen[:pool]

