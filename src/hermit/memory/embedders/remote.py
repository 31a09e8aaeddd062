"""Remote embedding providers over HTTP: OpenAI, Gemini and any OpenAI-compatible endpoint (Ollama, vLLM…).

Texts are sent in batches of `memory_search.remote.batch_size`; 429, 5xx and connection failures are
retried with hermit.retry's exponential backoff (a `Retry-After` header wins, shortened to a minute:
indexing is background work that should go on rather than fail) up to `max_retries`. Every other failure
is an EmbeddingError whose hint says what to change. The vector size is discovered from the first
response and must stay the same afterwards. The API key never leaves the request headers: it is not part
of `provider_key`, of an error message, or of `repr`. An endpoint on this machine whose port another login
user's program holds is refused before a text is sent (hermit.models.loopback): it would read the notes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx
import numpy as np

from hermit.config.schema import MemorySearchConfig
from hermit.direct_http import DirectHereClient
from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import Embedder, EmbedderInfo, l2_normalise, provider_key
from hermit.models.loopback import HINT, Holder, guard_stream
from hermit.redaction import header_secret, register, url_passwords, without_userinfo
from hermit.retry import RetryPolicy, retry_after_seconds

Wire = Literal["openai", "gemini"]
Kind = Literal["document", "query"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
DEFAULT_MODELS = {"openai": "text-embedding-3-small", "gemini": "gemini-embedding-001"}
# Sizes of well-known models, reported before the first call; a response always has the last word.
KNOWN_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "gemini-embedding-001": 3072,
}
KNOWN_MAX_TOKENS = {
    "text-embedding-3-small": 8191,
    "text-embedding-3-large": 8191,
    "text-embedding-ada-002": 8191,
    "gemini-embedding-001": 2048,
}
# Cosine calibration (see EmbedderInfo): text-embedding-3-small puts unrelated text near 0.1 and
# paraphrases near 0.6-0.7. Models not listed (not measured here) use raw cosine, floor 0 / ceiling 1.
KNOWN_SCORE_RANGE = {
    "text-embedding-3-small": (0.15, 0.65),
}
GEMINI_MAX_BATCH = 100  # batchEmbedContents rejects more requests than this
_ERROR_BODY_CHARS = 300


@dataclass(frozen=True)
class RemoteSettings:
    provider: str  # "openai" | "gemini" | "openai-compatible"
    wire: Wire
    model: str
    base_url: str
    api_key: str | None
    key_source: str  # where the key came from / should come from, for hints (never the key itself)
    headers: Mapping[str, str]
    batch_size: int
    timeout_s: float
    max_retries: int

    def __repr__(self) -> str:
        return (f"RemoteSettings(provider={self.provider!r}, model={self.model!r}, base_url={self.shown_url!r}, "
                f"api_key={'set' if self.api_key else 'unset'})")

    @property
    def shown_url(self) -> str:
        """The base URL as messages show it: without a `user:password@`."""
        return without_userinfo(self.base_url)


class _Retryable(Exception):
    def __init__(self, what: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after


class RemoteEmbedder:
    """An Embedder backed by an HTTP API; `sleep` is injectable so tests need not wait out backoffs."""

    def __init__(
        self,
        settings: RemoteSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        backoff_base_s: float = 0.5,
    ) -> None:
        self._s = settings
        self._sleep = sleep
        self._retry = RetryPolicy(max_retries=settings.max_retries, base_delay=backoff_base_s, max_delay=30.0,
                                  max_retry_after=60.0, long_wait="cap")
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        floor, ceiling = KNOWN_SCORE_RANGE.get(settings.model, (0.0, 1.0))
        self._info = EmbedderInfo(
            provider=settings.provider,
            model=settings.model,
            dims=KNOWN_DIMS.get(settings.model, 0) if settings.provider != "openai-compatible" else 0,
            provider_key=provider_key(settings.provider, settings.base_url),
            max_input_tokens=KNOWN_MAX_TOKENS.get(settings.model, 512),
            score_floor=floor,
            score_ceiling=ceiling,
        )
        self._dims_confirmed = False

    def __repr__(self) -> str:
        return f"RemoteEmbedder({self._s!r})"

    @property
    def info(self) -> EmbedderInfo:
        """Identity; `dims` is 0 for an unknown model until the first response (see `discover_dims`)."""
        return self._info

    @property
    def settings(self) -> RemoteSettings:
        return self._s

    def discover_dims(self) -> int:
        """The vector size, asking the server with a one-word probe if no response has told it yet."""
        if not self._dims_confirmed:
            self.embed_query("dimension probe")
        return self._info.dims

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- Embedder ---------------------------------------------------------------------------------------

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "document")

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text], "query")[0]

    # -- internals --------------------------------------------------------------------------------------

    def _embed(self, texts: list[str], kind: Kind) -> np.ndarray:
        if not texts:
            return np.empty((0, self._info.dims), dtype=np.float32)
        # Both APIs reject empty input; a lone space embeds as "nothing in particular".
        clean = [t if t.strip() else " " for t in texts]
        batch = self._s.batch_size
        if self._s.wire == "gemini":
            batch = min(batch, GEMINI_MAX_BATCH)
        parts = [self._embed_batch(clean[i:i + batch], kind) for i in range(0, len(clean), batch)]
        return l2_normalise(np.concatenate(parts, axis=0))

    def _embed_batch(self, texts: list[str], kind: Kind) -> np.ndarray:
        url, body = self._request(texts, kind)
        data = self._post(url, body)
        vectors = self._parse(data, len(texts))
        self._check_dims(vectors.shape[1])
        return vectors

    def _request(self, texts: list[str], kind: Kind) -> tuple[str, dict[str, Any]]:
        s = self._s
        if s.wire == "openai":
            body: dict[str, Any] = {"model": s.model, "input": texts}
            if s.provider == "openai":
                body["encoding_format"] = "float"
            return f"{s.base_url}/embeddings", body
        task = "RETRIEVAL_QUERY" if kind == "query" else "RETRIEVAL_DOCUMENT"
        name = f"models/{s.model}"
        return f"{s.base_url}/{name}:batchEmbedContents", {
            "requests": [{"model": name, "content": {"parts": [{"text": t}]}, "taskType": task} for t in texts]
        }

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "User-Agent": "hermit"}
        key = self._s.api_key
        if key:
            if self._s.wire == "gemini":
                h["x-goog-api-key"] = key
            else:
                h["Authorization"] = f"Bearer {key}"
        h.update(self._s.headers)
        return h

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                # a proxy from the environment carries nothing to this machine (hermit.direct_http)
                self._client = DirectHereClient(timeout=self._s.timeout_s, headers=self._headers())
            return self._client

    def _post(self, url: str, body: dict[str, Any]) -> Any:
        attempt = 0
        while True:
            try:
                return self._post_once(url, body)
            except _Retryable as r:
                delay = self._retry.delay(attempt, r.retry_after)
                if delay is None:
                    raise self._exhausted(r) from None
                attempt += 1
                self._sleep(delay)

    def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace hook: each new connection (a kept-alive one was checked when made) is refused
        before a byte is sent when another login user's program holds its other end (models.loopback)."""
        if event == "connection.connect_tcp.complete":
            guard_stream(info.get("return_value"), self._foreign)

    def _foreign(self, holder: Holder) -> EmbeddingError:
        return EmbeddingError(f"{self._s.provider} embeddings: {holder.describe()}",
                              f"{HINT}; or change memory_search.remote.base_url")

    def _post_once(self, url: str, body: dict[str, Any]) -> Any:
        s = self._s
        try:
            resp = self._http().post(url, json=body, extensions={"trace": self._trace})
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out after {s.timeout_s:g}s ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise _Retryable(f"could not connect to {s.shown_url}: {e or type(e).__name__}") from e
        except httpx.HTTPError as e:
            raise self._garbage(f"unreadable response ({type(e).__name__}: {e})") from e
        code = resp.status_code
        if code == 429 or code >= 500:
            raise _Retryable(f"HTTP {code}: {_error_text(resp)}", retry_after_seconds(resp.headers))
        if code in (401, 403):
            raise EmbeddingError(
                f"{s.provider} embeddings at {s.shown_url} refused the API key (HTTP {code}): {_error_text(resp)}",
                f"check the key in {s.key_source}; it may be wrong, revoked, or lack access to model "
                f"'{s.model}'",
            )
        if code == 404:
            raise EmbeddingError(
                f"{s.provider} embeddings: {without_userinfo(url)} answered 404 (not found): {_error_text(resp)}",
                f"check memory_search.model ('{s.model}') and memory_search.remote.base_url ('{s.shown_url}')"
                + ("; for Ollama pull the model first (`ollama pull <model>`)" if s.provider == "openai-compatible"
                   else ""),
            )
        if code >= 400:
            raise EmbeddingError(
                f"{s.provider} embeddings rejected the request (HTTP {code}): {_error_text(resp)}",
                f"check memory_search.model ('{s.model}'); if inputs are too long, lower "
                "memory_search.chunking.tokens; if batches are too large, lower memory_search.remote.batch_size",
            )
        if code >= 300:
            raise EmbeddingError(
                f"{s.provider} embeddings: unexpected HTTP {code} from {url}",
                "check memory_search.remote.base_url (a redirect usually means a wrong path or http vs https)",
            )
        try:
            return resp.json()
        except ValueError as e:
            raise self._garbage(f"the response is not JSON ({resp.text[:80]!r}…)") from e

    def _parse(self, data: Any, n: int) -> np.ndarray:
        if isinstance(data, dict) and "error" in data and not ({"data", "embeddings"} & data.keys()):
            err = data["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise EmbeddingError(
                f"{self._s.provider} embeddings answered with an error: {' '.join(str(msg).split())[:300]}",
                f"check memory_search.model ('{self._s.model}') and memory_search.remote.base_url",
            )
        try:
            if self._s.wire == "openai":
                items = data["data"]
                if not isinstance(items, list):
                    raise TypeError("'data' is not a list")
                if all(isinstance(it, dict) and isinstance(it.get("index"), int) for it in items):
                    items = sorted(items, key=lambda it: it["index"])
                rows = [it["embedding"] for it in items]
            else:
                rows = [it["values"] for it in data["embeddings"]]
        except (KeyError, TypeError, IndexError) as e:
            raise self._garbage(f"unexpected response shape ({type(e).__name__}: {e})") from e
        if len(rows) != n:
            raise EmbeddingError(
                f"{self._s.provider} embeddings returned {len(rows)} vectors for {n} texts",
                "the endpoint may cap the batch size: lower memory_search.remote.batch_size",
            )
        try:
            lengths = {len(r) for r in rows}
            if len(lengths) != 1:
                raise EmbeddingError(
                    f"{self._s.provider} embeddings returned vectors of different sizes {sorted(lengths)} "
                    "in one response",
                    "the endpoint is misbehaving; check memory_search.remote.base_url and the model",
                )
            arr = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise self._garbage(f"vectors are not lists of numbers ({e})") from e
        if arr.ndim != 2 or arr.shape[1] == 0 or not np.all(np.isfinite(arr)):
            raise self._garbage("vectors are empty or contain non-finite numbers")
        return arr

    def _check_dims(self, dims: int) -> None:
        with self._lock:
            if self._dims_confirmed:
                if dims != self._info.dims:
                    raise EmbeddingError(
                        f"{self._s.provider} model '{self._s.model}' returned {dims}-dim vectors after "
                        f"{self._info.dims}-dim ones",
                        "the model behind the endpoint changed; Hermit will rebuild the index for the new "
                        "model - run `hermit memory index --force` once the endpoint is stable",
                    )
                return
            self._info = replace(self._info, dims=dims)
            self._dims_confirmed = True

    def _garbage(self, what: str) -> EmbeddingError:
        s = self._s
        api = "Gemini batchEmbedContents" if s.wire == "gemini" else "OpenAI /embeddings"
        return EmbeddingError(
            f"{s.provider} embeddings at {s.shown_url}: {what}",
            f"memory_search.remote.base_url must point at an endpoint speaking the {api} API"
            + (" (for Ollama: http://localhost:11434/v1)" if s.provider == "openai-compatible" else ""),
        )

    def _exhausted(self, r: _Retryable) -> EmbeddingError:
        s = self._s
        tries = s.max_retries + 1
        if r.what.startswith("HTTP 429"):
            hint = ("the provider is rate limiting; retry later, lower memory_search.remote.batch_size, "
                    "or raise memory_search.remote.max_retries")
        elif r.what.startswith("HTTP"):
            hint = "the provider is failing on its side; retry later or switch memory_search.provider"
        elif s.provider == "openai-compatible":
            hint = (f"is the server at {s.shown_url} running? (Ollama: `ollama serve`); "
                    "or raise memory_search.remote.timeout_seconds")
        else:
            hint = "check the network connection, or raise memory_search.remote.timeout_seconds"
        return EmbeddingError(f"{s.provider} embeddings failed after {tries} attempt(s): {r.what}", hint)


