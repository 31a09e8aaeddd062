"""The vector leg's scans: an in-memory float32 matrix for long-lived processes, and a bounded block scan.

Used by memory/search/hybrid.py; split from it by responsibility (brute-force cosine over stored vectors).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from threadpoolctl import threadpool_limits

from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search import vector_int8
from hermit.memory.search.blocks import Blocks
from hermit.memory.search.tuning import DEFAULT_TUNING
from hermit.memory.search.vector_int8 import Int8Copy, Int8Pass, with_room
from hermit.memory.store.api import MemoryStore


class VectorMatrix:
    """All stored vectors in one float32 matrix for ~ms brute-force cosine in long-lived processes.

    Refreshed incrementally by index generation: rows of chunks written since the last load are
    appended; rows of deleted chunks stay as garbage (filtered at lookup) until they pass 20%.
    """

    ids: np.ndarray  # these four: made by __getattr__ on first use
    mat: np.ndarray
    _ids_buf: np.ndarray
    _mat_buf: np.ndarray

    def __init__(self, int8_min_rows: int = DEFAULT_TUNING.int8_min_rows) -> None:
        self.int8_min_rows = int8_min_rows  # SearchTuning.int8_min_rows
        self.gen = -1
        self.index_id: str | None = None
        self.garbage = 0
        self.row_of: dict[int, int] = {}
        self.loads = 0  # full loads so far: the int8 copy starts again after one
        self.int8 = Int8Copy()

    def __getattr__(self, name: str) -> Any:
        # The empty matrix is made on first use, so that a process that never touches a vector (keyword-only
        # memory, `memory status`) imports no numpy (memory.lazy_numpy); setdefault: what another thread stored
        # meanwhile stays.
        if name not in ("ids", "mat", "_ids_buf", "_mat_buf"):
            raise AttributeError(name)
        ids, mat = np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        for key, value in (("ids", ids), ("mat", mat), ("_ids_buf", ids), ("_mat_buf", mat)):
            self.__dict__.setdefault(key, value)  # ids and mat are their buffers' first rows
        return self.__dict__[name]

    def refresh(self, store: MemoryStore) -> None:
        hold_blas_to_one_thread()
        meta = store.meta()
        index_id, gen = meta.get("index_id"), int(meta.get("generation", "0"))
        if index_id == self.index_id and gen == self.gen:
            return
        live = store.chunk_count()
        if index_id != self.index_id or (len(self.ids) - live) > 0.2 * max(live, 1):
            self.ids, self.mat, self.gen = np.zeros(0, dtype=np.int64), np.zeros((0, 0), np.float32), -1
        if self.gen < 0:
            # Full load: fill a preallocated matrix block by block (no second copy at peak).
            dims = int(store.meta().get("dims", "0")) or 1
            ids = np.empty(live, dtype=np.int64)
            mat = np.empty((live, dims), dtype=np.float32)
            n = 0
            for block_ids, block in store.iter_vectors():
                take = min(len(block_ids), live - n)
                ids[n:n + take], mat[n:n + take] = block_ids[:take], block[:take]
                n += take
            self._ids_buf, self._mat_buf = ids, mat
            self.ids, self.mat = ids[:n], mat[:n]
            self.loads += 1
            self.row_of = {int(i): r for r, i in enumerate(self.ids)}
        else:
            self._append(list(store.iter_vectors(since_gen=self.gen)))
        self.garbage = max(0, len(self.ids) - live)
        self.index_id, self.gen = index_id, gen

    def _append(self, blocks: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Rows written since the last refresh, appended in place: the buffers keep spare capacity, so a
        write (the watcher re-indexing one note) does not copy the whole matrix (150 MB at 100k chunks).

        SQLite gives a new chunk the id after the largest one: the id of a chunk deleted since (the newest note
        removed, then another indexed). That chunk's old row must not answer for the new one with the old
        text's cosine: it gets id -1, which no chunk has (dropped at lookup with the other garbage). A chunk
        stored without a vector comes as a zero row (the store's iter_vectors): it only retires an old row."""
        for block_ids, _ in blocks:
            for i in block_ids:
                old = self.row_of.pop(int(i), None)
                if old is not None:
                    self._ids_buf[old] = -1
        blocks = [(ids[keep], block[keep]) for ids, block in blocks if (keep := block.any(axis=1)).any()]
        k = sum(len(b[0]) for b in blocks)
        if not k:
            return
        n = len(self.ids)
        if self._mat_buf.shape[1:] != blocks[0][1].shape[1:]:
            self._mat_buf = np.empty((0, blocks[0][1].shape[1]), np.float32)  # the first rows of an empty index
        self._ids_buf, self._mat_buf = with_room(self._ids_buf, n, n + k), with_room(self._mat_buf, n, n + k)
        at = n
        for block_ids, block in blocks:
            self._ids_buf[at:at + len(block_ids)], self._mat_buf[at:at + len(block_ids)] = block_ids, block
            self.row_of.update((int(i), r) for r, i in enumerate(block_ids, at))
            at += len(block_ids)
        self.ids, self.mat = self._ids_buf[:n + k], self._mat_buf[:n + k]

    def topk(self, q: np.ndarray, k: int) -> list[tuple[int, float]]:
        if not len(self.ids):
            return []
        return self.top_of(self.mat @ q, k)

    def start_pass(self, q: np.ndarray) -> AnyPass:
        """The pass for `q`: on the int8 copy for a large matrix (memory/search/vector_int8.py, same top-k)."""
        if len(self.mat) >= self.int8_min_rows and vector_int8.available():
            self.int8.update(self.mat, self.loads)
            return Int8Pass(self.int8, self.mat, q)
        return MatrixPass(self.mat, q)

    def finish(self, p: AnyPass, k: int) -> list[tuple[int, float]]:
        """The k best rows of a finished pass, best first (and as many more as rows of deleted chunks)."""
        rows, sims = p.best(min(k + self.garbage, len(self.mat)))
        return [(int(self.ids[r]), float(s)) for r, s in zip(rows, sims, strict=True)]

    def top_of(self, sims: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k best rows of `sims` (this matrix times a query), best first."""
        rows = best_rows(sims, min(k + self.garbage, len(sims)))
        return [(int(self.ids[r]), float(sims[r])) for r in rows]

    def scores(self, q: np.ndarray, ids: list[int]) -> dict[int, float]:
        rows = [(i, self.row_of[i]) for i in ids if i in self.row_of]
        if not rows:
            return {}
        sims = self.mat[[r for _, r in rows]] @ q
        return {i: float(s) for (i, _), s in zip(rows, sims, strict=True)}


_BLAS_LOCK = threading.Lock()
_BLAS_HELD = False


def hold_blas_to_one_thread() -> None:
    """Once per process, before the first matrix pass: numpy's BLAS (OpenBLAS) keeps its worker
    threads busy-waiting for a while after each call, and on a 2-core machine they then starve the
    embedding model's OpenMP threads on the next query (12 → 75 ms per query embedding). One BLAS
    thread reads the matrix at ~10 GB/s, and the pass overlaps the keyword leg instead."""
    global _BLAS_HELD
    with _BLAS_LOCK:
        if not _BLAS_HELD:
            threadpool_limits(1, user_api="blas")
            _BLAS_HELD = True


class MatrixPass:
    """`mat @ q` in blocks that any thread may take: a worker starts it while the search thread runs
    the keyword leg, then the search thread helps with what is left (both cores on the tail)."""

    BLOCK_ROWS = 8_192

    def __init__(self, mat: np.ndarray, q: np.ndarray) -> None:
        self.mat, self.q = mat, q
        self.out = np.empty(len(mat), dtype=np.float32)
        # Finished, not only taken: the worker picks the k best once its own `work` returns, while the
        # search thread may still be writing a block it took.
        self.blocks = Blocks(len(mat), self.BLOCK_ROWS)
        self.busy_ms = 0.0
        self._lock = threading.Lock()

    def work(self) -> None:
        t0 = time.perf_counter()
        for a, b in self.blocks.take():
            np.matmul(self.mat[a:b], self.q, out=self.out[a:b])
        with self._lock:
            self.busy_ms += (time.perf_counter() - t0) * 1000

    def best(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows, best first, and their scores, once every block is done (by any thread)."""
        self.work()
        self.blocks.wait()
        rows = best_rows(self.out, k)
        return rows, self.out[rows]


def best_rows(sims: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest of `sims`, largest first."""
    if not len(sims) or k <= 0:
        return np.zeros(0, np.int64)
    part = np.argpartition(-sims, k - 1)[:k]
    return part[np.argsort(-sims[part])]


# Either pass over the matrix (VectorMatrix.start_pass): the same `work`, `best` and `busy_ms`.
AnyPass = MatrixPass | Int8Pass


def blockscan_topk(store: MemoryStore, q: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Top-k cosine over the BLOB vector table in bounded memory (no sqlite-vec)."""
    best_ids = np.zeros(0, dtype=np.int64)
    best = np.zeros(0, dtype=np.float32)
    for ids, mat in store.iter_vectors():
        sims = mat @ q
        best_ids = np.concatenate([best_ids, ids])
        best = np.concatenate([best, sims])
        if len(best) > k:
            keep = np.argpartition(-best, k - 1)[:k]
            best_ids, best = best_ids[keep], best[keep]
    order = np.argsort(-best)
    return [(int(best_ids[i]), float(best[i])) for i in order]
