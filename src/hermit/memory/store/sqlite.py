"""The SQLite memory store (the default backend): schema, per-file writes, embedding cache, lookups (its keyword
reads are sqlite_keyword.py).

Implements memory.store.api.MemoryStore over one SQLite file per agent. Vectors live in a sqlite-vec
`vec0` table when the extension loads; otherwise in a plain BLOB table with the same name and columns,
scanned in bounded blocks. One writer at a time holds a lock file next to the index; a full rebuild
fills a temporary file that replaces the live one in one SQLite backup step.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hermit.db import Connection, DatabaseError, connect, index_error, migrate, transaction
from hermit.locks import LockFile
from hermit.memory.index.chunking import Chunk
from hermit.memory.index.line_vectors import by_line_text, to_line_blob
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search.fts import index_text
from hermit.memory.search.keyword import FtsTokens
from hermit.memory.search.vectors import blockscan_topk
from hermit.memory.store import residue, sqlite_keyword, token_counts
from hermit.memory.store.api import ChunkRow, FileState, script_class
from hermit.memory.store.sqlite_keyword import read_varint as read_varint
from hermit.memory.store.sqlite_schema import MIGRATIONS

__all__ = ["MIGRATIONS", "ChunkRow", "FileState", "FileLock", "IndexStore", "script_class"]


def to_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


class FileLock:
    """An advisory exclusive lock file next to the index; held by the one process that writes."""

    def __init__(self, index_path: Path) -> None:
        self.path = index_path.with_name(index_path.name + ".lock")
        self._lock: LockFile | None = None

    def acquire(self, blocking: bool) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = LockFile.acquire(self.path) if blocking else LockFile.try_acquire(self.path)
        return self._lock is not None

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


class IndexStore:
    """One agent's index file. Writers hold the sync lock; any number of readers may search."""

    matrix_ok = True
    knn_beside = False  # its KNN (sqlite-vec) shares the search's connection

    def __init__(self, path: Path, *, want_vec: bool = True, readonly: bool = False, own_dir: bool = True) -> None:
        self.path = path
        self.location = str(path)
        self.conn, self.vec = connect(path, load_vec=want_vec, readonly=readonly, own_dir=own_dir)
        self._own_dir = own_dir  # a rebuild beside it opens its file the same way
        self._tokens: FtsTokens | None = None  # made on the first one-word count
        # Reads that cannot change inside a read transaction begun by reading() (meta, the vector
        # table's kind), held for its length: a search asked for the meta table ~12 times, and each
        # statement hands the GIL to the search's worker. None outside such a transaction.
        self._held: dict[str, Any] | None = None
        if not readonly:
            try:
                residue.secure(self.conn)
                migrate(self.conn, MIGRATIONS)
                residue.vacuum_once(self.conn)
            except DatabaseError as e:  # a full disk while creating the tables, or a damaged file
                self.conn.close()
                raise index_error(e, path) from e

    def close(self) -> None:
        self.conn.close()

    # -- meta ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """One read transaction: WAL keeps its snapshot while a rebuild's backup writes the live file."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("begin")
        self._held = {}
        try:
            yield
        finally:
            self._held = None
            if self.conn.in_transaction:
                self.conn.execute("commit")

    def _once(self, key: str, read: Callable[[], Any]) -> Any:
        """`read()`, read once per read transaction of reading(): its snapshot of the file does not
        change, and a write on this connection (which does change it) drops what was held."""
        held = self._held
        if held is None:
            return read()
        changes = self.conn.total_changes
        if held.get("#changes") != changes:
            held.clear()
            held["#changes"] = changes
        if key not in held:
            held[key] = read()
        return held[key]

    def _drop_held(self) -> None:
        if self._held is not None:
            self._held.clear()

    def meta(self) -> dict[str, str]:
        return dict(self._once("meta", self._read_meta))

    def _read_meta(self) -> dict[str, str]:
        try:
            return dict(self.conn.execute("select key, value from meta").fetchall())
        except Exception:  # noqa: BLE001 - an index without a meta table has no identity yet
            return {}

    def set_meta(self, values: dict[str, str]) -> None:
        self._drop_held()
        self.conn.executemany(
            "insert into meta(key, value) values (?, ?) on conflict(key) do update set value=excluded.value",
            list(values.items()),
        )

    def generation(self) -> int:
        return int(self._once("generation", self._read_generation))

    def _read_generation(self) -> int:
        row = self.conn.execute("select value from meta where key='generation'").fetchone()
        return int(row[0]) if row else 0

    # -- vector table -------------------------------------------------------------------------
    def has_vec_table(self) -> bool:
        row = self.conn.execute(
            "select sql from sqlite_master where name='chunks_vec'"
        ).fetchone()
        return row is not None

    def vector_backend(self) -> str | None:
        return self._once("backend", self._read_backend)

    def _read_backend(self) -> str | None:
        row = self.conn.execute("select sql from sqlite_master where name='chunks_vec'").fetchone()
        if row is None:
            return None
        return "vec0" if "vec0" in str(row[0]).lower() else "blob"

    def vector_kind(self) -> str:
        return "vec0" if self.vec.available else "blob"

    def vector_problem(self) -> str | None:
        if self.vector_backend() == "vec0" and not self.vec.available:
            return f"the index uses sqlite-vec, which cannot load here: {self.vec.error}"
        return None

    def ensure_vec_table(self, dims: int) -> None:
        if self.has_vec_table():
            return
        self._drop_held()  # a schema change is not in total_changes
        if self.vec.available:
            self.conn.execute(
                f"create virtual table chunks_vec using vec0("
                f"id integer primary key, embedding float[{int(dims)}] distance_metric=cosine)"
            )
        else:
            self.conn.execute("create table chunks_vec(id integer primary key, embedding blob not null)")

    # -- files & chunks -----------------------------------------------------------------------
    def files(self, source: str | None = None) -> dict[str, FileState]:
        # `select *`: an index opened read-only (a `memory migrate` source) may predate the ident column.
        cur = self.conn.execute("select * from files" + (" where source=?" if source else ""), (source,) if source else ())
        names = [d[0] for d in cur.description]
        rows = (dict(zip(names, r, strict=True)) for r in cur)
        return {r["path"]: FileState(r["path"], r["source"], r["hash"], r["mtime"], r["size"], bool(r["embedded"]),
                                     r["messages"], r.get("ident", "")) for r in rows}

    def touch_file(self, path: str, mtime: int, size: int, ident: str | None = None) -> None:
        self.conn.execute("update files set mtime=?, size=?, ident=coalesce(?, ident) where path=?",
                          (mtime, size, ident, path))

    def replace_file(
        self, *, path: str, source: str, file_hash: str, mtime: int, size: int,
        chunks: Sequence[Chunk], vectors: np.ndarray | None, model: str, messages: int = 0,
        line_vectors: Mapping[int, np.ndarray] | None = None, ident: str = "",
    ) -> None:
        """Replace everything indexed for `path` in ONE transaction: a kill leaves old or new, never half."""
        now = int(time.time())
        with transaction(self.conn) as c:
            gen = self.generation() + 1
            new = {ch.hash for ch in chunks}
            removed = self._delete_chunks(c, path, keep=new) - new
            if vectors is not None and len(chunks):
                self.ensure_vec_table(vectors.shape[1])
            indexed: list[str] = []
            for i, ch in enumerate(chunks):
                cur = c.execute(
                    "insert into chunks(path, source, start_line, end_line, hash, model, text, updated_at, gen, cjk)"
                    " values (?,?,?,?,?,?,?,?,?,?)",
                    (path, source, ch.start_line, ch.end_line, ch.hash, model if vectors is not None else None,
                     ch.text, now, gen, script_class(ch.text)),
                )
                cid = cur.lastrowid
                indexed.append(index_text(ch.text))
                c.execute("insert into chunks_fts(rowid, text) values (?, ?)", (cid, indexed[-1]))
                if vectors is not None:
                    c.execute("insert into chunks_vec(id, embedding) values (?, ?)", (cid, to_blob(vectors[i])))
            token_counts.count_added(c, indexed)
            if line_vectors:
                c.executemany("insert into line_vectors(path, line, embedding) values (?,?,?)",
                              [(path, n, to_line_blob(v)) for n, v in sorted(line_vectors.items())])
            c.execute(
                "insert into files(path, source, hash, mtime, size, embedded, indexed_at, messages, ident)"
                " values (?,?,?,?,?,?,?,?,?)"
                " on conflict(path) do update set source=excluded.source, hash=excluded.hash,"
                " mtime=excluded.mtime, size=excluded.size, embedded=excluded.embedded,"
                " indexed_at=excluded.indexed_at, messages=excluded.messages, ident=excluded.ident",
                (path, source, file_hash, mtime, size, int(vectors is not None or not chunks), now, messages, ident),
            )
            self._bump(c, gen)
            residue.removed(c, removed)

    def optimize(self) -> None:
        pass  # sqlite-vec's vec0 has no approximate index to build

    def delete_file(self, path: str) -> None:
        with transaction(self.conn) as c:
            removed = self._delete_chunks(c, path)
            c.execute("delete from files where path=?", (path,))
            self._bump(c, self.generation() + 1)
            residue.removed(c, removed)

    def _bump(self, c: Connection, gen: int) -> None:
        c.execute(
            "insert into meta(key, value) values ('generation', ?)"
            " on conflict(key) do update set value=excluded.value", (str(gen),)
        )

    def _delete_chunks(self, c: Connection, path: str, keep: set[str] | frozenset[str] = frozenset()) -> set[str]:
        """Take `path`'s chunks out; returns their hashes. FTS5 secure-delete (memory.store.residue) rewrites
        the segments of each token of a removed chunk (~10 ms a chunk): the chunks put back unchanged (hash
        in `keep`) are deleted without it, as their tokens, the same text, come back at once."""
        c.execute("delete from line_vectors where path=?", (path,))
        rows = c.execute("select id, hash from chunks where path=?", (path,)).fetchall()
        if not rows:
            return set()
        has_vec = self.has_vec_table()
        token_counts.count_removed(c, [r[0] for r in rows])
        for secure in (False, True):
            ids = [r[0] for r in rows if (r[1] not in keep) == secure]
            if not secure and ids:
                residue.fts_secure_delete(c, False)
            for i in range(0, len(ids), 500):
                part = ids[i:i + 500]
                marks = ",".join("?" * len(part))
                c.execute(f"delete from chunks_fts where rowid in ({marks})", part)
                if has_vec:
                    c.execute(f"delete from chunks_vec where id in ({marks})", part)
            if not secure and ids:
                residue.fts_secure_delete(c, True)
        c.execute("delete from chunks where path=?", (path,))
        return {str(r[1]) for r in rows}

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        ids = list(ids)
        out: dict[int, ChunkRow] = {}
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            marks = ",".join("?" * len(part))
            for r in self.conn.execute(
                f"select id, path, source, start_line, end_line, text, cjk from chunks where id in ({marks})", part
            ):
                out[r[0]] = ChunkRow(*r)
        return out

    def chunk_ids_for_days(self, days: Sequence[str], limit: int = 200) -> list[int]:
        """Chunks of files whose name carries one of `days` (YYYY-MM-DD), e.g. memory/2026-07-13.md."""
        out: list[int] = []
        for day in days:
            # Match names in the small files table, then use the chunks(path) index.
            out.extend(r[0] for r in self.conn.execute(
                "select c.id from files f join chunks c on c.path = f.path where f.path glob ? limit ?",
                (f"*{day}*.md", limit)))
            if len(out) >= limit:
                break
        return out[:limit]

    def chunk_count(self) -> int:
        return int(self.conn.execute("select count(*) from chunks").fetchone()[0])

    def pending_vectors(self) -> tuple[int, int]:
        files = int(self.conn.execute("select count(*) from files where embedded=0").fetchone()[0])
        if not files:
            return 0, 0
        chunks = self.conn.execute("select count(*) from chunks where path in"
                                   " (select path from files where embedded=0)").fetchone()[0]
        return files, int(chunks)

    def counts(self) -> dict[str, int]:
        files = self.conn.execute("select count(*) from files").fetchone()[0]
        chunks = self.conn.execute("select count(*) from chunks").fetchone()[0]
        no_vec = self.conn.execute("select count(*) from files where embedded=0").fetchone()[0]
        cache = self.conn.execute("select count(*) from embedding_cache").fetchone()[0]
        lines = self.conn.execute("select count(*) from line_vectors").fetchone()[0]
        return {"files": files, "chunks": chunks, "files_without_vectors": no_vec, "cache_entries": cache,
                "line_vectors": lines}

    def line_vectors_of(self, path: str) -> dict[str, np.ndarray]:
        blobs = dict(self.conn.execute("select line, embedding from line_vectors where path=?", (path,)).fetchall())
        if not blobs:
            return {}
        return by_line_text(self.conn.execute("select start_line, text from chunks where path=?", (path,)), blobs)

    def line_vector_blobs(self, spans: Sequence[tuple[str, int, int]]) -> dict[int, bytes]:
        """The stored line vectors inside each (path, first line, last line) span, by span index."""
        return {k: b"".join(r[0] for r in self.conn.execute(
            "select embedding from line_vectors where path=? and line between ? and ?", span))
            for k, span in enumerate(spans)}

    # -- embedding cache ----------------------------------------------------------------------
    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        uniq = list(dict.fromkeys(hashes))
        for i in range(0, len(uniq), 500):
            part = uniq[i:i + 500]
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                f"select hash, embedding from embedding_cache where provider=? and model=? and provider_key=?"
                f" and hash in ({marks})", (provider, model, key, *part)
            ):
                out[h] = from_blob(blob)
        return out

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        if not items:
            return
        now = int(time.time())
        with transaction(self.conn) as c:
            c.executemany(
                "insert or replace into embedding_cache(provider, model, provider_key, hash, embedding, dims,"
                " updated_at) values (?,?,?,?,?,?,?)",
                [(provider, model, key, h, to_blob(v), int(v.shape[0]), now) for h, v in items.items()],
            )

    def cache_prune(self, max_entries: int | None) -> int:
        """At the end of a sync: the cache rows of the chunks it removed that nothing uses any more (and the
        WAL emptied of their old pages: memory.store.residue), then the oldest rows beyond `max_entries`."""
        residue.settle(self.conn)
        (n,) = self.conn.execute("select count(*) from embedding_cache").fetchone()
        if max_entries is None or n <= max_entries:
            return 0
        with transaction(self.conn) as c:
            c.execute(
                "delete from embedding_cache where rowid in (select rowid from embedding_cache"
                " order by updated_at asc limit ?)", (n - max_entries,)
            )
        return int(n - max_entries)

    def import_cache_from(self, other: Path) -> None:
        """Copy another index's embedding cache (used by full rebuilds so nothing is embedded twice)."""
        with transaction(self.conn) as c:
            c.execute("attach database ? as other", (str(other),))
        try:
            has = self.conn.execute(
                "select 1 from other.sqlite_master where name='embedding_cache'").fetchone()
            if has:
                with transaction(self.conn) as c:
                    c.execute("insert or ignore into embedding_cache select * from other.embedding_cache")
        finally:
            self.conn.execute("detach database other")

    # -- lookups ------------------------------------------------------------------------------
    # FTS5's keyword reads (memory/store/sqlite_keyword.py).
    fts_search = sqlite_keyword.fts_search
    fts_count = sqlite_keyword.fts_count
    fts_counts = sqlite_keyword.fts_counts
    fts_stats = sqlite_keyword.fts_stats
    fts_doc_lengths = sqlite_keyword.fts_doc_lengths
    fts_scores = sqlite_keyword.fts_scores

    def max_chunk_id(self) -> tuple[int, int]:
        # Two statements: SQLite answers a lone min() or max() from the b-tree edge, not both at once.
        lo = self.conn.execute("select min(id) from chunks").fetchone()[0]
        hi = self.conn.execute("select max(id) from chunks").fetchone()[0]
        return int(lo or 0), int(hi or 0)

    def vec_knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first: sqlite-vec's vec0 KNN, or a bounded BLOB scan."""
        if self.vector_backend() != "vec0":
            return blockscan_topk(self, query, k)
        rows = self.conn.execute(
            "select id, distance from chunks_vec where embedding match ? and k = ?", (to_blob(query), k)
        ).fetchall()
        return [(int(i), 1.0 - float(d)) for i, d in rows if d is not None]  # NULL: a vector with no direction

    def vec_scores(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        if not ids:
            return {}
        # One primary-key lookup per id: on a vec0 table `id IN (…)` scans every row (~26 ms at 100k).
        q = np.asarray(query, dtype=np.float32)
        out: dict[int, float] = {}
        for i in ids:
            row = self.conn.execute("select embedding from chunks_vec where id = ?", (int(i),)).fetchone()
            if row is not None:
                out[int(i)] = float(from_blob(row[0]) @ q)
        return out

    def iter_vectors(self, since_gen: int = -1, block: int = 8192) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield (ids, matrix) blocks of vectors of chunks newer than `since_gen`; after a write, its chunks stored
        without one as zero rows too (SQLite reuses a deleted chunk's id: search/vectors.py drops its row)."""
        last = -1
        # After a write only its few new chunks, through the gen index (the planner, without statistics, walks
        # every chunk in id order: 50 ms at 100k chunks, on the search after each write); a full load walks all.
        by_gen, how = (" indexed by chunks_gen", "left join") if since_gen >= 0 else ("", "join")
        blank = bytes(4 * int(self.meta().get("dims", "0") or 0))
        while True:
            rows = self.conn.execute(
                f"select c.id, v.embedding from chunks c{by_gen} {how} chunks_vec v on v.id = c.id"
                " where c.gen > ? and c.id > ? order by c.id limit ?", (since_gen, last, block)
            ).fetchall()
            if not rows or not blank and any(r[1] is None for r in rows):  # no dims yet: nothing embedded
                return
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            mat = np.frombuffer(b"".join(r[1] or blank for r in rows), dtype=np.float32).reshape(len(rows), -1)
            yield ids, mat
            last = int(ids[-1])

    def identity(self) -> dict[str, object]:
        raw = self.meta().get("identity")
        return json.loads(raw) if raw else {}

    def describe(self) -> dict[str, Any]:
        vec = self.vec
        return {"backend": "sqlite", "vector": {"available": vec.available, "sqlite_vec": vec.version,
                                                "error": vec.error, "backend": self.vector_backend()}}

    # -- writer lock and atomic rebuilds --------------------------------------------------------
    def writer_lock(self) -> FileLock:
        return FileLock(self.path)

    def clean_stale_rebuilds(self) -> int:
        removed = 0
        for stale in self.path.parent.glob(self.path.name + ".rebuild-*"):
            with contextlib.suppress(OSError):
                stale.unlink()  # the live index was never touched by the killed rebuild
                removed += 1
        return removed

    def open_rebuild(self) -> IndexStore:
        tmp_path = self.path.with_name(f"{self.path.name}.rebuild-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        tmp = IndexStore(tmp_path, want_vec=self.vec.available, own_dir=self._own_dir)
        try:
            if self.path.exists():
                tmp.import_cache_from(self.path)
        except BaseException:
            self.discard_rebuild(tmp)
            raise
        return tmp

    def finish_rebuild(self, staging: object) -> None:
        assert isinstance(staging, IndexStore)
        self._drop_held()
        try:
            residue.drop_all_unused_cache(staging.conn)  # the old cache's rows of chunks gone since
            staging.conn.execute("pragma wal_checkpoint(truncate)")
            # One backup step = one write transaction on the live file: readers see old or new.
            staging.conn.backup(self.conn)
        finally:
            self.discard_rebuild(staging)
        residue.checkpoint(self.conn)

    def discard_rebuild(self, staging: object) -> None:
        assert isinstance(staging, IndexStore)
        staging.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                Path(str(staging.path) + suffix).unlink()
