"""The embedding cache of a PgStore schema (`<schema>.embedding_cache`): vectors by provider, model, provider key
and text hash, so a re-index or a rebuild embeds only text it has not seen; the rows of removed chunks that no
chunk uses any more dropped at the end of each sync (`settle`, as SQLite's memory.store.residue), then the
oldest beyond the cap."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from hermit.memory.store.postgres.schema import PgConn


def get(conn: PgConn, s: str, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    uniq = list(dict.fromkeys(hashes))
    if not uniq:
        return {}
    rows = conn.execute(
        f"select hash, embedding from {s}.embedding_cache where provider=%s and model=%s"
        " and provider_key=%s and hash = any(%s)", (provider, model, key, uniq))
    return {str(h): np.frombuffer(bytes(b), dtype=np.float32) for h, b in rows}


def put(conn: PgConn, s: str, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
    if not items:
        return
    now = int(time.time())
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            f"insert into {s}.embedding_cache(provider, model, provider_key, hash, embedding, dims,"
            " updated_at) values (%s,%s,%s,%s,%s,%s,%s) on conflict(provider, model, provider_key, hash)"
            " do update set embedding=excluded.embedding, dims=excluded.dims, updated_at=excluded.updated_at",
            [(provider, model, key, h, np.asarray(v, dtype=np.float32).tobytes(), int(v.shape[0]), now)
             for h, v in items.items()])


def prune(conn: PgConn, s: str, max_entries: int) -> int:
    n = int(conn.execute(f"select count(*) from {s}.embedding_cache").fetchone()[0])
    if n <= max_entries:
        return 0
    conn.execute(f"delete from {s}.embedding_cache where ctid in (select ctid from"
                 f" {s}.embedding_cache order by updated_at asc limit %s)", (n - max_entries,))
    return n - max_entries


def removed(conn: PgConn, s: str, hashes: Sequence[str]) -> None:
    """Inside a write's transaction: the hashes of the chunks it removed (their text is gone from the index)."""
    if hashes:
        conn.execute(f"insert into {s}.cache_unused(hash) select unnest(%s::text[]) on conflict do nothing",
                     (list(hashes),))


def settle(conn: PgConn, s: str) -> int:
    """After a sync: drop the cache rows of the removed chunks' hashes that no chunk uses now (not at once: a
    renamed or moved note is deleted before its new path is indexed, and its chunks come from the cache).
    Returns how many hashes were noted."""
    with conn.transaction():
        n = int(conn.execute(f"select count(*) from {s}.cache_unused").fetchone()[0])
        if n:
            conn.execute(f"delete from {s}.embedding_cache e using {s}.cache_unused u where e.hash = u.hash"
                         f" and not exists (select 1 from {s}.chunks c where c.hash = u.hash)")
            conn.execute(f"delete from {s}.cache_unused")
    return n


def drop_all_unused(conn: PgConn, s: str) -> None:
    """Every cache row no chunk uses (a rebuild's copy of the old cache, before it replaces the live schema)."""
    conn.execute(f"delete from {s}.embedding_cache e where not exists"
                 f" (select 1 from {s}.chunks c where c.hash = e.hash)")
    conn.execute(f"delete from {s}.cache_unused")
