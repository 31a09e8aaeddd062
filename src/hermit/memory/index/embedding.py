"""The vectors of a batch of changed files: their chunks' through the embedding cache, their lines'.

memory.index.sync reads and chunks the changed files (`Pending`) and writes them into the index; this
embeds them first. Chunk vectors go through the embedding cache (a rebuild's staging index and the live
one both keep each batch, so a killed rebuild resumes); a line vector is taken from the live index when
the line is unchanged, else embedded with the chunks in one pass, or taken from their token states
(memory.index.line_vectors, an embedder with `line_vectors_from_tokens`). Split from sync.py by
responsibility.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from hermit.config.memory_search import MemorySearchConfig
from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import Embedder, LineEmbedder
from hermit.memory.index import line_vectors
from hermit.memory.index.chunking import Chunk
from hermit.memory.index.report import SyncReport
from hermit.memory.index.sources import SourceFile
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.store.api import MemoryStore


def line_kind(embedder: Embedder | None) -> int:
    return 2 if isinstance(embedder, LineEmbedder) and embedder.line_vectors_from_tokens() else 1


class Pending(NamedTuple):
    file: SourceFile
    hash: str
    mtime_ns: int
    size: int
    chunks: list[Chunk]
    messages: int
    lines: dict[int, tuple[str, str]]  # line number → (text hash, text) of the lines with a vector of their own
    ident: str  # file_ident of the stat the text was read with


class FileVectors:
    """Embeds the changed files of one index's syncs with `embedder`; `live` is that index (its cache
    and line vectors are reused, also while a rebuild fills a staging index)."""

    def __init__(self, live: MemoryStore, cfg: MemorySearchConfig, embedder: Embedder) -> None:
        self.live = live
        self.cfg = cfg
        self.embedder = embedder

    def of(self, store: MemoryStore, pending: list[Pending], report: SyncReport
           ) -> tuple[dict[str, np.ndarray] | None, dict[str, dict[int, np.ndarray]]]:
        """Chunk vectors by text hash and each file's line vectors (by path, then line), for `pending`
        written into `store` (the live index, or a rebuild's staging one). None: embedding failed and
        keyword-only is allowed."""
        vectors: dict[str, np.ndarray] | None = None
        file_lines: dict[str, dict[int, np.ndarray]] = {}
        tokens = any(p.lines for p in pending) and line_kind(self.embedder) == 2
        if tokens:
            got = self._embed_with_lines(store, pending, report)
            if got is not None:
                vectors, file_lines = got
            # None and still kind 2: embedding failed (keyword-only); else the fast runtime could not
            # load after all, and lines are embedded on their own below.
            tokens = line_kind(self.embedder) == 2
        if not tokens:
            # Chunks and lines in one pass through the model. A line the index already holds (an edit
            # left it unchanged) or that is a whole cached chunk is not embedded again.
            texts = {c.hash: c.text for p in pending for c in p.chunks}
            by_hash = {h: t for p in pending for h, t in p.lines.values()}
            known = self._known_lines(pending) if by_hash else {}
            report.lines_reused += sum(1 for h in by_hash if h in known)
            vectors = self._embed(store, texts, report, {h: t for h, t in by_hash.items() if h not in known})
            if vectors is not None:
                vectors = {**known, **vectors}
                file_lines = {p.file.rel: {n: vectors[h] for n, (h, _) in p.lines.items()} for p in pending}
        return vectors, file_lines

    def _embed(self, store: MemoryStore, texts: dict[str, str], report: SyncReport,
               uncached: dict[str, str] | None = None) -> dict[str, np.ndarray] | None:
        """Vectors by text hash, or None when embedding failed and keyword-only is allowed. `texts` go
        through the embedding cache; `uncached` (lines) are embedded in the same calls but not cached:
        the index keeps them itself (line_vectors), at half the bytes."""
        info = self.embedder.info
        hashes = list(texts)
        found = store.cache_get(info.provider, info.model, info.provider_key, hashes) if self.cfg.cache.enabled else {}
        report.cache_hits += sum(1 for h in hashes if h in found)
        todo = {h: t for h, t in texts.items() if h not in found}
        rest = {h: t for h, t in (uncached or {}).items() if h not in found and h not in todo}
        if todo or rest:
            t0 = time.perf_counter()
            try:
                vecs = self.embedder.embed_documents([*todo.values(), *rest.values()])
            except EmbeddingError as e:
                if self.cfg.on_embedding_failure == "error":
                    raise
                report.warnings.append(f"embedding failed, indexed keyword-only for now: {e.message}")
                return None
            report.embed_seconds += time.perf_counter() - t0
            report.embedded += len(todo) + len(rest)
            everything = dict(zip([*todo, *rest], vecs, strict=True))
            new = {h: everything[h] for h in todo}
            found.update(everything)
            info = self.embedder.info  # remote providers learn dims on the first call
            if self.cfg.cache.enabled and new:
                store.cache_put(info.provider, info.model, info.provider_key, new)
                if store is not self.live:
                    # A rebuild fills a temporary database; the live one keeps each batch too (its own
                    # committed transaction), so a rebuild killed midway is resumed from the cache.
                    self.live.cache_put(info.provider, info.model, info.provider_key, new)
        return found

    def _known_lines(self, pending: list[Pending]) -> dict[str, np.ndarray]:
        """Vectors the live index already holds for these files' lines, by the text hash of the line:
        an edited note embeds only its new lines, and a rebuild (or one resumed after a kill) reuses
        every line it has. Only vectors of the model in use."""
        ident, info = self.live.identity(), self.embedder.info
        if ident.get("line_vectors") != line_kind(self.embedder) or (
                ident.get("provider"), ident.get("model"), ident.get("provider_key")) != (
                info.provider, info.model, info.provider_key):
            return {}
        known: dict[str, np.ndarray] = {}
        for p in pending:
            if p.lines:
                known.update(self.live.line_vectors_of(p.file.rel))
        return known

    def _embed_with_lines(self, store: MemoryStore, pending: list[Pending], report: SyncReport
                          ) -> tuple[dict[str, np.ndarray], dict[str, dict[int, np.ndarray]]] | None:
        """Chunk vectors by hash and each file's line vectors, the lines taken from their chunks' token
        states in the same pass. A cached chunk is embedded again only when one of its lines has no
        vector in the live index (the cache keeps chunk vectors, not token states). None: embedding
        failed and keyword-only is allowed."""
        embedder = self.embedder
        assert isinstance(embedder, LineEmbedder)
        info = embedder.info
        texts = {c.hash: c.text for p in pending for c in p.chunks}
        found = store.cache_get(info.provider, info.model, info.provider_key, list(texts)) \
            if self.cfg.cache.enabled else {}
        report.cache_hits += len(found)
        known = self._known_lines(pending) if found else {}
        run = {h: t for h, t in texts.items() if h not in found}
        for p in pending:
            for c in p.chunks:
                if c.hash in found and c.hash not in run and any(
                        p.lines[n][0] not in known for n in range(c.start_line, c.end_line + 1) if n in p.lines):
                    run[c.hash] = c.text
        per_chunk: dict[str, list[np.ndarray | None]] = {}
        if run:
            t0 = time.perf_counter()
            try:
                got = embedder.embed_with_lines(list(run.values()))
            except EmbeddingError as e:
                if self.cfg.on_embedding_failure == "error":
                    raise
                report.warnings.append(f"embedding failed, indexed keyword-only for now: {e.message}")
                return None
            if got is None:  # the runtime could not after all: embed lines on their own
                return None
            report.embed_seconds += time.perf_counter() - t0
            report.embedded += len(run)
            new = {h: v for h, v in zip(run, got[0], strict=True) if h not in found}
            per_chunk = dict(zip(run, got[1], strict=True))
            found.update(new)
            if self.cfg.cache.enabled and new:
                store.cache_put(info.provider, info.model, info.provider_key, new)
                if store is not self.live:  # a rebuild: the live index keeps each batch too (resume)
                    self.live.cache_put(info.provider, info.model, info.provider_key, new)
        file_lines: dict[str, dict[int, np.ndarray]] = {}
        for p in pending:
            mine = line_vectors.lines_from_chunks(p.chunks, per_chunk, p.lines)
            for n, (h, _) in p.lines.items():
                if n not in mine and h in known:
                    mine[n] = known[h]
                    report.lines_reused += 1
            file_lines[p.file.rel] = mine
        return found, file_lines
