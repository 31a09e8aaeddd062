"""Copying one agent's memory index between backends (SQLite ⇄ PostgreSQL) without re-embedding anything.

Chunks (text, lines, hashes), their vectors, the line vectors, the files' sync state (hash, mtime, size and
identity) and the embedding cache are copied as they are, so the next sync on the target finds every file up to
date and embeds nothing. The target is filled through the store's own atomic rebuild (a staging file or schema swapped in
at the end) under its writer lock: a failed or killed migration leaves the target as it was. The source
is only read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hermit.db import transaction
from hermit.errors import StoreError
from hermit.memory.index.chunking import Chunk
from hermit.memory.store.api import FileState, MemoryStore

BATCH = 5000  # chunks per bulk write: bounded memory at a million chunks


@dataclass(frozen=True)
class SourceChunk:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    model: str | None
    text: str


@dataclass(frozen=True)
class Counts:
    files: int
    chunks: int
    vectors: int
    cache_entries: int
    line_vectors: int


@dataclass(frozen=True)
class MigrationReport:
    source: str  # store locations (never a DSN)
    target: str
    copied: Counts
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, **asdict(self.copied), "seconds": self.seconds}


# -- backend-specific reads (the store interface has no "read everything" calls; only this module needs them)
def _sql(store: MemoryStore) -> tuple[Any, str, str]:
    """(connection, table prefix, placeholder) of a SQLite or PostgreSQL store."""
    from hermit.memory.store.sqlite import IndexStore

    if isinstance(store, IndexStore):
        return store.conn, "", "?"
    from hermit.memory.store.postgres.store import PgStore

    if isinstance(store, PgStore):
        return store.conn, f"{store.s}.", "%s"
    raise StoreError(f"cannot migrate from a {type(store).__name__}", "migrate between sqlite and postgres")


def has_index(store: MemoryStore) -> bool:
    """Whether the store holds an index at all (opening a PostgreSQL source must not create its schema)."""
    conn, t, p = _sql(store)
    if p == "?":
        return True
    return bool(conn.execute("select to_regclass(%s) is not null", (f"{t}chunks",)).fetchone()[0])


def iter_chunks(store: MemoryStore, block: int = BATCH) -> Iterator[list[SourceChunk]]:
    conn, t, p = _sql(store)
    last = -1
    while True:
        rows = conn.execute(f"select id, path, source, start_line, end_line, hash, model, text from {t}chunks"
                            f" where id > {p} order by id limit {p}", (last, block)).fetchall()
        if not rows:
            return
        yield [SourceChunk(int(r[0]), r[1], r[2], int(r[3]), int(r[4]), r[5], r[6], r[7]) for r in rows]
        last = int(rows[-1][0])


def iter_cache(store: MemoryStore, block: int = BATCH) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
    """((provider, model, provider_key), {hash: vector}) groups of the embedding cache."""
    conn, t, p = _sql(store)
    last = ("", "", "", "")
    while True:
        rows = conn.execute(
            f"select provider, model, provider_key, hash, embedding from {t}embedding_cache"
            f" where (provider, model, provider_key, hash) > ({p}, {p}, {p}, {p})"
            f" order by provider, model, provider_key, hash limit {p}", (*last, block)).fetchall()
        if not rows:
            return
        groups: dict[tuple[str, str, str], dict[str, np.ndarray]] = {}
        for prov, model, key, h, blob in rows:
            groups.setdefault((prov, model, key), {})[h] = np.frombuffer(bytes(blob), dtype=np.float32).copy()
        yield from groups.items()
        last = tuple(str(x) for x in rows[-1][:4])  # type: ignore[assignment]


def _vector_blocks(store: MemoryStore) -> Iterator[dict[int, np.ndarray]]:
    for ids, mat in store.iter_vectors(since_gen=-1, block=BATCH):
        yield {int(i): v for i, v in zip(ids.tolist(), mat, strict=True)}


def counts(store: MemoryStore) -> Counts:
    c = store.counts()
    vectors = 0
    if store.vector_backend():
        # Counted in the database (the same join iter_vectors reads), not by pulling every vector through Python.
        conn, t, _ = _sql(store)
        vectors = int(conn.execute(f"select count(*) from {t}chunks c join {t}chunks_vec v on v.id = c.id").fetchone()[0])
    return Counts(c["files"], c["chunks"], vectors, c["cache_entries"], c["line_vectors"])


def _copy_line_vectors(src: MemoryStore, staging: MemoryStore, block: int = BATCH) -> None:
    """The line vectors as stored (the same float16 bytes in both backends), in (path, line) order."""
    conn, t, p = _sql(src)
    out, t2, p2 = _sql(staging)
    last: tuple[str, int] = ("", -1)
    while True:
        rows = conn.execute(f"select path, line, embedding from {t}line_vectors where (path, line) > ({p}, {p})"
                            f" order by path, line limit {p}", (*last, block)).fetchall()
        if not rows:
            return
        sql = f"insert into {t2}line_vectors(path, line, embedding) values ({p2}, {p2}, {p2})"
        items = [(r[0], int(r[1]), bytes(r[2])) for r in rows]
        if p2 == "?":
            with transaction(out) as c:
                c.executemany(sql, items)
        else:
            with out.transaction(), out.cursor() as cur:
                cur.executemany(sql, items)
        last = (rows[-1][0], int(rows[-1][1]))


# -- writing ---------------------------------------------------------------------------------------
def _write_chunks(staging: MemoryStore, files: dict[str, FileState], chunks: list[SourceChunk],
                  vecs: dict[int, np.ndarray], written: set[str]) -> None:
    from hermit.memory.store.postgres.rows import BulkChunk
    from hermit.memory.store.postgres.store import PgStore

    with_vec = [c for c in chunks if c.id in vecs]
    without = [c for c in chunks if c.id not in vecs]
    if isinstance(staging, PgStore):
        for part, has in ((with_vec, True), (without, False)):
            if not part:
                continue
            staging.bulk_add(_new_files(files, part, written), [BulkChunk(c.path, c.source, c.start_line, c.end_line, c.hash, c.text,
                                                   c.model) for c in part],
                             np.stack([vecs[c.id] for c in part]) if has else None)
        return
    # SQLite: one replace per file; the chunks of one file arrive together (ids are per-file runs).
    by_path: dict[str, list[SourceChunk]] = {}
    for c in chunks:
        by_path.setdefault(c.path, []).append(c)
    for path, part in by_path.items():
        f = files[path]
        has = all(c.id in vecs for c in part)
        model = next((c.model for c in part if c.model), "") or ""
        staging.replace_file(path=path, source=f.source, file_hash=f.hash, mtime=f.mtime, size=f.size,
                             chunks=[Chunk(c.start_line, c.end_line, c.text, c.hash) for c in part],
                             vectors=np.stack([vecs[c.id] for c in part]) if has and part else None,
                             model=model, messages=f.messages, ident=f.ident)
        written.add(path)


def _new_files(files: dict[str, FileState], part: list[SourceChunk], written: set[str]) -> list[FileState]:
    out = []
    for path in dict.fromkeys(c.path for c in part):
        if path not in written:
            written.add(path)
            out.append(files[path])
    return out


def _write_empty_files(staging: MemoryStore, files: dict[str, FileState], written: set[str]) -> None:
    """Files with no chunks (empty notes) keep their sync state too, or the next sync would revisit them."""
    from hermit.memory.store.postgres.store import PgStore

    rest = [f for p, f in files.items() if p not in written]
    if not rest:
        return
    if isinstance(staging, PgStore):
        staging.bulk_add(rest, [], None)
        return
    for f in rest:
        staging.replace_file(path=f.path, source=f.source, file_hash=f.hash, mtime=f.mtime, size=f.size,
                             chunks=[], vectors=None, model="", messages=f.messages, ident=f.ident)


def _copy_meta(src: MemoryStore, staging: MemoryStore, now: float) -> None:
    meta = src.meta()
    ident = src.identity()
    if ident and ident.get("vector_backend") not in (None, "none"):
        ident = {**ident, "vector_backend": staging.vector_kind()}  # the one part of the identity that differs
    values = {"index_id": uuid.uuid4().hex, "created_at": str(int(now))}
    if ident:
        values["identity"] = json.dumps(ident)
    if "dims" in meta:
        values["dims"] = meta["dims"]
    staging.set_meta(values)


def is_empty(store: MemoryStore) -> bool:
    c = store.counts()
    return c["files"] == 0 and c["chunks"] == 0 and c["cache_entries"] == 0


def migrate_index(src: MemoryStore, dst: MemoryStore, *, replace: bool = False, batch: int = BATCH,
                  clock: Any = time.time) -> MigrationReport:
    """Copy `src` into `dst` (replacing it atomically); refuses a non-empty `dst` unless `replace`."""
    t0 = clock()
    lock = dst.writer_lock()
    if not lock.acquire(False):
        raise StoreError(f"the target index {dst.location} is being written by another process",
                         "stop `hermit memory watch` / the gateway using it, then run the migration again")
    try:
        if not replace and not is_empty(dst):
            c = dst.counts()
            raise StoreError(f"the target index {dst.location} is not empty ({c['files']} files, {c['chunks']} "
                             f"chunks, {c['cache_entries']} cached embeddings)",
                             "add --replace to overwrite it (the source is never changed)")
        want = counts(src)
        staging = dst.open_rebuild()
        try:
            files = src.files()
            written: set[str] = set()
            vec_blocks = _vector_blocks(src) if src.vector_backend() else iter(())
            pending: dict[int, np.ndarray] = {}

            def emit(ready: list[SourceChunk]) -> None:
                if ready:
                    vecs = {c.id: pending.pop(c.id) for c in ready if c.id in pending}
                    _write_chunks(staging, files, ready, vecs, written)

            carry: list[SourceChunk] = []
            for batch_chunks in iter_chunks(src, batch):
                top = batch_chunks[-1].id
                # Vectors come in id order like the chunks: pull blocks until this batch is covered.
                while not pending or max(pending) < top:
                    nxt = next(vec_blocks, None)
                    if nxt is None:
                        break
                    pending.update(nxt)
                # A file's chunks are one run of ids; the batch's last file may go on in the next batch, and
                # a SQLite target replaces a file whole, so that file waits for the next batch.
                chunks = carry + batch_chunks
                last = chunks[-1].path
                carry = [c for c in chunks if c.path == last]
                emit([c for c in chunks if c.path != last])
            emit(carry)
            _write_empty_files(staging, files, written)
            _copy_line_vectors(src, staging, batch)
            # The staging store started with the target's old cache; a replace keeps only the source's.
            _clear_cache(staging)
            for (prov, model, key), items in iter_cache(src):
                staging.cache_put(prov, model, key, items)
            _copy_meta(src, staging, clock())
            got = counts(staging)
            if got != want:
                raise StoreError(f"the copy does not match the source: source {want}, copy {got}",
                                 "nothing was changed on the target; run the migration again or report this")
        except BaseException:
            dst.discard_rebuild(staging)
            raise
        dst.finish_rebuild(staging)
        dst.optimize()  # PostgreSQL: the HNSW index past its threshold
        return MigrationReport(src.location, dst.location, want, round(clock() - t0, 2))
    finally:
        lock.release()


def _clear_cache(store: MemoryStore) -> None:
    conn, t, _ = _sql(store)
    conn.execute(f"delete from {t}embedding_cache")
