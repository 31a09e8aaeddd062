"""The PostgreSQL index's writes: a file's chunks replaced in one transaction, a bulk COPY, a delete,
and a full rebuild (a staging schema filled, then swapped in with two renames in one transaction).

Each keeps the keyword leg's totals with it in the same transaction: the token document frequencies
(token_df), the document and token counts and the generation in meta (memory.store.postgres.keyword
reads them). PgStore (memory.store.postgres.store) takes these functions as its methods; split from it
by responsibility.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hermit.memory.index.chunking import Chunk
from hermit.memory.index.line_vectors import to_line_blob
from hermit.memory.store.api import FileState, script_class
from hermit.memory.store.postgres import cache as pg_cache
from hermit.memory.store.postgres.errors import guarded
from hermit.memory.store.postgres.rows import BulkChunk
from hermit.memory.store.postgres.schema import drop_stale_rebuilds, staging_names, swap_schema

if TYPE_CHECKING:
    from hermit.memory.store.postgres.store import PgStore


@guarded
def replace_file(
    store: PgStore, *, path: str, source: str, file_hash: str, mtime: int, size: int,
    chunks: Sequence[Chunk], vectors: np.ndarray | None, model: str, messages: int = 0,
    line_vectors: Mapping[int, np.ndarray] | None = None, ident: str = "",
) -> None:
    """Everything indexed for `path` replaced in ONE transaction: a killed host leaves old or new."""
    now = int(time.time())
    docs = store.tok.documents([c.text for c in chunks])
    with store.conn.transaction(), store.conn.cursor() as cur:
        if vectors is not None and len(chunks):
            store._ensure_vec_table(int(vectors.shape[1]))
        gen = store.generation() + 1
        d_docs, d_toks = delete_chunks(store, path, keep={c.hash for c in chunks})
        ids = [int(r[0]) for r in cur.execute(
            f"select nextval(pg_get_serial_sequence('{store.s}.chunks', 'id')) from generate_series(1, %s)",
            (len(chunks),))] if chunks else []
        cur.executemany(
            f"insert into {store.s}.chunks(id, path, source, start_line, end_line, hash, model, text, updated_at,"
            " gen, cjk, tsv, ntok) values (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::tsvector,%s)",
            [(cid, path, source, ch.start_line, ch.end_line, ch.hash, model if vectors is not None else None,
              ch.text, now, gen, script_class(ch.text), tsv, ntok)
             for cid, ch, (tsv, ntok) in zip(ids, chunks, docs, strict=True)])
        count_tokens(store, ids)
        if vectors is not None and ids:
            cur.executemany(f"insert into {store.s}.chunks_vec(id, embedding) values (%s, %s)",
                            [(cid, np.asarray(vectors[i], dtype=np.float32)) for i, cid in enumerate(ids)])
        if line_vectors:
            cur.executemany(f"insert into {store.s}.line_vectors(path, line, embedding) values (%s,%s,%s)",
                            [(path, n, to_line_blob(v)) for n, v in sorted(line_vectors.items())])
        cur.execute(
            f"insert into {store.s}.files(path, source, hash, mtime, size, embedded, indexed_at, messages, ident)"
            " values (%s,%s,%s,%s,%s,%s,%s,%s,%s) on conflict(path) do update set source=excluded.source,"
            " hash=excluded.hash, mtime=excluded.mtime, size=excluded.size, embedded=excluded.embedded,"
            " indexed_at=excluded.indexed_at, messages=excluded.messages, ident=excluded.ident",
            (path, source, file_hash, mtime, size, vectors is not None or not chunks, now, messages, ident))
        bump(store, gen, d_docs + len(chunks), d_toks + sum(n for _, n in docs))


@guarded
def bulk_add(store: PgStore, files: Sequence[FileState], chunks: Sequence[BulkChunk], vectors: np.ndarray | None,
             *, updated_at: int | None = None) -> None:
    """Append files and chunks (+ their vectors, row i of `vectors` for chunks[i]) with COPY in ONE
    transaction: the fast path for migrations and benchmark loads (~10× executemany). The paths
    must not be indexed yet (no replace); the caller holds the writer lock and batches (e.g. 10k
    chunks per call)."""
    now = int(time.time()) if updated_at is None else updated_at
    docs = store.tok.documents([c.text for c in chunks])
    with store.conn.transaction(), store.conn.cursor() as cur:
        if vectors is not None and len(chunks):
            store._ensure_vec_table(int(vectors.shape[1]))
        gen = store.generation() + 1
        ids = [int(r[0]) for r in cur.execute(
            f"select nextval(pg_get_serial_sequence('{store.s}.chunks', 'id')) from generate_series(1, %s)",
            (len(chunks),))] if chunks else []
        with cur.copy(f"copy {store.s}.chunks(id, path, source, start_line, end_line, hash, model, text,"
                      " updated_at, gen, cjk, tsv, ntok) from stdin") as cp:
            for cid, ch, (tsv, ntok) in zip(ids, chunks, docs, strict=True):
                cp.write_row((cid, ch.path, ch.source, ch.start_line, ch.end_line, ch.hash, ch.model, ch.text,
                              now, gen, script_class(ch.text), tsv, ntok))
        count_tokens(store, ids)
        if vectors is not None and ids:
            with cur.copy(f"copy {store.s}.chunks_vec(id, embedding) from stdin") as cp:
                for i, cid in enumerate(ids):
                    cp.write_row((cid, np.asarray(vectors[i], dtype=np.float32)))
        with cur.copy(f"copy {store.s}.files(path, source, hash, mtime, size, embedded, indexed_at, messages,"
                      " ident) from stdin") as cp:
            for f in files:
                cp.write_row((f.path, f.source, f.hash, f.mtime, f.size, f.embedded, now, f.messages, f.ident))
        bump(store, gen, len(chunks), sum(n for _, n in docs))


@guarded
def delete_file(store: PgStore, path: str) -> None:
    with store.conn.transaction():
        d_docs, d_toks = delete_chunks(store, path)
        store.conn.execute(f"delete from {store.s}.files where path=%s", (path,))
        bump(store, store.generation() + 1, d_docs, d_toks)


def count_tokens(store: PgStore, ids: Sequence[int]) -> None:
    """Add the chunks `ids` to token_df (inside the caller's transaction, under the writer lock)."""
    if ids:
        store.conn.execute(
            f"insert into {store.s}.token_df select u.lexeme, count(*) from {store.s}.chunks c"
            " cross join lateral unnest(c.tsv) u where c.id = any(%s) group by u.lexeme"
            f" on conflict (lexeme) do update set df = {store.s}.token_df.df + excluded.df", (list(ids),))


def delete_chunks(store: PgStore, path: str, keep: set[str] | frozenset[str] = frozenset()) -> tuple[int, int]:
    """Delete `path`'s chunks (their vectors cascade); returns (−rows, −tokens) for the FTS totals. The hashes
    of those not put back (not in `keep`) are noted for the end of the sync (pg_cache.settle)."""
    store.conn.execute(f"delete from {store.s}.line_vectors where path=%s", (path,))
    gone = [str(r[0]) for r in store.conn.execute(
        f"update {store.s}.token_df t set df = t.df - d.n from (select u.lexeme, count(*) n from {store.s}.chunks c"
        " cross join lateral unnest(c.tsv) u where c.path = %s group by u.lexeme) d where t.lexeme = d.lexeme"
        " returning t.lexeme, t.df", (path,)) if int(r[1]) <= 0]
    if gone:
        store.conn.execute(f"delete from {store.s}.token_df where lexeme = any(%s)", (gone,))
    rows = store.conn.execute(f"delete from {store.s}.chunks where path=%s returning ntok, hash", (path,)).fetchall()
    pg_cache.removed(store.conn, store.s, sorted({str(r[1]) for r in rows} - keep))
    return -len(rows), -sum(int(r[0]) for r in rows)


def bump(store: PgStore, gen: int, d_docs: int, d_toks: int) -> None:
    """The new generation and the FTS totals changed by (d_docs, d_toks), in the caller's transaction."""
    m = store.meta()
    store._set_meta({"generation": str(gen), "fts_docs": str(int(m.get("fts_docs", "0")) + d_docs),
                    "fts_tokens": str(int(m.get("fts_tokens", "0")) + d_toks)})


# -- atomic rebuilds: a staging schema filled, then swapped in (the schema operations: .schema) ---------
@guarded
def clean_stale_rebuilds(store: PgStore) -> int:
    return drop_stale_rebuilds(store.conn, store.schema)


@guarded
def open_rebuild(store: PgStore) -> PgStore:
    from hermit.memory.store.postgres.store import PgStore

    staging = PgStore(store._dsn, staging_names(store.schema)[0], store.cfg, dsn_env=store._env,
                      staging_of=store.schema)
    try:
        staging.conn.execute(f"insert into {staging.s}.embedding_cache select * from {store.s}.embedding_cache")
    except BaseException:
        store.discard_rebuild(staging)
        raise
    return staging


@guarded
def finish_rebuild(store: PgStore, staging: object) -> None:
    from hermit.memory.store.postgres.store import PgStore

    assert isinstance(staging, PgStore)
    pg_cache.drop_all_unused(staging.conn, staging.s)  # the old cache's rows of chunks gone since
    staging.optimize()
    staging.close()
    swap_schema(store.conn, store.schema, staging.schema, staging_names(store.schema)[1])
    store.keyword.reset()


@guarded
def discard_rebuild(store: PgStore, staging: object) -> None:
    from hermit.memory.store.postgres.store import PgStore

    assert isinstance(staging, PgStore)
    staging.close()
    store.conn.execute(f"drop schema if exists {staging.s} cascade")
