"""The embedding provider interface every backend implements, and the identity recorded in the index."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hermit.memory.lazy_numpy import numpy as np


@dataclass(frozen=True)
class EmbedderInfo:
    """Identity of an embedding space. Vectors from two different infos are never mixed.

    `provider_key` distinguishes endpoints serving the same model name (two Ollama hosts, say);
    `score_floor`/`score_ceiling` calibrate this model's cosine range onto [0, 1] so that minScore
    means the same thing whichever model is active (e5's cosines are compressed into ~0.75-0.95).
    """

    provider: str
    model: str
    dims: int
    provider_key: str = ""
    max_input_tokens: int = 512
    score_floor: float = 0.0
    score_ceiling: float = 1.0


@runtime_checkable
class Embedder(Protocol):
    @property
    def info(self) -> EmbedderInfo:
        """Identity; for remote providers `dims` may be discovered by the first call."""
        ...

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """(n, dims) float32, rows L2-normalised. Raises EmbeddingError."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """(dims,) float32, L2-normalised. Raises EmbeddingError."""
        ...


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)


def provider_key(*parts: str | None) -> str:
    """A short stable key for an endpoint (base URL, etc.), never containing secrets."""
    raw = "|".join(p or "" for p in parts)
    return hashlib.sha256(raw.encode()).hexdigest()[:16] if raw.strip("|") else ""


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@runtime_checkable
class LineEmbedder(Protocol):
    """An embedder that can also give each line of a document a vector from the document's own token
    states (one pass through the model for chunks and their lines)."""

    def line_vectors_from_tokens(self) -> bool:
        """Whether `embed_with_lines` will give line vectors (cheap: loads nothing)."""
        ...

    def embed_with_lines(self, texts: list[str]) -> tuple[np.ndarray, list[list[np.ndarray | None]]] | None:
        """(n, dims) document vectors and per document a vector per line (None: the line has no
        tokens), or None when the runtime in use cannot."""
        ...


@runtime_checkable
class QueryRunner(Protocol):
    """An embedder with a faster runtime for queries that a long-lived process loads in the background
    (E5Embedder): `warm_queries` starts the load, `query_uses_one_core` says when queries run on it."""

    def warm_queries(self) -> threading.Thread | None:
        """Start loading the query runtime (None: nothing to load, or started already)."""
        ...

    def query_uses_one_core(self) -> bool:
        """Whether a query now embeds on one core (the search then runs it beside its keyword leg)."""
        ...
