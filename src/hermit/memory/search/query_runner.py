"""The query embedded in the search's worker beside the keyword leg, then the matrix pass there.

When the query embeds on one core (a long-lived process's onnxruntime query runner,
E5Embedder.query_uses_one_core), the search's two longest stages overlap: the worker embeds the query
and starts the pass over the vector matrix while the search thread runs the keyword leg
(memory/search/keyword.py); the search thread then takes the blocks of the pass the worker has not
reached. Only onnxruntime and numpy run in the worker, no SQL (memory/search/hybrid.py), except on a
server store (PostgreSQL): its KNN runs in the worker on a connection of its own (`knn_beside`),
beside the keyword leg's SQL on the store's main connection (store_knn).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from hermit.memory.embedders.base import Embedder, QueryRunner
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search.vectors import AnyPass, VectorMatrix
from hermit.memory.store.api import MemoryStore

# The query embedding stage of memory.search.hybrid: (query, timings) → (vector or None, why not).
EmbedQuery = Callable[[str, dict[str, float]], "tuple[np.ndarray | None, str | None]"]  # quoted: no numpy at import


def query_uses_one_core(embedder: Embedder | None) -> bool:
    """Whether the embedder's query embedding now runs on one core (E5Embedder.query_uses_one_core)."""
    return isinstance(embedder, QueryRunner) and embedder.query_uses_one_core()


class EmbedBeside:
    """One search's query embedding and matrix pass, started in the worker; `join` waits for them."""

    def __init__(self, embed: EmbedQuery, matrix: VectorMatrix, worker: ThreadPoolExecutor, query: str,
                 timings: dict[str, float], k: int) -> None:
        self.matrix = matrix
        self.ready = threading.Event()  # set once the pass has started (or the embedding failed)
        self.matrix_pass: AnyPass | None = None
        self._job = worker.submit(self._run, embed, query, timings, k)

    def _run(self, embed: EmbedQuery, query: str, timings: dict[str, float], k: int
             ) -> tuple[np.ndarray | None, str | None, AnyPass | None, list[tuple[int, float]]]:
        """In the worker: the query vector, then the matrix pass, which the search thread joins once
        its keyword leg is done, then the pass's k best rows: when the keyword leg takes longer, the
        top-k (and the int8 pass's float32 re-scoring, ~0.7 ms at 100k chunks) is off the search
        thread's path."""
        try:
            q, reason = embed(query, timings)
            timings["embed_beside"] = 1.0
            if q is None:
                return None, reason, None, []
            p = self.matrix.start_pass(q)
            self.matrix_pass = p
        finally:
            self.ready.set()
        p.work()
        return q, None, p, self.matrix.finish(p, k)

    def finish(self, timings: dict[str, float]) -> tuple[np.ndarray | None, str | None, list[tuple[int, float]]]:
        """The query vector (or None and why not) and the k nearest chunks, the search thread helping
        with the blocks of the pass the worker has not reached."""
        t0 = time.perf_counter()
        self.ready.wait()
        if self.matrix_pass is not None:
            self.matrix_pass.work()
        q, reason, matrix_pass, hits = self._job.result()
        if matrix_pass is not None:
            timings["matrix_busy_ms"] = matrix_pass.busy_ms
        # What the search thread waited for after the keyword leg: the embedding's and the pass's tails.
        timings["vector_ms"] = (time.perf_counter() - t0) * 1000
        return q, reason, hits


def store_knn(embed: EmbedQuery, store: MemoryStore, q: np.ndarray | None, query: str, k: int,
              timings: dict[str, float]) -> tuple[np.ndarray | None, str | None, list[tuple[int, float]]]:
    """In the worker: the query vector (embedded first when `q` is None) and the store's k nearest chunks."""
    if q is None:
        q, reason = embed(query, timings)
        if q is None:
            return None, reason, []
    t0 = time.perf_counter()
    hits = store.vec_knn(q, k)
    timings["knn_ms"] = (time.perf_counter() - t0) * 1000
    return q, None, hits
