"""The int8 matrix pass gives the float32 pass's top-k exactly (ids and scores), on vectors shaped like
e5's (compressed cosines, a few large dimensions) and on near-duplicates; its copy follows appended
rows; without onnxruntime the float32 pass stays."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from hermit.memory.search import vector_int8
from hermit.memory.search.tuning import DEFAULT_TUNING
from hermit.memory.search.vector_int8 import Int8Copy, Int8Pass, quantise, query_levels
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
    if shape in ("gaussian", "e5-like"):  # a 7-bit query (a CPU without VNNI) has twice its residual
        assert p.rescored < (n // 20 if query_levels() == 127 else n // 10)
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


def test_a_write_appends_into_spare_room_and_matches_a_full_load(tmp_path: Path) -> None:
    """The watcher re-indexing one note must not copy the whole matrix: appended rows go into spare room
    of the same buffers (float32 and int8), and the result equals a full load of the same index."""
    from hermit.memory.index.chunking import Chunk
    from hermit.memory.store.sqlite import IndexStore

    rng = np.random.default_rng(3)
    store = IndexStore(tmp_path / "index.sqlite")
    store.set_meta({"dims": str(D), "index_id": "test"})  # what the indexer records

    def write(path: str, n: int) -> None:
        chunks = [Chunk(start_line=i, end_line=i, hash=f"{path}{i}", text=f"{path} line {i}") for i in range(n)]
        store.replace_file(path=path, source="memory", file_hash=path, mtime=0, size=0, chunks=chunks,
                           vectors=_unit(rng.standard_normal((n, D))), model="m")

    for k in range(12):  # 1,200 rows: past the int8 copy's 1,000 (the spare room is the same at any size)
        write(f"memory/d{k}.md", 100)
    vm = VectorMatrix(int8_min_rows=1_000)
    vm.refresh(store)
    vm.start_pass(vm.mat[0])  # quantises the int8 copy
    write("memory/new-0.md", 40)  # grows the buffers once (a quarter more than needed)
    vm.refresh(store)
    vm.start_pass(vm.mat[0])
    buffers = (vm._mat_buf, vm._ids_buf, vm.int8._bufs[0])
    for k in range(1, 4):
        write(f"memory/new-{k}.md", 40)
        vm.refresh(store)
        vm.start_pass(vm.mat[0])
        assert (vm._mat_buf, vm._ids_buf, vm.int8._bufs[0]) == buffers  # no copy of the whole matrix
    write("memory/d3.md", 10)  # a rewrite: its old rows stay as garbage until a reload
    vm.refresh(store)
    fresh = VectorMatrix(int8_min_rows=1_000)
    fresh.refresh(store)
    assert vm.garbage == 100 and fresh.garbage == 0  # the 100 rows d3.md had
    assert len(fresh.ids) == 1_270 and fresh.int8.rows is not None  # still past the int8 copy's 1,000 rows
    live = np.isin(vm.ids, fresh.ids)
    assert np.array_equal(vm.ids[live], fresh.ids) and np.array_equal(vm.mat[live], fresh.mat)
    assert {i: r for i, r in vm.row_of.items() if i in set(fresh.ids.tolist())} == {
        i: int(np.flatnonzero(vm.ids == i)[-1]) for i in fresh.ids.tolist()}
    q = fresh.mat[17]
    p, pf = vm.start_pass(q), fresh.start_pass(q)
    p.work()
    pf.work()
    alive = set(fresh.ids.tolist())
    got = [(i, s) for i, s in vm.finish(p, 10) if i in alive][:10]  # a search drops the garbage rows' ids
    want = fresh.finish(pf, 10)[:10]
    assert [i for i, _ in got] == [i for i, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
    # The int8 copy equals quantising every row at once around the same centre.
    whole = quantise(vm.mat - vm.int8.centre)
    assert np.array_equal(vm.int8.rows, whole[0]) and np.allclose(vm.int8.norm, whole[3])



@pytest.mark.parametrize("int8_min_rows", [1_000, 100_000], ids=["int8", "float32"])
def test_a_reused_chunk_id_is_never_scored_by_the_deleted_chunks_vector(tmp_path: Path, int8_min_rows: int) -> None:
    """SQLite gives a new chunk the id after the largest: that of a chunk deleted since (the newest note
    removed, then another indexed). The long-lived matrix kept the deleted chunk's row under that id, so a
    query near the deleted text found the new, unrelated chunk at the old text's cosine (audit Z)."""
    from hermit.memory.index.chunking import Chunk
    from hermit.memory.store.sqlite import IndexStore

    rng = np.random.default_rng(5)
    store = IndexStore(tmp_path / "index.sqlite")
    store.set_meta({"dims": str(D), "index_id": "test"})

    def write(path: str, vectors: np.ndarray) -> None:
        chunks = [Chunk(start_line=i, end_line=i, hash=f"{path}{i}", text=f"{path} line {i}")
                  for i in range(len(vectors))]
        store.replace_file(path=path, source="memory", file_hash=path, mtime=0, size=0, chunks=chunks,
                           vectors=vectors, model="m")

    write("memory/old.md", _e5_like(rng, 2_000))
    vm = VectorMatrix(int8_min_rows=int8_min_rows)
    vm.refresh(store)
    gone = _e5_like(rng, 5)
    write("memory/2026-01-20.md", gone)  # the largest ids
    vm.refresh(store)
    ids_before = set(vm.ids.tolist())
    store.delete_file("memory/2026-01-20.md")
    vm.refresh(store)
    write("memory/2026-01-21.md", _e5_like(rng, 5))  # takes the same ids
    vm.refresh(store)
    assert set(vm.ids.tolist()) & ids_before - set(range(2_001))  # the ids were reused
    for q in gone:
        p = vm.start_pass(q)
        p.work()
        hits = vm.finish(p, 10)
        exact = vm.scores(q, [i for i, _ in hits if i > 0])
        assert all(abs(s - exact[i]) < 0.02 for i, s in hits if i > 0), hits  # each id's own vector


