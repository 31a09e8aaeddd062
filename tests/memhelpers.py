"""Helpers for memory tests: building services and a tiny deterministic embedder (a second 'model')."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from hermit.config.schema import MemorySearchConfig
from hermit.memory.embedders.base import Embedder, EmbedderInfo, l2_normalise
from hermit.memory.service import MemoryKey, MemoryService


class HashEmbedder:
    """Bag-of-words hashed into 64 dims: a real Embedder implementation with a different identity."""

    def __init__(self, dims: int = 64, model: str = "hash-test") -> None:
        self._info = EmbedderInfo(provider="test", model=model, dims=dims)
        self.calls = 0

    @property
    def info(self) -> EmbedderInfo:
        return self._info

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self._info.dims, dtype=np.float32)
        for w in re.findall(r"\w+", text.lower()):
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % self._info.dims] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return l2_normalise(np.stack([self._vec(t) for t in texts])) if texts else np.zeros((0, self._info.dims))

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalise(self._vec(text))


def service(ws: Path, db: Path, embedder: Embedder | None, cfg: MemorySearchConfig | None = None,
            long_lived: bool = False) -> MemoryService:
    return MemoryService(MemoryKey("main", ws), db, cfg or MemorySearchConfig(), embedder, long_lived=long_lived)


def chunk_rows(svc: MemoryService) -> list[tuple[str, int, int]]:
    return [tuple(r) for r in svc.store.conn.execute(  # type: ignore[misc]
        "select path, start_line, end_line from chunks order by path, start_line")]