def _error_text(resp: httpx.Response) -> str:
    """The provider's own error message (both APIs use {"error": {"message": ...}}), shortened."""
    try:
        data = resp.json()
        err = data.get("error") if isinstance(data, dict) else None
        msg = err.get("message") if isinstance(err, dict) else err
        text = str(msg) if msg else resp.text
    except ValueError:
        text = resp.text
    text = " ".join(text.split())
    return text[:_ERROR_BODY_CHARS] + ("…" if len(text) > _ERROR_BODY_CHARS else "") or resp.reason_phrase


def _resolve_key(provider: str, cfg: MemorySearchConfig, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(key, where it comes from) - the second part names env var and config key for hints."""
    r = cfg.remote
    if r.api_key:
        return r.api_key, "memory_search.remote.api_key"
    names = ([r.api_key_env] if r.api_key_env else
             {"openai": ["OPENAI_API_KEY"], "gemini": ["GEMINI_API_KEY", "GOOGLE_API_KEY"]}.get(provider, []))
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value, f"the {name} environment variable"
    if names:
        return None, " or ".join(f"the {n} environment variable" for n in names)
    return None, "memory_search.remote.api_key or memory_search.remote.api_key_env"


def create_remote_embedder(
    cfg: MemorySearchConfig,
    environ: Mapping[str, str],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Embedder:
    """The embedder for a remote `cfg.provider`; raises EmbeddingError when it cannot work as configured."""
    provider = cfg.provider
    r = cfg.remote
    if provider not in ("openai", "gemini", "openai-compatible"):
        raise EmbeddingError(f"'{provider}' is not a remote embedding provider",
                             "memory_search.provider is one of: local, openai, gemini, openai-compatible, none")
    if provider == "openai-compatible":
        if not r.base_url:
            raise EmbeddingError(
                "memory_search.provider 'openai-compatible' needs memory_search.remote.base_url",
                "set it to the server's OpenAI-style API root, e.g. http://localhost:11434/v1 for Ollama",
            )
        if not cfg.model:
            raise EmbeddingError(
                "memory_search.provider 'openai-compatible' needs memory_search.model",
                "set it to an embedding model the server has, e.g. nomic-embed-text for Ollama",
            )
    model = cfg.model or DEFAULT_MODELS[provider]
    if provider == "gemini" and model.startswith("models/"):
        model = model.removeprefix("models/")
    default_url = {"openai": OPENAI_BASE_URL, "gemini": GEMINI_BASE_URL}.get(provider, "")
    base_url = (r.base_url or default_url).rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise EmbeddingError(f"memory_search.remote.base_url '{base_url}' is not an http(s) URL",
                             "write it in full, e.g. https://api.openai.com/v1 or http://localhost:11434/v1")
    key, source = _resolve_key(provider, cfg, environ)
    if key is None and (provider != "openai-compatible" or r.api_key_env):
        env_names = r.api_key_env or {"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY (or GOOGLE_API_KEY)"}[
            provider]
        raise EmbeddingError(
            f"no API key for {provider} embeddings: {source} is not set",
            f"export {env_names}=…, or set memory_search.remote.api_key (or api_key_env) in the config; "
            "or use memory_search.provider 'local', which needs no key",
        )
    # Masked wherever text is shown or stored (an endpoint may echo its key into an error), as a model's key is.
    register(key, *(header_secret(n, v) for n, v in r.headers.items()), *url_passwords(base_url))
    settings = RemoteSettings(
        provider=provider,
        wire="gemini" if provider == "gemini" else "openai",
        model=model,
        base_url=base_url,
        api_key=key,
        key_source=source,
        headers=dict(r.headers),
        batch_size=r.batch_size,
        timeout_s=r.timeout_seconds,
        max_retries=r.max_retries,
    )
    return RemoteEmbedder(settings, sleep=sleep)
