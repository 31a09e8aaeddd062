"""The matrix pass on an int8 copy of the vectors: a quarter of the memory traffic, the same top-k.

The float32 pass over 100k × 384 vectors reads 154 MB per search (~11 ms of one core, the largest CPU
cost of a search after the query embedding and the keyword leg). Here each row is also kept as int8
with a scale of its own, the query is quantised the same way, and onnxruntime's MatMulInteger (u8 × s8
kernels: AVX2 / AVX-512 VNNI; the query in 7 bits so that no kernel's int16 sums saturate) gives every row an approximate cosine and a bound on its error. e5's
vectors share a large common part (unrelated texts meet at cosine ~0.8), so what is quantised is each
row's difference from the rows' mean c (its norm ~0.5: half the error), and row·q = c·q + (row − c)·q:

    |exact − approx| ≤ ‖d − d~‖·‖q‖ + ‖d~‖·‖q − q~‖      (d = row − c; Cauchy-Schwarz on both residuals).

Without the mean, every tenth row had to be scored again on e5-like data; with it, a few hundred.

Every row whose upper bound reaches the k-th best lower bound is scored again in float32, so the k best
rows and their scores are exactly the float32 pass's (at 100k chunks: a few hundred rows re-scored).
Without onnxruntime, or for a small matrix, the float32 pass stays (memory/search/vectors.py;
the threshold is SearchTuning.int8_min_rows).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search.blocks import Blocks

# Float32 rounding in the bounds and in the two products (a few ulps of a cosine): a margin on top.
_MARGIN = 1e-4

_SESSION: Any = None
_SESSION_LOCK = threading.Lock()


def _session() -> Any:
    """One MatMulInteger session per process (A: uint8 rows with zero point 128, B: the int8 query),
    or False when onnxruntime or onnx is missing."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            try:
                from hermit.memory.onnxrt import onnxruntime

                ort = onnxruntime()
                from onnx import TensorProto, helper
            except ImportError:
                _SESSION = False
                return _SESSION
            graph = helper.make_graph(
                [helper.make_node("MatMulInteger", ["rows", "query", "zero"], ["dots"])], "int8-matrix-pass",
                [helper.make_tensor_value_info("rows", TensorProto.UINT8, ["N", "D"]),
                 helper.make_tensor_value_info("query", TensorProto.INT8, ["D", 1]),
                 helper.make_tensor_value_info("zero", TensorProto.UINT8, [])],
                [helper.make_tensor_value_info("dots", TensorProto.INT32, ["N", 1])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            opts = ort.SessionOptions()
            # One thread: the pass runs in the search's worker beside the keyword leg (memory/search/hybrid.py).
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            _SESSION = ort.InferenceSession(model.SerializeToString(), sess_options=opts,
                                            providers=["CPUExecutionProvider"])
        return _SESSION


def query_levels() -> float:
    """The query's largest int8 level (memory/onnxrt.int8_levels): with 63, on a CPU without VNNI, the bound
    counts the query's larger residual, so the top-k stays exact (more rows re-scored)."""
    from hermit.memory.onnxrt import int8_levels

    return int8_levels()


def available() -> bool:
    return bool(_session())


def quantise(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows as uint8 (int8 + 128), each row's scale, the norm of its residual and of its int8 copy."""
    rows = np.asarray(rows, dtype=np.float32)
    scale = np.maximum(np.abs(rows).max(axis=1, initial=0.0), 1e-12).astype(np.float32) / 127.0
    q = np.clip(np.rint(rows / scale[:, None]), -127, 127)
    approx = q * scale[:, None]
    residual = np.linalg.norm(rows - approx, axis=1).astype(np.float32)
    norm = np.linalg.norm(approx, axis=1).astype(np.float32)
    return (q + 128).astype(np.uint8), scale.astype(np.float32), residual, norm


def with_room(buf: np.ndarray, n: int, need: int) -> np.ndarray:
    """`buf` when it has at least `need` rows, else a new array of a quarter more holding its first `n` rows.

    Appending into the rows past `n` of the same buffer leaves every view handed out before (at most its
    first `n` rows) as it was. (A search refreshes the matrix only between passes: the memory service
    runs one search at a time.)"""
    if len(buf) >= need:
        return buf
    out = np.empty((need + need // 4, *buf.shape[1:]), dtype=buf.dtype)
    out[:n] = buf[:n]
    return out


class Int8Copy:
    """The int8 mirror of a VectorMatrix's rows, extended as rows are appended (the matrix only grows
    between full reloads; `epoch` names a full reload)."""

    BLOCK_ROWS = 8_192  # quantised a block at a time: the temporaries stay a few MB

    _EMPTY = ("centre", "rows", "scale", "residual", "norm", "_bufs")
    centre: np.ndarray
    rows: np.ndarray
    scale: np.ndarray
    residual: np.ndarray
    norm: np.ndarray
    _bufs: tuple[np.ndarray, ...]

    def __init__(self) -> None:
        self.epoch = -1
        for name in self._EMPTY:  # empty again, made on first use (no numpy for a process without vectors)
            self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        if name not in self._EMPTY:
            raise AttributeError(name)
        # setdefault: what another thread stored meanwhile stays
        empty = {"centre": np.zeros(0, np.float32),  # the rows' mean at the full load (appended rows keep it)
                 "rows": np.zeros((0, 0), np.uint8), "scale": np.zeros(0, np.float32),
                 "residual": np.zeros(0, np.float32), "norm": np.zeros(0, np.float32)}
        empty["_bufs"] = (empty["rows"], empty["scale"], empty["residual"], empty["norm"])
        for key, value in empty.items():
            self.__dict__.setdefault(key, value)
        return self.__dict__[name]

    def __len__(self) -> int:
        return len(self.scale)

    def update(self, mat: np.ndarray, epoch: int) -> None:
        if epoch != self.epoch or len(self) > len(mat):
            self.__init__()  # type: ignore[misc]
            self.epoch = epoch
        done, n = len(self), len(mat)
        if done == n:
            return
        if not done:
            self.centre = mat.mean(axis=0, dtype=np.float64).astype(np.float32)
            self._bufs = (np.empty((n, mat.shape[1]), np.uint8), *[np.empty(n, np.float32) for _ in range(3)])
        # Appended rows go into the buffers' spare room (vectors.with_room): no copy of the whole copy.
        rows, *parts = (with_room(buf, done, n) for buf in self._bufs)
        self._bufs = (rows, *parts)
        for a in range(done, n, self.BLOCK_ROWS):
            b = min(a + self.BLOCK_ROWS, n)
            rows[a:b], parts[0][a:b], parts[1][a:b], parts[2][a:b] = quantise(mat[a:b] - self.centre)
        self.rows, self.scale, self.residual, self.norm = (buf[:n] for buf in self._bufs)


class Int8Pass:
    """The pass for one query, as memory/search/vectors.MatrixPass: `work` takes blocks of rows (a worker
    starts, the search thread helps with what is left), then `best(k)` gives the k best rows and their exact
    scores."""

    BLOCK_ROWS = 16_384

    def __init__(self, copy: Int8Copy, mat: np.ndarray, q: np.ndarray) -> None:
        self.copy, self.mat, self.q = copy, mat, np.asarray(q, dtype=np.float32)
        self.busy_ms = 0.0
        self.rescored = 0
        levels = query_levels()
        qs = max(float(np.abs(self.q).max(initial=0.0)), 1e-12) / levels
        qi = np.clip(np.rint(self.q / qs), -levels, levels)
        self._qs, self._qi = qs, qi.astype(np.int8).reshape(-1, 1)
        self._q_residual = float(np.linalg.norm(self.q - qi * qs))
        self._dots = np.empty(len(copy), np.int32)
        self._blocks = Blocks(len(copy), self.BLOCK_ROWS)
        self._lock = threading.Lock()

    def work(self) -> None:
        t0 = time.perf_counter()
        session, zero = _session(), np.array(128, np.uint8)
        for a, b in self._blocks.take():
            self._dots[a:b] = session.run(None, {"rows": self.copy.rows[a:b], "query": self._qi,
                                                 "zero": zero})[0][:, 0]
        with self._lock:
            self.busy_ms += (time.perf_counter() - t0) * 1000

    def best(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows, best first, and their float32 scores (exactly the float32 pass's).

        Every row whose upper bound reaches the k-th best lower bound is scored again in float32; the k
        best are then chosen among those few hundred rows (the others cannot be among them), not by a
        second selection over every row."""
        out, err = self.bounds()
        n = len(out)
        k = min(k, n)
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        floor = np.partition(out - err, n - k)[n - k]  # k rows score at least this
        out += err  # the upper bounds, in place
        maybe = np.flatnonzero(out >= floor)
        exact = self.mat[maybe] @ self.q
        self.rescored = len(maybe)
        top = np.argpartition(-exact, k - 1)[:k] if len(maybe) > k else np.arange(len(maybe))
        top = top[np.argsort(-exact[top])]
        return maybe[top], exact[top]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(approximate cosines, error bounds) of every row, once every block is done."""
        self.work()
        self._blocks.wait()
        c = self.copy
        # In place: each full-length temporary is ~0.03 ms at 100k rows.
        out = self._dots.astype(np.float32)
        out *= c.scale
        out *= np.float32(self._qs)
        out += np.float32(c.centre @ self.q)
        err = c.residual * np.float32(np.linalg.norm(self.q))
        err += c.norm * np.float32(self._q_residual)
        err += np.float32(_MARGIN)
        return out, err
