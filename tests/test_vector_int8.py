"""The int8 matrix pass gives the float32 pass's top-k exactly (ids and scores), on vectors shaped like
e5's (compressed cosines, a few large dimensions) and on near-duplicates; its copy follows appended
rows; without onnxruntime the float32 pass stays."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from hermit.memory.search import vector_int8
from hermit.memory.search.tuning import DEFAULT_TUNING
from hermit.memory.search.vector_int8 import Int8Copy, Int8Pass, quantise
from hermit.memory.search.vectors import MatrixPass, VectorMatrix

D = 384


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _e5_like(rng: np.random.Generator, n: int, outliers: bool = False) -> np.ndarray:
    """A shared direction (cosines of unrelated texts near 0.8, as e5's); with `outliers`, a few
    dimensions much larger than the rest (worse than e5's: its largest mean |x| is ~2.4× the median)."""
    common = np.random.default_rng(99).standard_normal(D)
    x = 2.0 * _unit(common) + rng.standard_normal((n, D)) / np.sqrt(D)
    if outliers:
        x[:, :4] *= 3
    return _unit(x)


def _matrix(mat: np.ndarray) -> VectorMatrix:
    vm = VectorMatrix()
    vm.mat, vm.ids = mat, np.arange(1000, 1000 + len(mat), dtype=np.int64)
    vm.loads = 1
    return vm


def _exact(vm: VectorMatrix, q: np.ndarray, k: int) -> list[tuple[int, float]]:
    return vm.top_of(vm.mat @ q, k)


@pytest.mark.parametrize("shape", ["gaussian", "e5-like", "outliers", "near-duplicates"])
def test_the_int8_pass_gives_the_float32_top_k(shape: str) -> None:
    rng = np.random.default_rng(7)
    n = 30_000
    if shape == "gaussian":
        mat = _unit(rng.standard_normal((n, D)))
    elif shape in ("e5-like", "outliers"):
        mat = _e5_like(rng, n, shape == "outliers")
    else:  # many rows a hair apart: the bounds must tell them apart or re-score them all
        base = _e5_like(rng, 300)
        mat = _unit(base[rng.integers(0, 300, n)] + 1e-4 * rng.standard_normal((n, D)))
    vm = _matrix(mat)
    for t in range(12):
        q = _unit(mat[rng.integers(n)] + 0.5 * rng.standard_normal(D) / np.sqrt(D)) if t % 2 else _e5_like(rng, 1)[0]
        for k in (1, 24, 96):
            p = vm.start_pass(q)
            assert isinstance(p, Int8Pass)
            p.work()
            p.work()  # the second caller (the search thread) finds it done
            got = vm.finish(p, k)
            want = _exact(vm, q, k)
            # The same rows in the same order, the same cosines but for float32 rounding (a gathered
            # product rounds differently, ~1e-8): rows of equal cosine may come in either order, or
            # trade places at the k-th.
            exact = vm.mat @ q
            for (i, a), (j, b) in zip(got, want, strict=True):
                assert abs(a - b) < 1e-6 and (i == j or abs(float(exact[i - 1000]) - b) < 1e-6)
            assert p.rescored < n  # not a second full pass
    if shape in ("gaussian", "e5-like"):
        assert p.rescored < n // 20
    # Otherwise (rows a hair apart, or dimensions of very different sizes) the bounds are loose and
    # many rows are scored again: still the exact top-k, at up to a float32 pass's cost.


def test_the_bound_holds_for_every_row() -> None:
    rng = np.random.default_rng(3)
    mat = _e5_like(rng, 25_000)
    copy = Int8Copy()
    copy.update(mat, 1)
    q = _e5_like(rng, 1)[0]
    p = Int8Pass(copy, mat, q)
    approx, error = p.bounds()
    assert np.all(np.abs(mat @ q - approx) <= error)


def test_two_threads_share_the_blocks() -> None:
    """A worker starts the pass and the search thread helps: every block is taken once, and the result
    is that of one thread doing them all."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    mat = _e5_like(rng, 70_000)
    vm = _matrix(mat)
    q = _e5_like(rng, 1)[0]
    alone = vm.finish(vm.start_pass(q), 24)
    p = vm.start_pass(q)
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(p.work)
        p.work()
        job.result()
    assert vm.finish(p, 24) == alone


def test_the_copy_follows_appended_rows_and_restarts_on_a_reload() -> None:
    rng = np.random.default_rng(1)
    mat = _unit(rng.standard_normal((20_500, D)))
    copy = Int8Copy()
    copy.update(mat[:9_000], 1)
    copy.update(mat, 1)  # rows appended by an incremental refresh
    whole = quantise(mat - copy.centre)
    assert np.allclose(copy.centre, mat[:9_000].mean(axis=0), atol=1e-6)  # kept for appended rows
    assert np.array_equal(copy.rows, whole[0])
    for got, want in zip((copy.scale, copy.residual, copy.norm), whole[1:], strict=True):
        assert np.allclose(got, want)
    other = _unit(rng.standard_normal((20_500, D)))
    copy.update(other, 2)  # a full reload: same length, other rows
    assert np.allclose(copy.centre, other.mean(axis=0), atol=1e-6)
    assert np.array_equal(copy.rows, quantise(other - copy.centre)[0])


def test_a_small_matrix_keeps_the_float32_pass() -> None:
    vm = _matrix(_unit(np.random.default_rng(0).standard_normal((DEFAULT_TUNING.int8_min_rows - 1, D))))
    assert isinstance(vm.start_pass(vm.mat[0]), MatrixPass)


def test_without_onnxruntime_the_float32_pass_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    monkeypatch.setattr(vector_int8, "_SESSION", None)  # as in a process that never loaded it
    vm = _matrix(_unit(np.random.default_rng(0).standard_normal((DEFAULT_TUNING.int8_min_rows, D))))
    q = vm.mat[5]
    p = vm.start_pass(q)
    assert isinstance(p, MatrixPass)
    p.work()
    assert vm.finish(p, 3) == _exact(vm, q, 3)
