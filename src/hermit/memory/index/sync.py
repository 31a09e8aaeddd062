"""Sync Markdown memory into the index: incremental by content hash, atomic full rebuilds, one writer.

A file is read again when its mtime, size or identity (store.api.file_ident) differ from what the index recorded;
its text's hash then decides whether its chunks are rebuilt (a chmod costs a read and a hash, no embedding).

Only one process writes an index at a time (the store's writer lock: a lock file for SQLite, an
advisory lock for PostgreSQL); readers never wait for it. Each file is written in its own
transaction, so a killed indexer leaves every file either fully old or fully new. Embeddings are
committed to the cache batch by batch (also into the live index during a rebuild), so a killed first
index or `--force` resumes from what it embedded; the staging index a killed rebuild leaves is removed
by the next process that takes the writer lock. A change of embedding identity (provider, model,
dims, chunking, keyword transform, vector backend) rebuilds into a staging index that then replaces
the live one in one step (the store's finish_rebuild): searches see the old index or the new one,
never a half-built one. A batch of changed files is embedded by memory/index/embedding.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from hermit.config.schema import MemorySearchConfig
from hermit.db import DatabaseError, index_error, is_corrupt, is_disk_full
from hermit.errors import IndexError_, SessionError
from hermit.memory.embedders.base import Embedder
from hermit.memory.index import skips
from hermit.memory.index.chunking import CHUNKER_ID, chunk_markdown, line_texts, text_hash
from hermit.memory.index.embedding import FileVectors, Pending, line_kind
from hermit.memory.index.report import SyncReport
from hermit.memory.index.session_source import (
    list_session_files,
    render_transcript,
    session_needs_index,
    session_replaced,
)
from hermit.memory.index.sources import (
    Listing,
    MemoryReader,
    Skip,
    SourceFile,
    scan_memory_files,
    unreadable_skip,
)
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.policy import added_notes
from hermit.memory.search.fts import FTS_VERSION
from hermit.memory.store.api import FileState, MemoryStore, file_ident
from hermit.sessions.files import read_own
from hermit.textfile import read_regular

TOKENIZER_ID = "cjk-estimate-1"
Progress = Callable[[int, int, str], None]  # (files scanned, files total, current file)
# (chunks written, chunks to write): called with (0, total) once the changed files are chunked, before
# the first embedding, then after every batch. Embedding dominates the time, so this is the one to watch.
ChunkProgress = Callable[[int, int], None]
# (files, chunks): a large sync stored these keyword-only first; keyword search answers for them now,
# and their vectors follow, newest notes first.
Ready = Callable[[int, int], None]
_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:[-_][^/]*)?\.md$", re.IGNORECASE)


def wanted_identity(cfg: MemorySearchConfig, embedder: Embedder | None, vector_kind: str) -> dict[str, object]:
    info = embedder.info if embedder else None
    return {
        "provider": info.provider if info else "none",
        "model": info.model if info else "none",
        "provider_key": info.provider_key if info else "",
        "chunk_tokens": cfg.chunking.tokens,
        "chunk_overlap": cfg.chunking.overlap,
        "tokenizer": TOKENIZER_ID,
        "chunker": CHUNKER_ID,
        "fts": FTS_VERSION,
        "vector_backend": vector_kind if (info and cfg.store.vector_enabled) else "none",
        # Present only when on, so an index built without line vectors keeps its identity when they
        # are turned off (and one built before they existed is rebuilt once when they are on). 1: each
        # line embedded on its own; 2: taken from its chunk's token states (a different vector: an
        # index of one kind is rebuilt once into the other, never mixed).
        **({"line_vectors": line_kind(embedder)} if lines_wanted(cfg, embedder) else {}),
    }


def lines_wanted(cfg: MemorySearchConfig, embedder: Embedder | None) -> bool:
    """Whether the index gets line vectors (memory.index.line_vectors): "auto" means with a local model."""
    if embedder is None or not cfg.store.vector_enabled or cfg.line_vectors is False:
        return False
    return cfg.line_vectors is True or embedder.info.provider == "local"


def recency(p: Pending) -> float:
    """How new a changed file is, for indexing newest first: MEMORY.md (curated, read every session)
    before everything; a dated note (memory/2026-06-30.md, …-meeting.md) by the end of its day; any
    other file by its modification time."""
    if p.file.rel.lower() == "memory.md":
        return float("inf")
    m = _DATED.search(p.file.rel)
    if m:
        try:
            return dt.datetime(int(m[1]), int(m[2]), int(m[3]), 23, 59, tzinfo=dt.UTC).timestamp()
        except ValueError:
            pass
    return p.mtime_ns / 1e9


class Indexer:
    """Brings one index up to date with one workspace's memory files."""

    def __init__(
        self,
        store: MemoryStore,
        workspace: Path,
        cfg: MemorySearchConfig,
        embedder: Embedder | None,
        clock: Callable[[], float] = time.time,
        sessions_dir: Path | None = None,
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.sessions_dir = sessions_dir if "sessions" in cfg.sources else None
        self.cfg = cfg
        self.embedder = embedder if cfg.store.vector_enabled else None
        self.clock = clock
        # The embedding of each batch of changed files (memory.index.embedding).
        self.vectors = FileVectors(store, cfg, self.embedder) if self.embedder is not None else None
        self.lock = store.writer_lock()
        # The files table, as of (index id, generation); forgotten after every sync of ours, because
        # touching a file's mtime does not bump the generation.
        self._indexed: tuple[tuple[str | None, int], dict[str, FileState]] | None = None

    # -- dirty check (cheap: stat only) --------------------------------------------------------
    def identity_matches(self) -> bool:
        have = self.store.identity()
        return have == wanted_identity(self.cfg, self.embedder, self.store.vector_kind())

    def sources(self) -> Listing:
        found = scan_memory_files(self.workspace, self.cfg.extra_paths)
        return Listing(found.files + list_session_files(self.sessions_dir), found.skips, found.warnings)

    def is_dirty(self, *, vectors: bool = True) -> bool:  # noqa: C901 - one decision per kind of file; each branch a line
        """Whether a sync has anything to do. A file recorded as skipped (memory.index.skips) is not, until
        it changes or goes away. `vectors=False`: a file stored keyword-only whose text has not changed
        does not count (a search's sync leaves its embedding to `hermit memory index` or the watcher)."""
        if not self.identity_matches():
            return True
        listing = self.sources()
        files = listing.files
        meta = self.store.meta()
        stamp = (meta.get("index_id"), self.store.generation())
        if self._indexed is None or self._indexed[0] != stamp:
            self._indexed = (stamp, self.store.files())
        indexed = self._indexed[1]
        recorded = skips.load(meta)
        if skips.listing_changed(recorded, listing.skips, files):
            return True
        listed = {f.rel for f in files}
        if any(p not in listed for p in indexed):
            return True
        for f in files:
            rec = recorded.get(f.rel)
            if rec is None and f.rel not in indexed:
                return True
            try:
                s = os.stat(f.path)
            except FileNotFoundError:
                return True
            if rec is not None:
                if rec.stamp != skips.stamp(s):
                    return True  # changed since it was skipped: judge it again
                continue
            st = indexed[f.rel]
            if vectors and not st.embedded and self.embedder is not None:
                return True
            if st.matches(s):
                continue
            if f.source != "sessions":
                return True
            try:
                data = read_regular(f.path) if s.st_size != st.size else None
            except OSError:
                return True  # let the sync look at it (and report why it cannot be read)
            if session_needs_index(indexed_size=st.size, indexed_messages=st.messages, size=s.st_size,
                                   mtime_ns=s.st_mtime_ns, data=data, now=self.clock(),
                                   replaced=session_replaced(st, s)).should_index:
                return True
        return False

    def _load(self, f: SourceFile, old: FileState | None, st: os.stat_result, report: SyncReport,
              reader: MemoryReader, vectors: bool = True) -> tuple[str | None, int, os.stat_result, Skip | None]:
        """The text to index for `f` (None = nothing to index now), its message count, the stat to record
        for it (a memory file's is the fstat of the descriptor its text was read through: what was read,
        even if the name was swapped since the caller's stat; the next sync compares against it), and why
        it is skipped when it cannot be indexed."""
        if f.source == "sessions":
            try:  # as the session store reads it: never through a link, only the user's own file
                data = read_own(Path(f.path), "the transcript")[0]
            except (OSError, SessionError) as e:
                return None, 0, st, unreadable_skip(f.rel, e)
            needs_vectors = vectors and self.embedder is not None and old is not None and not old.embedded
            delta = session_needs_index(indexed_size=old.size if old else None,
                                        indexed_messages=old.messages if old else None,
                                        size=st.st_size, mtime_ns=st.st_mtime_ns, data=data, now=self.clock(),
                                        replaced=old is not None and session_replaced(old, st))
            if not (delta.should_index or needs_vectors):
                return None, delta.messages, st, None
            text, messages = render_transcript(data.decode("utf-8", errors="replace"))
            return text, messages, st, None
        read = reader.read(f, self.cfg.max_file_bytes)
        if read.warning and read.skip is None:  # a skip's warning is the caller's: said once, when new
            report.warnings.append(read.warning)
        return read.text, 0, read.st or st, read.skip

    # -- sync -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, blocking: bool) -> Iterator[bool]:
        got = self.lock.acquire(blocking)
        try:
            yield got
        finally:
            if got:
                self.lock.release()

    def sync(self, *, force: bool = False, blocking: bool = True, progress: Progress | None = None,
             chunk_progress: ChunkProgress | None = None, ready: Ready | None = None,
             defer_vectors: bool = False) -> SyncReport:
        """Incremental sync; a full atomic rebuild when `force` or the index identity changed.

        A first index (an index that never held a file or a vector) is built in place rather than
        into a staging copy: there is no old index to protect, and searches can use each file as soon
        as it is stored (keyword first, vectors newest first; see `_sync_into`).

        `defer_vectors` (a search's or a session start's sync, which must answer in seconds): changed files
        are indexed and embedded as always, but the embedding backlog — files stored keyword-only whose text
        is unchanged (a first index stopped part-way) — is left for a full sync (`hermit memory index`, the
        gateway's watcher)."""
        t0 = time.perf_counter()
        self._indexed = None
        added_notes.clear_dead_now(self.workspace)  # a killed watcher's copy of other chats' notes: not left to wait
        try:
            with self._locked(blocking) as got:
                if not got:
                    return SyncReport(skipped=True)
                self._clean_stale_locked()
                first = not self.store.files()
                if (force or not self.identity_matches()) and not (first and not self.store.meta().get("dims")):
                    report = self._rebuild(progress, chunk_progress)
                else:
                    fresh = force or not self.identity_matches()
                    if fresh:
                        self._set_identity(self.store)
                    report = self._sync_into(self.store, progress, chunk_progress, ready, defer_vectors)
                    report.rebuilt = fresh  # built whole, for a new identity, only in place
                    self.store.optimize()
                report.first = first and report.files_indexed > 0
        except (DatabaseError, OSError) as e:
            # A full disk mid-sync is said as such (each file's transaction rolled back: the index is
            # consistent); a damaged file gets the rebuild advice; anything else is not ours to name.
            if is_disk_full(e, self.store.location) or is_corrupt(e):
                raise index_error(e, self.store.location) from e
            raise
        report.seconds = time.perf_counter() - t0
        return report

    def clean_stale_rebuilds(self) -> int:
        """Delete `*.rebuild-*` files left by a killed rebuild, when no rebuild can be running: only
        under the writer lock, which every rebuild holds from start to end. Returns files removed."""
        try:
            with self._locked(blocking=False) as got:
                return self._clean_stale_locked() if got else 0
        except OSError:  # a read-only state dir: nothing to clean that we could clean
            return 0

    def _clean_stale_locked(self) -> int:
        return self.store.clean_stale_rebuilds()  # the live index was never touched by a killed rebuild

    def _set_identity(self, store: MemoryStore) -> None:
        store.set_meta({"identity": json.dumps(wanted_identity(self.cfg, self.embedder, store.vector_kind())),
                        "index_id": uuid.uuid4().hex, "created_at": str(int(self.clock()))})

    def _rebuild(self, progress: Progress | None, chunk_progress: ChunkProgress | None = None) -> SyncReport:
        live = self.store
        tmp = live.open_rebuild()
        try:
            self._set_identity(tmp)
            report = self._sync_into(tmp, progress, chunk_progress)
            report.rebuilt = True
        except BaseException:
            live.discard_rebuild(tmp)
            raise
        live.finish_rebuild(tmp)  # one step: readers see the old index or the new one
        return report

    def _sync_into(self, store: MemoryStore, progress: Progress | None,  # noqa: C901 - the per-file sync decisions in one loop; splits with issue 26 §2 (memory/index/)
                   chunk_progress: ChunkProgress | None = None, ready: Ready | None = None,
                   defer_vectors: bool = False) -> SyncReport:
        report = SyncReport()
        listing = self.sources()
        files = listing.files
        report.warnings.extend(listing.warnings)
        report.files_seen = len(files) + len(listing.skips)
        indexed = store.files()
        recorded = skips.load(store.meta())
        skipped = {s.path: skips.Skipped(s, None) for s in listing.skips}
        present = {f.rel for f in files}
        for gone in sorted(set(indexed) - present):
            store.delete_file(gone)
            report.files_deleted += 1

        changed: list[Pending] = []
        want_lines = lines_wanted(self.cfg, self.embedder)
        batch = max(16, self.cfg.remote.batch_size if self.cfg.provider not in ("local", "none") else 32)
        with MemoryReader(self.workspace) as reader:  # the roots' descriptors, for this sync
            for n, f in enumerate(files, start=1):
                if progress:
                    progress(n, len(files), f.rel)
                try:
                    st = f.abs.stat()
                except FileNotFoundError:
                    continue  # vanished since listing: the next sync deletes it
                known = recorded.get(f.rel)
                if known is not None and known.stamp == skips.stamp(st):
                    skipped[f.rel] = known  # judged before and unchanged since: not read again
                    continue
                old = indexed.get(f.rel)
                needs_vectors = (not defer_vectors and self.embedder is not None and old is not None
                                 and not old.embedded)
                if old and old.matches(st) and not needs_vectors:
                    report.files_unchanged += 1
                    continue
                judged = st
                text, messages, st, skip = self._load(f, old, st, report, reader, not defer_vectors)
                if skip is not None:
                    skipped[f.rel] = skips.Skipped(skip, skips.stamp(judged))
                    if old is not None:  # indexed before but not indexable now: drop the stale chunks
                        store.delete_file(f.rel)
                    continue
                if text is None:
                    if f.source == "sessions":  # below the re-index threshold: keep what is indexed
                        report.files_unchanged += 1
                    elif old is not None:  # indexed before but unreadable now: drop the stale chunks
                        store.delete_file(f.rel)
                    continue
                file_hash = text_hash(text)
                if old and old.hash == file_hash and not needs_vectors:
                    store.touch_file(f.rel, st.st_mtime_ns, st.st_size, file_ident(st))
                    report.files_unchanged += 1
                    continue
                chunks = chunk_markdown(text, self.cfg.chunking.tokens, self.cfg.chunking.overlap)
                lines = {n: (text_hash(t), t) for n, t in line_texts(text, self.cfg.chunking.tokens).items()} \
                    if want_lines else {}
                changed.append(Pending(f, file_hash, st.st_mtime_ns, st.st_size, chunks, messages, lines, file_ident(st)))
        self._record_skips(store, report, skipped, recorded)
        # Chunk every changed file first, so the total is known before the slow part (embedding) starts.
        total = sum(len(p.chunks) for p in changed)
        # Newest notes first: after years of daily logs, today's and this week's are what is asked about.
        changed.sort(key=recency, reverse=True)
        if self.embedder is not None and store is self.store and total > batch:
            # A large sync into the live index stores every file keyword-only first (seconds, no model),
            # so keyword search answers for all of it at once; vectors follow batch by batch. A kill
            # leaves files marked as needing vectors, and the next sync embeds only those.
            model = self.embedder.info.model
            for p in changed:
                store.replace_file(path=p.file.rel, source=p.file.source, file_hash=p.hash, mtime=p.mtime_ns,
                                   size=p.size, chunks=p.chunks, vectors=None, model=model, messages=p.messages,
                                   ident=p.ident)
            report.keyword_first = len(changed)
            if ready:
                ready(len(changed), total)
        done = 0
        if chunk_progress and total:
            chunk_progress(0, total)
        pending: list[Pending] = []
        pending_chunks = 0
        for p in changed:
            pending.append(p)
            pending_chunks += len(p.chunks)
            if pending_chunks >= batch:
                self._flush(store, pending, report)
                done += pending_chunks
                if chunk_progress:
                    chunk_progress(done, total)
                pending, pending_chunks = [], 0
        self._flush(store, pending, report)
        if chunk_progress and pending_chunks:
            chunk_progress(total, total)
        store.cache_prune(self.cfg.cache.max_entries)  # also the vectors of removed chunks (store.residue, pg cache.settle)
        return report

    @staticmethod
    def _record_skips(store: MemoryStore, report: SyncReport, now: dict[str, skips.Skipped],
                      before: dict[str, skips.Skipped]) -> None:
        """Count and record this sync's skipped files; warn only about those not recorded so before."""
        report.skips = [now[p].skip for p in sorted(now)]
        report.files_skipped = len(now)
        report.warnings.extend(s.warning for s in report.skips if (p := before.get(s.path)) is None or p.skip != s)
        skips.save(store, now, before)

    def _flush(self, store: MemoryStore, pending: list[Pending], report: SyncReport) -> None:
        if not pending:
            return
        vectors, file_lines = self.vectors.of(store, pending, report) if self.vectors else (None, {})
        model = self.embedder.info.model if self.embedder else "none"
        dims = None
        if vectors:
            dims = next(iter(vectors.values())).shape[0]
            have = store.meta().get("dims")
            if have and int(have) != dims:
                raise IndexError_(
                    f"embedding dims changed ({have} → {dims}) for model {model}",
                    "run `hermit memory index --force` to rebuild the index",
                )
            store.set_meta({"dims": str(dims)})
        for f, file_hash, mtime, size, chunks, messages, _lines, ident in pending:
            mat = None
            line_vecs: dict[int, np.ndarray] | None = None
            if vectors is not None:
                mat = np.stack([vectors[c.hash] for c in chunks]) if chunks else np.zeros((0, dims or 0))
                line_vecs = file_lines.get(f.rel, {})
            store.replace_file(path=f.rel, source=f.source, file_hash=file_hash, mtime=mtime, size=size,
                               chunks=chunks, vectors=mat, model=model, messages=messages,
                               line_vectors=line_vecs, ident=ident)
            report.files_indexed += 1
            report.chunks_indexed += len(chunks)
            report.lines_indexed += len(line_vecs or ())
