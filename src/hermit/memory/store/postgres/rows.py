"""Pieces of the PostgreSQL store kept apart from PgStore: the writer lock, bulk-load rows, a search's view
and the chunk rows it reads (with their token counts, kept in the view: memory.store.postgres.store)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermit.memory.store.api import ChunkRow
from hermit.memory.store.postgres.schema import connect

if TYPE_CHECKING:
    from hermit.memory.store.postgres.schema import PgConn


ROW_COLUMNS = "path, source, start_line, end_line, text, cjk, ntok"  # a ChunkRow after its id, then ntok


def chunk_row(r: Sequence[Any]) -> ChunkRow:
    """A ChunkRow from (id, *ROW_COLUMNS)."""
    return ChunkRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], int(r[6]))


def open_view(conn: PgConn, s: str) -> dict[str, Any]:
    """A search's view, inside its transaction: the meta table locked (a rebuild's swap waits for the
    search) and read, and whether the vector table exists — every search needs all three, so they go in
    one pipelined round trip. `s` is the quoted schema."""
    with conn.pipeline():
        conn.execute(f"lock table {s}.meta in access share mode")
        meta = conn.execute(f"select key, value from {s}.meta")
        vec = conn.execute("select to_regclass(%s) is not null", (f"{s}.chunks_vec",))
    row = vec.fetchone()
    return {"meta": {str(k): str(v) for k, v in meta.fetchall()}, "vec": bool(row) and row[0] is True}


def keep_rows(view: dict[str, Any], rows: Sequence[Sequence[Any]]) -> dict[int, ChunkRow]:
    """Rows of (id, *ROW_COLUMNS) as ChunkRows, also kept in a search's view with their token counts
    (chunk_rows and fts_doc_lengths answer from it until the view ends)."""
    out = {int(r[0]): chunk_row(r) for r in rows}
    for r in rows:
        view.setdefault("ntok", {})[int(r[0])] = int(r[7])
    view.setdefault("rows", {}).update(out)
    return out


@dataclass(frozen=True)
class BulkChunk:
    """One chunk for PgStore.bulk_add (a migration or a benchmark load; no per-file replace)."""

    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    text: str
    model: str | None = None


class AdvisoryLock:
    """The writer lock: `pg_advisory_lock` on a connection of its own, held from acquire to release."""

    def __init__(self, dsn: str, key: int, timeout_s: int, dsn_env: str) -> None:
        self._dsn, self._key, self._timeout, self._env = dsn, key, timeout_s, dsn_env
        self._conn: PgConn | None = None

    def acquire(self, blocking: bool) -> bool:
        conn = connect(self._dsn, timeout_s=self._timeout, dsn_env=self._env)
        if blocking:
            conn.execute("select pg_advisory_lock(%s)", (self._key,))
            got = True
        else:
            row = conn.execute("select pg_try_advisory_lock(%s)", (self._key,)).fetchone()
            got = bool(row and row[0])
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.execute("select pg_advisory_unlock(%s)", (self._key,))
            finally:
                self._conn.close()  # closing alone releases it too
                self._conn = None