def test_a_reused_id_of_a_chunk_stored_without_a_vector_is_not_scored_by_the_old_one(tmp_path: Path) -> None:
    """The same with a chunk stored keyword-only (a first index stores files so before embedding them, or the
    embedder failed): it brought no row, so the deleted chunk's row kept answering for its id (audit R2)."""
    from hermit.memory.index.chunking import Chunk
    from hermit.memory.store.sqlite import IndexStore

    rng = np.random.default_rng(7)
    store = IndexStore(tmp_path / "index.sqlite")
    store.set_meta({"dims": str(D), "index_id": "test"})

    def write(path: str, n: int, vectors: np.ndarray | None) -> None:
        chunks = [Chunk(start_line=i, end_line=i, hash=f"{path}{i}", text=f"{path} line {i}") for i in range(n)]
        store.replace_file(path=path, source="memory", file_hash=path, mtime=0, size=0, chunks=chunks,
                           vectors=vectors, model="m")

    write("memory/old.md", 50, _e5_like(rng, 50))
    vm = VectorMatrix(int8_min_rows=100_000)
    vm.refresh(store)
    gone = _e5_like(rng, 5)
    write("memory/private/diagnosis.md", 5, gone)  # the largest ids
    vm.refresh(store)
    gone_ids = sorted(set(vm.ids.tolist()) - set(range(1, 51)))
    store.delete_file("memory/private/diagnosis.md")
    vm.refresh(store)
    write("memory/2026-01-21.md", 5, None)  # keyword-only: the same ids, no vector
    vm.refresh(store)
    assert {r.path for r in store.chunk_rows(gone_ids).values()} == {"memory/2026-01-21.md"}
    assert vm.scores(gone[0], gone_ids) == {} and len(vm.ids) == 55  # retired, and no zero rows kept
    assert not {i for i, _ in vm.topk(gone[0], 10)} & set(gone_ids)
    write("memory/2026-01-21.md", 5, _e5_like(rng, 5))  # embedded later: real rows again
    vm.refresh(store)
    assert set(vm.scores(gone[0], list(store.chunk_rows(list(range(51, 70))))))

def test_the_int8_pass_takes_every_row_when_k_is_larger() -> None:
    """k (plus the rows of deleted chunks) at or above the rows: every row, best first, both passes."""
    rng = np.random.default_rng(11)
    mat = _e5_like(rng, 50)
    for rows in (10, 10_000):  # the int8 pass from 10 rows, and the float32 pass
        vm = VectorMatrix(int8_min_rows=rows)
        vm.mat, vm.ids, vm.loads = mat, np.arange(1000, 1050, dtype=np.int64), 1
        vm.garbage = 3
        q = _e5_like(rng, 1)[0]
        for k in (47, 50, 80):
            p = vm.start_pass(q)
            assert isinstance(p, Int8Pass if rows == 10 else MatrixPass)
            p.work()
            got = vm.finish(p, k)
            assert [i for i, _ in got] == [i for i, _ in _exact(vm, q, k)] and len(got) == 50


class _HeldRows(np.ndarray):
    """A matrix whose first block waits for `go` when read: the block another thread is still writing."""

    go: threading.Event
    taken: threading.Event

    def __getitem__(self, key: object) -> np.ndarray:
        if isinstance(key, slice) and key.start == 0 and hasattr(self, "go"):
            self.taken.set()
            self.go.wait()
        return np.asarray(super().__getitem__(key))


def test_the_best_rows_wait_for_a_block_another_thread_is_still_on() -> None:
    """The worker picks the k best as soon as its own share of the blocks is done (query_runner.EmbedBeside):
    a block the search thread took and has not written yet must be waited for, not read half-done (the
    int8 pass already waited; the float32 pass, used under 20k rows, did not)."""
    rng = np.random.default_rng(3)
    mat = rng.standard_normal((3 * MatrixPass.BLOCK_ROWS, 32)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    q = mat[5].copy()  # the best row is in the first block
    held = mat.view(_HeldRows)
    held.go, held.taken = threading.Event(), threading.Event()
    p = MatrixPass(held, q)
    helper = threading.Thread(target=p.work)
    helper.start()
    assert held.taken.wait(10)  # the helper holds block 0
    got: list[np.ndarray] = []
    picker = threading.Thread(target=lambda: got.append(p.best(3)[0]))
    picker.start()  # takes the other blocks, then must wait for block 0
    held.go.set()
    picker.join(10)
    helper.join(10)
    assert got and list(got[0]) == list(np.argsort(-(mat @ q))[:3])
