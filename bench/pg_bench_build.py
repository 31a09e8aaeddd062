"""Builds (once, cached) the benchmark's SQLite index and PostgreSQL database for a synthetic corpus.

SQLite: Hermit's own IndexStore schema (chunks, FTS5 over fts.index_text, sqlite-vec vec0), filled in one
transaction, with the identity meta the indexer writes, so Hermit's HybridSearcher searches it unchanged.
PostgreSQL: one schema per agent (`agent_main`), a chunks table with a `vector(384)` column and a stored
`tsvector` over the same index_text, filled by binary COPY, then the GIN and HNSW indexes are built.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from hermit.config.schema import MemorySearchConfig
from hermit.memory.index.sync import wanted_identity
from hermit.memory.search.fts import index_text
from hermit.memory.store.sqlite import IndexStore, script_class, to_blob
from pg_bench_data import OUT, copy_binary_header, copy_binary_row, iter_rows, log, vectors

SCHEMA = "agent_main"
SERVER_SETTINGS = {
    # The graph of 1M×384 (≈ 2.5 GB with m=16) must fit maintenance_work_mem or the build crawls.
    "maintenance_work_mem": "'6GB'",
    "max_parallel_maintenance_workers": "1",  # 2 cores: the leader + one worker
    "shared_buffers": "'3GB'",
    "effective_cache_size": "'12GB'",
    "wal_level": "minimal",  # COPY into a table created in the same transaction skips WAL
    "max_wal_senders": "0",
    "max_wal_size": "'8GB'",
    "checkpoint_timeout": "'30min'",
    "jit": "off",
}


def sqlite_path(n: int) -> Path:
    # A directory of its own: Hermit makes an index's directory owner-only (0700), and the PostgreSQL
    # server (another user) must still traverse OUT to reach its data dir.
    return OUT / "sqlite" / f"sqlite-{n}.sqlite"


def build_sqlite(n: int, e5: Any) -> dict[str, Any]:
    path = sqlite_path(n)
    done = path.with_suffix(".json")
    if done.exists():
        return dict(json.loads(done.read_text()))
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    t0 = time.perf_counter()
    store = IndexStore(path)
    cfg = MemorySearchConfig()
    vecs = vectors(n)
    now = int(time.time())
    store.ensure_vec_table(vecs.shape[1])
    conn = store.conn
    conn.execute("begin")
    files: dict[str, int] = {}
    for cid, p, s, e, text in iter_rows(n):
        conn.execute("insert into chunks(id, path, source, start_line, end_line, hash, model, text, updated_at,"
                     " gen, cjk) values (?,?,?,?,?,?,?,?,?,?,?)",
                     (cid, p, "memory", s, e, f"h{cid}", e5.info.model, text, now, 1, script_class(text)))
        conn.execute("insert into chunks_fts(rowid, text) values (?, ?)", (cid, index_text(text)))
        conn.execute("insert into chunks_vec(id, embedding) values (?, ?)", (cid, to_blob(vecs[cid - 1])))
        files[p] = files.get(p, 0) + 1
        if cid % 100_000 == 0:
            log(f"sqlite {cid}/{n}")
    conn.executemany("insert into files(path, source, hash, mtime, size, embedded, indexed_at) values"
                     " (?, 'memory', ?, 0, 0, 1, ?)", [(p, f"f{p}", now) for p in files])
    store.set_meta({"identity": json.dumps(wanted_identity(cfg, e5, store.vec.available)),
                    "index_id": uuid.uuid4().hex, "generation": "1", "dims": str(vecs.shape[1])})
    conn.execute("commit")
    store.close()
    seconds = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    out = {"build_s": round(seconds, 1), "db_mb": round(size / 2**20, 1)}
    done.write_text(json.dumps(out))
    log(f"sqlite built: {out}")
    return out


def server() -> Any:
    """The benchmark's PostgreSQL, its data dir kept under bench/out/pg/server across runs."""
    from pg_database import embedded_server_class

    port = int(os.environ["HERMIT_PG_BENCH_PORT"]) if os.environ.get("HERMIT_PG_BENCH_PORT") else None
    srv = embedded_server_class()(base_dir=OUT / "server", port=port)
    srv.start()
    import psycopg

    with psycopg.connect(srv.dsn, autocommit=True) as c:
        current = {k: c.execute(f"show {k}").fetchone()[0] for k in ("shared_buffers", "wal_level")}
        if current["wal_level"] != "minimal" or current["shared_buffers"] != "3GB":
            for k, v in SERVER_SETTINGS.items():
                c.execute(f"alter system set {k} = {v}")
            restart = True
        else:
            restart = False
    if restart:
        stop(srv)
        srv.start()
    return srv


def stop(srv: Any) -> None:
    """A fast (checkpointing) stop: the cached data dir must not need WAL replay next time."""
    if (srv.pgdata / "postmaster.pid").exists():
        srv._run("pg_ctl", "-D", str(srv.pgdata), "-m", "fast", "-w", "stop", timeout=300)


def fresh_database(srv: Any, name: str) -> str:
    """Drop and create database `name` on the benchmark's server; its DSN."""
    import psycopg

    with psycopg.connect(srv.dsn, autocommit=True) as c:
        c.execute(f"drop database if exists {name}")
        c.execute(f"create database {name}")
    return f"postgresql://postgres@127.0.0.1:{srv.port}/{name}"


def db_name(n: int) -> str:
    return f"bench_{n}"


