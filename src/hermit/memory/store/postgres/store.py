"""The PostgreSQL memory store: one schema per agent on a shared server, vectors in pgvector.

Implements memory.store.api.MemoryStore with the SQLite store's semantics: chunks, files, the
embedding cache and a generation counter per agent; keyword search with FTS5's tokens and BM25
(memory.store.postgres.keyword); vector KNN in the server (exact scan while small, an HNSW index past
`hnsw_threshold` vectors: memory.store.postgres.hnsw), so no process holds every vector in RAM. Every
public method carries `guarded` (memory.store.postgres.errors): a server failure becomes a StoreError
that names host and database, never the DSN.

Several hosts, one memory: the writer lock is a session-level advisory lock per agent schema (a host
killed mid-sync drops its connection, which releases the lock and rolls back its open transaction);
each file is replaced in one transaction; a full rebuild fills a staging schema and swaps it in with
two renames in one transaction, so readers see the old index or the new one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hermit.errors import StoreError
from hermit.memory.index.line_vectors import by_line_text
from hermit.memory.store.api import ChunkRow, FileState
from hermit.memory.store.postgres import cache as pg_cache
from hermit.memory.store.postgres import rows as pg_rows
from hermit.memory.store.postgres import writes as pg_writes
from hermit.memory.store.postgres.claim import StateId, enforce
from hermit.memory.store.postgres.errors import failure, guarded
from hermit.memory.store.postgres.hnsw import Hnsw
from hermit.memory.store.postgres.keyword import PgKeyword, Tokenizer
from hermit.memory.store.postgres.rows import ROW_COLUMNS, AdvisoryLock, chunk_row, keep_rows
from hermit.memory.store.postgres.schema import (
    connect,
    lock_key,
    mask_dsn,
    migrate,
    qi,
    refuse_foreign,
    server_facts,
)

if TYPE_CHECKING:
    from hermit.config.memory_search import PostgresStoreConfig
    from hermit.memory.store.postgres.schema import PgConn


class PgStore:
    """One agent's index in schema `schema` of the database at `dsn`."""

    matrix_ok = False
    # vec_knn may run in another thread while this one runs other statements (its own connection).
    knn_beside = True

    def __init__(self, dsn: str, schema: str, cfg: PostgresStoreConfig, *, dsn_env: str = "HERMIT_PG_DSN",
                 create: bool = True, staging_of: str | None = None, state: StateId | None = None) -> None:
        """`state`: the state dir opening it, refused unless the schema is its (claim.py); None, no check: only
        a rebuild's staging schema, tests and benchmarks (store.factory and `memory migrate` always pass one)."""
        self._dsn, self.schema, self.cfg, self._env = dsn, schema, cfg, dsn_env
        self.s = qi(schema)
        self.location = f"postgresql {mask_dsn(dsn)} schema {schema}"
        self.hnsw = Hnsw(self)
        self.keyword = PgKeyword(self)
        self._conn = connect(dsn, timeout_s=cfg.connect_timeout_s, dsn_env=dsn_env)
        # pgvector's schema, quoted: its type, operator and operator class are named through it (schema.pin_search_path)
        self.v: str = self._conn.vector_schema
        # The vector leg's own connection (opened by the first KNN): a search runs its KNN in a worker
        # thread while its keyword leg's SQL runs on `conn` (memory.search.hybrid), the two in parallel
        # in the server instead of one after the other on one socket.
        self._knn: PgConn | None = None
        self._view: dict[str, Any] | None = None  # what reading() has read once (meta, "vec", "rows", "ntok")
        self._id_span: tuple[object, tuple[int, int]] = (object(), (0, 0))  # (meta stamp, min/max chunk id)
        self._migrated = create
        try:
            if create:
                migrate(self.conn, schema, staging_of=staging_of, state=state, where=mask_dsn(dsn))
            elif state is not None:  # a `memory migrate` source: nothing of another role's is read (a view runs as us)
                refuse_foreign(self.conn, schema)
                enforce(self.conn, schema, self.s, mask_dsn(dsn), state, create=False)
        except BaseException:
            self._conn.close()
            raise
        self.tok = Tokenizer()

    @property
    def conn(self) -> PgConn:
        """The connection; a new one when the server dropped the old (restart, failover, idle timeout)."""
        if self._conn.closed or self._conn.broken:
            self._conn = connect(self._dsn, timeout_s=self.cfg.connect_timeout_s, dsn_env=self._env)
        return self._conn

    @property
    def in_view(self) -> bool:
        """Whether a search's reading() is open (its view keeps what it read once)."""
        return self._view is not None

    @guarded
    def keep_in_view(self, rows: Sequence[Sequence[Any]]) -> None:
        """Keep rows of (id, *ROW_COLUMNS) read by a search for its later chunk_rows / fts_doc_lengths."""
        if self._view is not None:
            keep_rows(self._view, rows)

    @property
    def knn_conn(self) -> PgConn:
        """The vector leg's connection (vec_knn, the HNSW recall); opened on first use, renewed like `conn`."""
        if self._knn is None or self._knn.closed or self._knn.broken:
            self._knn = connect(self._dsn, timeout_s=self.cfg.connect_timeout_s, dsn_env=self._env)
            self.hnsw.reset()
        return self._knn

    @guarded
    def close(self) -> None:
        self._conn.close()
        if self._knn is not None:
            self._knn.close()

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    # -- meta ---------------------------------------------------------------------------------
    @guarded
    def meta(self) -> dict[str, str]:
        view = self._view
        if view is None:
            return self._read_meta()
        if "meta" not in view:
            view["meta"] = self._read_meta()
        return dict(view["meta"])

    def _read_meta(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.conn.execute(f"select key, value from {self.s}.meta")}

    @guarded
    def set_meta(self, values: dict[str, str]) -> None:
        with self.conn.transaction():
            self._set_meta(values)

    def _set_meta(self, values: dict[str, str]) -> None:
        if self._view is not None:
            self._view.pop("meta", None)
        with self.conn.cursor() as cur:
            cur.executemany(f"insert into {self.s}.meta(key, value) values (%s, %s)"
                            " on conflict(key) do update set value=excluded.value", list(values.items()))

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """A transaction that takes the meta table first and holds it to the end. finish_rebuild takes it
        exclusively before its renames, so a search runs wholly on the old schema or the new one."""
        import psycopg

        if self._view is not None:  # nested: the outer transaction holds the lock already
            yield
            return
        try:
            with self.conn.transaction():
                # Meanwhile the meta table and the vector table's existence are read once: one view of
                # them for the whole search, as SQLite's read transaction gives (a search asked for
                # them ~8 times, a round trip each).
                self._view = pg_rows.open_view(self.conn, self.s)
                try:
                    yield
                finally:
                    self._view = None
        except psycopg.Error as e:
            raise failure(self._dsn, e) from None

    @guarded
    def generation(self) -> int:
        if self._view is not None:
            return int(self.meta().get("generation", "0"))
        v = self._one(f"select value from {self.s}.meta where key='generation'")
        return int(v) if v is not None else 0

    @guarded
    def identity(self) -> dict[str, object]:
        raw = (self.meta().get("identity") if self._view is not None
               else self._one(f"select value from {self.s}.meta where key='identity'"))
        return json.loads(raw) if raw else {}

    @guarded
    def vector_kind(self) -> str:
        return "pgvector"

    @guarded
    def vector_backend(self) -> str | None:
        return "pgvector" if self._has_vec_table() else None

    @guarded
    def vector_problem(self) -> str | None:
        return None

    def _has_vec_table(self, conn: PgConn | None = None) -> bool:
        view = self._view
        if view is not None and "vec" in view:
            return bool(view["vec"])
        row = (conn or self.conn).execute("select to_regclass(%s) is not null", (f"{self.s}.chunks_vec",)).fetchone()
        found = bool(row) and row[0] is True
        if view is not None:
            view["vec"] = found
        return found

    def _ensure_vec_table(self, dims: int) -> None:
        if not self._has_vec_table():
            self.conn.execute(f"create table if not exists {self.s}.chunks_vec(id bigint primary key references"
                              f" {self.s}.chunks(id) on delete cascade, embedding {self.v}.vector({int(dims)}) not null)")
            if self._view is not None:
                self._view.pop("vec", None)

    # -- files & chunks (their writes: memory.store.postgres.writes) ------------------------
    @guarded
    def writer_lock(self) -> AdvisoryLock:
        return AdvisoryLock(self._dsn, lock_key(self.schema), self.cfg.connect_timeout_s, self._env)

    @guarded
    def files(self, source: str | None = None) -> dict[str, FileState]:
        # A schema opened without migrating (a `memory migrate` source) may predate the ident column.
        ident = "ident" if self._migrated else "coalesce(to_jsonb(f)->>'ident', '')"
        sql = f"select path, source, hash, mtime, size, embedded, messages, {ident} from {self.s}.files f"
        rows = self.conn.execute(sql + (" where source=%s" if source else ""), (source,) if source else ())
        return {r[0]: FileState(r[0], r[1], r[2], int(r[3]), int(r[4]), bool(r[5]), int(r[6]), r[7]) for r in rows}

    @guarded
    def touch_file(self, path: str, mtime: int, size: int, ident: str | None = None) -> None:
        self.conn.execute(f"update {self.s}.files set mtime=%s, size=%s, ident=coalesce(%s, ident) where path=%s",
                          (mtime, size, ident, path))

    # A file's chunks replaced, appended in bulk, deleted (each in one transaction, with the FTS totals).
    replace_file = pg_writes.replace_file
    bulk_add = pg_writes.bulk_add
    delete_file = pg_writes.delete_file

    @guarded
    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        ids = [int(i) for i in ids]
        # Rows the vector leg read beside the keyword leg, in this search's view (vec_knn).
        known: dict[int, ChunkRow] = self._view.get("rows", {}) if self._view is not None else {}
        out = {i: known[i] for i in ids if i in known}
        need = [i for i in ids if i not in known]
        if not need:
            return out
        rows = self.conn.execute(f"select id, {ROW_COLUMNS} from {self.s}.chunks where id = any(%s)",
                                 (need,)).fetchall()
        out.update(keep_rows(self._view, rows) if self._view is not None else ((int(r[0]), chunk_row(r)) for r in rows))
        return out

    @guarded
    def chunk_ids_for_days(self, days: Sequence[str], limit: int = 200) -> list[int]:
        out: list[int] = []
        for day in days:
            out.extend(int(r[0]) for r in self.conn.execute(
                f"select c.id from {self.s}.files f join {self.s}.chunks c on c.path = f.path"
                " where f.path like %s limit %s", (f"%{day}%.md", limit)))
            if len(out) >= limit:
                break
        return out[:limit]

    @guarded
    def chunk_count(self) -> int:
        return int(self._one(f"select count(*) from {self.s}.chunks"))

    @guarded
    def pending_vectors(self) -> tuple[int, int]:
        files = int(self._one(f"select count(*) from {self.s}.files where not embedded"))
        if not files:
            return 0, 0
        return files, int(self._one(f"select count(*) from {self.s}.chunks where path in"
                                    f" (select path from {self.s}.files where not embedded)"))

    @guarded
    def counts(self) -> dict[str, int]:
        row = self.conn.execute(
            f"select (select count(*) from {self.s}.files), (select count(*) from {self.s}.chunks),"
            f" (select count(*) from {self.s}.files where not embedded),"
            f" (select count(*) from {self.s}.embedding_cache), (select count(*) from {self.s}.line_vectors)").fetchone()
        assert row is not None
        return {"files": int(row[0]), "chunks": int(row[1]), "files_without_vectors": int(row[2]),
                "cache_entries": int(row[3]), "line_vectors": int(row[4])}

    @guarded
    def line_vectors_of(self, path: str) -> dict[str, np.ndarray]:
        blobs = {int(n): bytes(b) for n, b in self.conn.execute(
            f"select line, embedding from {self.s}.line_vectors where path=%s", (path,))}
        return by_line_text(self.conn.execute(f"select start_line, text from {self.s}.chunks where path=%s",
                                              (path,)), blobs) if blobs else {}

    @guarded
    def line_vector_blobs(self, spans: Sequence[tuple[str, int, int]]) -> dict[int, bytes]:
        out: dict[int, list[bytes]] = {k: [] for k in range(len(spans))}
        if spans:
            for k, blob in self.conn.execute(
                f"select s.k - 1, l.embedding from unnest(%s::text[], %s::int[], %s::int[]) with ordinality"
                f" as s(path, a, b, k) join {self.s}.line_vectors l on l.path = s.path and l.line between s.a and s.b",
                    ([p for p, _, _ in spans], [a for _, a, _ in spans], [b for _, _, b in spans])):
                out[int(k)].append(bytes(blob))
        return {k: b"".join(v) for k, v in out.items()}

    # -- embedding cache ----------------------------------------------------------------------
    # -- the embedding cache (cache.py) --------------------------------------------------------
    @guarded
    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return pg_cache.get(self.conn, self.s, provider, model, key, hashes)

    @guarded
    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        pg_cache.put(self.conn, self.s, provider, model, key, items)

    @guarded
    def cache_prune(self, max_entries: int | None) -> int:
        """At the end of a sync: the cache rows of the chunks it removed that nothing uses any more
        (pg_cache.settle), then the oldest rows beyond `max_entries`."""
        pg_cache.settle(self.conn, self.s)
        return pg_cache.prune(self.conn, self.s, max_entries) if max_entries else 0

    # -- keyword leg (FTS5 semantics; memory.store.postgres.keyword.PgKeyword) -----------------
    @guarded
    def fts_count(self, match: str) -> int:
        return self.keyword.count(match)

    @guarded
    def fts_counts(self, matches: Sequence[str]) -> list[int]:
        """fts_count of each expression, the one-token ones in one statement (the keyword planner's
        document counts for a new query's words: a round trip each before)."""
        return self.keyword.counts(matches)

    @guarded
    def fts_search(self, match: str, limit: int, min_rowid: int | None = None) -> list[tuple[int, float]]:
        if min_rowid is None:
            return self.keyword.ranked(match, "", (), limit)[:limit]
        return self.keyword.ranked(match, "", (), limit, min_rowid=int(min_rowid))[:limit]

    @guarded
    def fts_scores(self, match: str, ids: Sequence[int]) -> dict[int, float]:
        if not ids:
            return {}
        return dict(self.keyword.ranked(match, "and c.id = any(%s)", ([int(i) for i in ids],)))

    @guarded
    def fts_stats(self) -> tuple[int, float]:
        return self.keyword.stats()

    @guarded
    def fts_doc_lengths(self, ids: Sequence[int]) -> dict[int, int]:
        known: dict[int, int] = self._view.get("ntok", {}) if self._view is not None else {}
        out = {int(i): known[int(i)] for i in ids if int(i) in known}
        need = [int(i) for i in ids if int(i) not in known]
        if need:
            out.update((int(i), int(n)) for i, n in self.conn.execute(
                f"select id, ntok from {self.s}.chunks where id = any(%s)", (need,)))
        return out

    @guarded
    def max_chunk_id(self) -> tuple[int, int]:
        # Read once per index generation (every write, from any process, bumps it; a rebuild brings a
        # new index_id): the keyword planner asks on most searches of a large memory.
        m = self.meta()
        stamp = (m.get("index_id"), m.get("generation"))
        if self._id_span[0] != stamp:
            row = self.conn.execute(f"select min(id), max(id) from {self.s}.chunks").fetchone()
            self._id_span = (stamp, (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0))
        return self._id_span[1]

    # -- vector leg (in the server; the HNSW index: memory.store.postgres.hnsw) ----------------
    @guarded
    def vec_knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first: HNSW when built (ef_search ≥ k), else an exact scan."""
        if not self._has_vec_table(self.knn_conn):
            return []
        return self._knn_rows(query, k)

    def _knn_rows(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        conn = self.knn_conn
        self.hnsw.set_ef(conn, k)
        q = np.asarray(query, dtype=np.float32)
        knn = f"select id, embedding operator({self.v}.<=>) %s as d from {self.s}.chunks_vec order by d limit %s"
        if self._view is None:
            return [(int(i), 1.0 - float(d)) for i, d in conn.execute(knn, (q, int(k)))]
        # Inside a search's view the hits' rows come with them (beside the keyword leg, kept for
        # chunk_rows until the view ends): no round trip for them after both legs.
        # (row_number keeps the index's order, ties included, as the statement alone returns it)
        got = conn.execute(f"select v.d, c.id, {', '.join('c.' + x for x in ROW_COLUMNS.split(', '))} from"
                           f" (select id, d, row_number() over () as n from ({knn}) k) v join {self.s}.chunks c"
                           " on c.id = v.id order by v.n", (q, int(k))).fetchall()
        self.keep_in_view([r[1:] for r in got])
        return [(int(r[1]), 1.0 - float(r[0])) for r in got]

    @guarded
    def vec_knn_exact(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The exact top-k whatever indexes exist (the reference for the HNSW recall)."""
        if not self._has_vec_table(self.knn_conn):
            return []
        with self.knn_conn.transaction():
            self.knn_conn.execute("set local enable_indexscan = off")
            return self._knn_rows(query, k)

    @guarded
    def vec_scores(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        if not ids or not self._has_vec_table():
            return {}
        rows = self.conn.execute(f"select id, 1 - (embedding operator({self.v}.<=>) %s) from {self.s}.chunks_vec where id = any(%s)",
                                 (np.asarray(query, dtype=np.float32), [int(i) for i in ids]))
        return {int(i): float(s) for i, s in rows}

    def iter_vectors(self, since_gen: int = -1, block: int = 8192) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if not self._has_vec_table():
            return
        last = -1
        while True:
            with self.conn.cursor(binary=True) as cur:
                rows = cur.execute(
                    f"select c.id, v.embedding from {self.s}.chunks c join {self.s}.chunks_vec v on v.id = c.id"
                    " where c.gen > %s and c.id > %s order by c.id limit %s", (since_gen, last, block)).fetchall()
            if not rows:
                return
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            mat = np.stack([r[1].to_numpy() for r in rows]).astype(np.float32)
            yield ids, mat
            last = int(ids[-1])

    @guarded
    def vector_count(self) -> int:
        return int(self._one(f"select count(*) from {self.s}.chunks_vec")) if self._has_vec_table() else 0

    @guarded
    def has_hnsw(self) -> bool:
        return self.hnsw.exists()

    @guarded
    def optimize(self) -> None:
        """Build the HNSW index once the vectors pass the threshold (below it an exact scan is as fast)."""
        self.hnsw.build()

    @guarded
    def hnsw_recall(self, sample: int = 50, k: int = 10) -> float | None:
        """recall@k of the HNSW path against the exact scan, the queries `sample` stored vectors."""
        return self.hnsw.recall(sample, k)

    # -- atomic rebuilds (memory.store.postgres.writes, over the schema operations of .schema) -----
    clean_stale_rebuilds = pg_writes.clean_stale_rebuilds
    open_rebuild = pg_writes.open_rebuild
    finish_rebuild = pg_writes.finish_rebuild
    discard_rebuild = pg_writes.discard_rebuild

    # -- status ----------------------------------------------------------------------------------
    @guarded
    def describe(self, recall_sample: int = 50) -> dict[str, Any]:
        facts = server_facts(self.conn)
        hnsw = self.has_hnsw()
        return {"backend": "postgres", "server": mask_dsn(self._dsn), "schema": self.schema, **facts,
                "vectors": self.vector_count(), "hnsw_index": hnsw, "hnsw_threshold": self.cfg.hnsw_threshold,
                "hnsw_recall_at_10": self.hnsw.recall_once(recall_sample) if hnsw else None,
                "recall_sample": recall_sample if hnsw else 0,
                "vector": {"available": True, "backend": self.vector_backend(), "error": None}}


def open_pg_store(dsn_env: str, environ: Mapping[str, str], schema: str,
                  cfg: PostgresStoreConfig, state: StateId) -> PgStore:
    from hermit.memory.store.postgres.schema import dsn_from_env

    dsn = dsn_from_env(dsn_env, environ)
    try:
        return PgStore(dsn, schema, cfg, dsn_env=dsn_env, state=state)
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - a server-side failure while creating the schema
        raise StoreError(f"cannot prepare the memory schema {schema} on {mask_dsn(dsn)}: "
                         f"{type(e).__name__}", "check the user's CREATE privilege on the database") from None

