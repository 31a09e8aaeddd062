"""Helpers for memory tests: building services and a tiny deterministic embedder (a second 'model')."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

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


class Backend:
    """The store the memory helpers open: SQLite files, or PostgreSQL when the `store_backend` fixture says so."""

    name = "sqlite"
    dsn = ""


def on_backend(cfg: MemorySearchConfig, db: Path) -> MemorySearchConfig:
    """`cfg` pointed at the current test backend. On PostgreSQL each index file name becomes its own schema
    prefix, so two paths in one test stay two indexes, and one path opened twice is one index."""
    if Backend.name == "sqlite":
        return cfg
    prefix = "t_" + re.sub(r"[^a-z0-9_]", "_", db.stem.lower())[:20] + "_"
    store = cfg.store.model_copy(update={
        "backend": "postgres",
        "postgres": cfg.store.postgres.model_copy(update={"schema_prefix": prefix, "dsn_env": "HERMIT_TEST_PG_DSN"})})
    return cfg.model_copy(update={"store": store})


def service(ws: Path, db: Path, embedder: Embedder | None, cfg: MemorySearchConfig | None = None,
            long_lived: bool = False, agent_id: str = "main") -> MemoryService:
    return MemoryService(MemoryKey(agent_id, ws), db, on_backend(cfg or MemorySearchConfig(), db), embedder,
                         long_lived=long_lived, environ={"HERMIT_TEST_PG_DSN": Backend.dsn})


def sql(svc: MemoryService, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run `query` on the service's index whatever the backend: `{t}` stands for its table prefix."""
    store: Any = svc.store
    if Backend.name == "sqlite":
        return [tuple(r) for r in store.conn.execute(query.replace("{t}", ""), params)]
    return [tuple(r) for r in store.conn.execute(query.replace("{t}", store.s + ".").replace("?", "%s"), params)]


def chunk_rows(svc: MemoryService) -> list[tuple[str, int, int]]:
    return [(str(p), int(a), int(b)) for p, a, b in
            sql(svc, "select path, start_line, end_line from {t}chunks order by path, start_line")]


# Twelve daily logs of everyday errands, each naming Tom (a name in every note, as a speaker's would be).
ERRAND_TOPICS = ["garden compost tomatoes", "bus schedule weather", "piano lesson Tuesday", "tax return receipts",
                 "dentist cleaning", "bike repair chain", "school trip aquarium", "birthday dinner Thai",
                 "library books due", "car service brakes", "rent landlord transfer", "gym classes yoga"]


def errand_logs(ws: Path) -> None:
    for k, topic in enumerate(ERRAND_TOPICS):
        note = ws / "memory" / f"2026-04-{k + 1:02d}.md"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(f"# 2026-04-{k + 1:02d}\n\n- Talked with Tom about the {topic}.\n- Tom will call back later.\n",
                        encoding="utf-8")