def pg_dsn(srv: Any, n: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{srv.port}/{db_name(n)}"


def build_pg(srv: Any, n: int, m: int, ef_construction: int) -> dict[str, Any]:
    import psycopg

    done = OUT / f"pg-{n}-m{m}-ef{ef_construction}.json"
    if done.exists():
        return dict(json.loads(done.read_text()))
    fresh_database(srv, db_name(n))
    vecs = vectors(n)
    with psycopg.connect(pg_dsn(srv, n), autocommit=True) as c:
        c.execute("create extension if not exists vector")
        c.execute("create extension if not exists pg_trgm")
        c.execute(f"create schema {SCHEMA}")
        t0 = time.perf_counter()
        with c.transaction():
            c.execute(f"create table {SCHEMA}.chunks(id bigint primary key, path text not null,"
                      " start_line int not null, end_line int not null, text text not null, kw text not null,"
                      f" embedding vector({vecs.shape[1]}) not null,"
                      " tsv tsvector generated always as (to_tsvector('simple', kw)) stored)")
            with c.cursor().copy(f"copy {SCHEMA}.chunks(id, path, start_line, end_line, text, kw, embedding)"
                                 " from stdin with (format binary)") as cp:
                cp.write(copy_binary_header())
                buf: list[bytes] = []
                for cid, p, s, e, text in iter_rows(n):
                    buf.append(copy_binary_row(cid, p, s, e, text, index_text(text), vecs[cid - 1]))
                    if len(buf) >= 5000:
                        cp.write(b"".join(buf))
                        buf.clear()
                    if cid % 100_000 == 0:
                        log(f"pg copy {cid}/{n}")
                buf.append(b"\xff\xff")
                cp.write(b"".join(buf))
        load_s = time.perf_counter() - t0
        c.execute("set maintenance_work_mem = '6GB'")
        t0 = time.perf_counter()
        c.execute(f"create index chunks_tsv on {SCHEMA}.chunks using gin(tsv)")
        gin_s = time.perf_counter() - t0
        log(f"pg gin built in {gin_s:.0f} s")
        t0 = time.perf_counter()
        c.execute(f"create index chunks_hnsw on {SCHEMA}.chunks using hnsw (embedding vector_cosine_ops)"
                  f" with (m = {m}, ef_construction = {ef_construction})")
        hnsw_s = time.perf_counter() - t0
        log(f"pg hnsw built in {hnsw_s:.0f} s")
        c.execute(f"vacuum analyze {SCHEMA}.chunks")
        c.execute("checkpoint")
        size = c.execute("select pg_database_size(current_database())").fetchone()[0]
        idx = c.execute(f"select pg_relation_size('{SCHEMA}.chunks_hnsw')").fetchone()[0]
    out = {"copy_s": round(load_s, 1), "gin_s": round(gin_s, 1), "hnsw_s": round(hnsw_s, 1),
           "db_mb": round(size / 2**20, 1), "hnsw_mb": round(idx / 2**20, 1), "m": m,
           "ef_construction": ef_construction}
    done.write_text(json.dumps(out))
    log(f"pg built: {out}")
    return out


def hermit_db(n: int) -> str:
    return f"bench_hermit_{n}"


def build_hermit_pg(srv: Any, n: int, e5: Any, m: int, ef_construction: int) -> dict[str, Any]:
    """The same corpus loaded through Hermit's own PgStore (bulk_add: FTS5 tokens, BM25 counters, its layout)."""

    from hermit.config.memory_search import PostgresStoreConfig
    from hermit.memory.store.api import FileState
    from hermit.memory.store.postgres.rows import BulkChunk
    from hermit.memory.store.postgres.store import PgStore

    done = OUT / f"hermit-pg-{n}-m{m}-ef{ef_construction}.json"
    if done.exists():
        return dict(json.loads(done.read_text()))
    dsn = fresh_database(srv, hermit_db(n))
    cfg = PostgresStoreConfig(hnsw_m=m, hnsw_ef_construction=ef_construction, hnsw_threshold=20_000)
    store = PgStore(dsn, "hermit_main", cfg)
    vecs = vectors(n)
    t0 = time.perf_counter()
    batch: list[BulkChunk] = []
    ids: list[int] = []
    files: dict[str, FileState] = {}

    def flush() -> None:
        store.bulk_add(list(files.values()), batch, np.asarray(vecs[ids[0] - 1:ids[-1]]), updated_at=0)
        batch.clear()
        ids.clear()
        files.clear()

    for cid, p, s, e, text in iter_rows(n):
        batch.append(BulkChunk(p, "memory", s, e, f"h{cid}", text, e5.info.model))
        ids.append(cid)
        files.setdefault(p, FileState(p, "memory", f"f{p}", 0, 0, True))
        if len(batch) >= 10_000 and (cid % 50 == 0):
            flush()
            if cid % 100_000 == 0:
                log(f"hermit pg {cid}/{n}")
    if batch:
        flush()
    store.set_meta({"identity": json.dumps(wanted_identity(MemorySearchConfig(), e5, "pgvector")),
                    "index_id": uuid.uuid4().hex, "dims": str(vecs.shape[1])})
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.optimize()
    hnsw_s = time.perf_counter() - t0
    store.conn.execute("vacuum analyze hermit_main.chunks")
    store.conn.execute("vacuum analyze hermit_main.chunks_vec")
    size = store.conn.execute("select pg_database_size(current_database())").fetchone()[0]
    store.close()
    out = {"load_s": round(load_s, 1), "hnsw_s": round(hnsw_s, 1), "db_mb": round(size / 2**20, 1)}
    done.write_text(json.dumps(out))
    log(f"hermit pg built: {out}")
    return out
