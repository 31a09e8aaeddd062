"""The memory index's store interface: what sync, search, keyword and the service may ask of a backend.

Two backends implement it: SQLite (memory/store/sqlite.py, the default: one file per agent) and PostgreSQL with
pgvector (memory/store/postgres/store.py: one schema per agent on a shared server). Nothing outside the backends
touches a connection; everything goes through these methods.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hermit.memory.index.chunking import Chunk
from hermit.tokens import count_cjk

if TYPE_CHECKING:  # in annotations only: the audience rules (cron, pairing) import ChunkRow without numpy
    import numpy as np


def script_class(text: str) -> int:
    """0: little or no CJK (< 20% of non-space characters); 1: mixed; 2: mostly CJK (≥ 50%)."""
    cjk = count_cjk(text)
    total = max(1, len("".join(text.split())))
    if cjk * 5 < total:
        return 0
    return 2 if cjk * 2 >= total else 1


@dataclass(frozen=True)
class FileState:
    path: str
    source: str
    hash: str
    mtime: int
    size: int
    embedded: bool
    messages: int = 0
    # file_ident of the stat the indexed text was read with; "" when not known (indexed before identities
    # were kept): the next sync checks the file by its hash once and records it.
    ident: str = ""

    def matches(self, st: os.stat_result) -> bool:
        """Whether `st` is the file as indexed (same mtime, size and identity): a sync need not read it."""
        return self.mtime == st.st_mtime_ns and self.size == st.st_size and self.ident == file_ident(st)


def file_ident(st: os.stat_result) -> str:
    """What tells a file from another of the same size and mtime: "st_ino:st_ctime_ns". A file replaced
    under its name (an atomic rename, a restore) is another inode; one rewritten in place — even with its old
    mtime put back (`cp -p`, `rsync -t`, `touch -r`) — has a new ctime, which no user can set. A chmod, chown
    or link moves ctime too: that costs a sync one read and hash of the file, never an embedding (the text's
    hash decides whether chunks are rebuilt). Not the device number: hosts sharing one PostgreSQL index
    over an NFS workspace see the same inode and ctime but each its own st_dev (and some filesystems give a
    new one at each mount), so with it every sync of each host read and hashed every file the other synced."""
    return f"{st.st_ino}:{st.st_ctime_ns}"


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    script: int = 0  # script_class of the text


class WriterLock(Protocol):
    """The one-writer-per-index lock: a lock file (SQLite) or a session advisory lock (PostgreSQL)."""

    def acquire(self, blocking: bool) -> bool: ...

    def release(self) -> None: ...


class MemoryStore(Protocol):
    """One agent's memory index. Writers hold `writer_lock()`; any number of readers may search."""

    # Where the index lives, for humans ("…/main.sqlite", "postgresql schema hermit_main"); never a DSN.
    location: str
    # Whether a long-lived process may hold every vector in RAM (VectorMatrix). False on a server
    # backend: its KNN runs in the server.
    matrix_ok: bool
    # Whether the store's KNN may run in the search's worker beside the keyword leg (a connection of its
    # own: PostgreSQL). False where both would share one connection and run one after the other.
    knn_beside: bool

    def close(self) -> None: ...

    # -- meta / identity
    def meta(self) -> dict[str, str]: ...
    def set_meta(self, values: dict[str, str]) -> None: ...
    def generation(self) -> int: ...
    def identity(self) -> dict[str, object]: ...
    def vector_kind(self) -> str:
        """The vector store a new index would use ("vec0", "blob", "pgvector"); part of the identity."""
        ...
    def vector_backend(self) -> str | None:
        """The vector store this index holds vectors in, or None before the first vector."""
        ...
    def vector_problem(self) -> str | None:
        """Why stored vectors cannot be searched here (e.g. sqlite-vec does not load), or None."""
        ...

    # -- writing (under the writer lock)
    def writer_lock(self) -> WriterLock: ...
    def files(self, source: str | None = None) -> dict[str, FileState]: ...
    def touch_file(self, path: str, mtime: int, size: int, ident: str | None = None) -> None:
        """A file read again and found to hold the text indexed: record its new stat, chunks untouched.
        `ident` None keeps the recorded identity."""
        ...
    def replace_file(self, *, path: str, source: str, file_hash: str, mtime: int, size: int,
                     chunks: Sequence[Chunk], vectors: np.ndarray | None, model: str,
                     messages: int = 0, line_vectors: Mapping[int, np.ndarray] | None = None,
                     ident: str = "") -> None:
        """`line_vectors`: line number → vector of the file's lines that have one (memory.index.line_vectors).
        `ident`: file_ident of the stat the text was read with."""
        ...
    def delete_file(self, path: str) -> None: ...
    def optimize(self) -> None:
        """After a sync: build what pays off only past a size (PostgreSQL: the HNSW index)."""
        ...

    # -- atomic full rebuilds (under the writer lock)
    def open_rebuild(self) -> MemoryStore:
        """An empty staging index holding a copy of this one's embedding cache."""
        ...
    def finish_rebuild(self, staging: MemoryStore) -> None:
        """Replace this index by `staging` in one step (readers see old or new) and drop the staging."""
        ...
    def discard_rebuild(self, staging: MemoryStore) -> None: ...
    def clean_stale_rebuilds(self) -> int:
        """Remove staging indexes a killed rebuild left (caller holds the writer lock)."""
        ...

    # -- reading
    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]: ...
    def chunk_ids_for_days(self, days: Sequence[str], limit: int = 200) -> list[int]: ...
    def chunk_count(self) -> int: ...
    def counts(self) -> dict[str, int]: ...
    def reading(self) -> AbstractContextManager[None]:
        """One view of the index for the several statements of one search. A rebuild swapped in
        meanwhile is seen before or after, never halfway: chunk ids found in one index and looked up in
        the other would name other chunks."""
        ...
    def pending_vectors(self) -> tuple[int, int]:
        """(files, chunks) stored without vectors: still being embedded, or keyword-only after a failure.
        Cheap when none are (a first index stores files keyword-only, then embeds them)."""
        ...

    # -- embedding cache
    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...
    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None: ...
    def cache_prune(self, max_entries: int | None) -> int: ...

    # -- keyword leg: FTS5 MATCH expressions (quoted phrases, OR, AND, parentheses; see memory.search.fts)
    def fts_search(self, match: str, limit: int, min_rowid: int | None = None) -> list[tuple[int, float]]: ...
    def fts_count(self, match: str) -> int: ...
    # fts_count of each expression at once (the keyword planner's counts for a query's new words).
    def fts_counts(self, matches: Sequence[str]) -> list[int]: ...
    def fts_stats(self) -> tuple[int, float]: ...
    def fts_doc_lengths(self, ids: Sequence[int]) -> dict[int, int]: ...
    def fts_scores(self, match: str, ids: Sequence[int]) -> dict[int, float]: ...
    def max_chunk_id(self) -> tuple[int, int]: ...

    # -- vector leg
    def vec_knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]: ...
    def vec_scores(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, float]: ...
    def iter_vectors(self, since_gen: int = -1, block: int = 8192) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...
    def line_vectors_of(self, path: str) -> dict[str, np.ndarray]:
        """The file's stored line vectors by the text hash of their line (what an edit may reuse)."""
        ...
    def line_vector_blobs(self, spans: Sequence[tuple[str, int, int]]) -> dict[int, bytes]:
        """The stored line vectors inside each (path, first, last line) span as one run of float16 bytes,
        by span index."""
        ...

    # -- status
    def describe(self) -> dict[str, Any]:
        """Backend facts for `hermit memory status` (never a DSN or password)."""
        ...
