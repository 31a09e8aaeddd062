"""The index knows each file by its identity (device, inode, ctime) as well as its mtime and size.

A note replaced by one of the same size and the same mtime (`cp -p`, `rsync -t`, `touch -r`, a restore, an
atomic rename of a prepared file) used to keep its old chunks: search showed text the file no longer held.
Now such a file is read again, and its hash decides: new text is indexed, the old text is gone; a chmod
(which moves ctime too) costs a read and a hash, never an embedding. An index written before identities were
kept is upgraded in place and keeps its vectors: each file is checked once by its hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryKey, MemoryService
from memhelpers import Backend, HashEmbedder, on_backend, service, sql

# A search checks whether the index is dirty at most once a second by default; these tests search right after
# changing a file, and check every time.
EVERY_SEARCH = MemorySearchConfig.model_validate({"sync": {"dirty_check_interval_ms": 0}})
OLD = "# Boat\n- the boat is moored at pier seven, slip 14, in Harwich\n"
NEW = "# Bike\n- the bike is locked at the rail station rack, bay C-4B\n"


def _ident(p: Path) -> str:
    st = os.stat(p)
    return f"{st.st_ino}:{st.st_ctime_ns}"


def _snippets(svc: MemoryService, query: str) -> str:
    res = svc.search(query, min_score=0.0)
    assert "error" not in res, res
    return "\n".join(r["snippet"] for r in res["results"])


def _same_stamp_rewrite(p: Path, text: str) -> None:
    """Write `text` (of the old length) into `p` in place and put its old mtime back, as `cp -p` would; the
    ctime moves (the kernel sets it; a coarse clock tick may need a second write to show it)."""
    before, was = os.stat(p), _ident(p)
    assert len(text.encode()) == before.st_size
    while True:
        p.write_text(text, encoding="utf-8")
        os.utime(p, ns=(before.st_atime_ns, before.st_mtime_ns))
        if _ident(p) != was:
            break
    after = os.stat(p)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def _chmod_until_ctime_moves(p: Path) -> None:
    was, mode = _ident(p), os.stat(p).st_mode & 0o777
    modes = [0o600, 0o640] if mode != 0o600 else [0o640, 0o600]
    n = 0
    while _ident(p) == was:
        os.chmod(p, modes[n % 2])
        n += 1


def test_same_size_same_mtime_rewrite_is_reindexed(workspace: Path, tmp_path: Path, e5: Any,
                                                    store_backend: str) -> None:
    assert len(OLD.encode()) == len(NEW.encode())
    note = write(workspace / "memory" / "where.md", OLD)
    write(workspace / "MEMORY.md", "# Memory\n- likes green tea\n")
    svc = service(workspace, tmp_path / "idx.sqlite", e5, EVERY_SEARCH)
    svc.sync()
    assert "pier seven" in _snippets(svc, "where is the boat moored")

    _same_stamp_rewrite(note, NEW)
    assert svc.indexer.is_dirty(), "a file whose identity changed is a change, though its mtime and size are not"
    # The search API syncs what is dirty first: it sees the file as it is now.
    found = _snippets(svc, "where is the bike locked")
    assert "rail station rack" in found
    assert "pier seven" not in _snippets(svc, "pier seven Harwich boat moored")
    [(n,)] = sql(svc, "select count(*) from {t}chunks where text like ?", ("%pier seven%",))
    assert n == 0
    r = svc.sync()
    assert (r.files_indexed, r.embedded) == (0, 0) and not svc.indexer.is_dirty()
    svc.close()


def test_atomic_replace_by_a_prepared_file_is_reindexed(workspace: Path, tmp_path: Path, e5: Any,
                                                         store_backend: str) -> None:
    note = write(workspace / "MEMORY.md", OLD)
    svc = service(workspace, tmp_path / "idx.sqlite", e5, EVERY_SEARCH)
    svc.sync()
    old = os.stat(note)
    prepared = write(workspace / "MEMORY.md.tmp", NEW)  # not a memory file: no .md ending
    os.utime(prepared, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(prepared, note)
    now = os.stat(note)
    assert (now.st_size, now.st_mtime_ns) == (old.st_size, old.st_mtime_ns) and now.st_ino != old.st_ino
    assert "rail station rack" in _snippets(svc, "where is the bike locked")
    assert "pier seven" not in _snippets(svc, "pier seven Harwich boat moored")
    [(path, ident)] = sql(svc, "select path, ident from {t}files")
    assert (path, ident) == ("MEMORY.md", _ident(note))
    svc.close()


def test_chmod_costs_a_hash_not_an_embedding(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    emb = HashEmbedder()
    note = write(workspace / "memory" / "where.md", OLD)
    write(workspace / "MEMORY.md", "# Memory\n- likes green tea\n")
    svc = service(workspace, tmp_path / "idx.sqlite", emb)
    svc.sync()
    calls = emb.calls
    [(chunks_before,)] = sql(svc, "select max(id) from {t}chunks")

    _chmod_until_ctime_moves(note)
    assert svc.indexer.is_dirty()
    r = svc.sync()
    assert (r.files_indexed, r.files_unchanged, r.embedded, r.cache_hits) == (0, 2, 0, 0)
    assert emb.calls == calls, "a chmod must not embed anything"
    [(chunks_after,)] = sql(svc, "select max(id) from {t}chunks")
    assert chunks_after == chunks_before, "the chunks were kept, not rewritten"
    assert svc.store.files()["memory/where.md"].ident == _ident(note)
    assert not svc.indexer.is_dirty(), "the new identity is recorded: the next sync does not read the file"
    svc.close()


def test_touch_file_keeps_the_identity_unless_given(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    write(workspace / "MEMORY.md", OLD)
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder())
    svc.sync()
    store = svc.store
    f = store.files()["MEMORY.md"]
    store.touch_file("MEMORY.md", f.mtime + 1, f.size)
    g = store.files()["MEMORY.md"]
    assert (g.mtime, g.ident, g.hash) == (f.mtime + 1, f.ident, f.hash) and f.ident
    store.touch_file("MEMORY.md", f.mtime, f.size, "1:2:3")
    assert store.files()["MEMORY.md"].ident == "1:2:3"
    svc.close()


def _to_previous_schema(svc: MemoryService) -> None:
    """Give the index the shape the schema had before identities: no ident column, the migration undone."""
    if Backend.name == "sqlite":
        store: Any = svc.store
        store.conn.execute("alter table files drop column ident")
        store.conn.execute("pragma user_version = 6")
    else:
        pg: Any = svc.store
        pg.conn.execute(f"alter table {pg.s}.files drop column ident")
        pg.conn.execute(f"drop table {pg.s}.cache_unused")  # schema 5 came after identities too
        pg.conn.execute(f"delete from {pg.s}.migrations where version >= 4")


def _vectors(svc: MemoryService) -> dict[tuple[str, int], bytes]:
    rows = sql(svc, "select c.path, c.start_line, c.id from {t}chunks c order by c.id")
    by_id = {int(i): (p, int(s)) for p, s, i in rows}
    out: dict[tuple[str, int], bytes] = {}
    for ids, mat in svc.store.iter_vectors(since_gen=-1):
        for i, v in zip(ids.tolist(), mat, strict=True):
            out[by_id[int(i)]] = np.asarray(v, dtype=np.float32).tobytes()
    return out


def test_an_index_from_the_previous_schema_is_upgraded_and_keeps_its_vectors(
        workspace: Path, tmp_path: Path, store_backend: str) -> None:
    emb = HashEmbedder()
    kept = write(workspace / "MEMORY.md", "# Memory\n- likes green tea\n- the spare key is under the blue pot\n")
    stale = write(workspace / "memory" / "where.md", OLD)
    write(workspace / "memory" / "empty.md", "")
    db = tmp_path / "idx.sqlite"
    svc = service(workspace, db, emb)
    svc.sync()
    vectors = _vectors(svc)
    assert len(vectors) == 2
    _to_previous_schema(svc)
    svc.close()
    # Replaced while the old version ran: the old index could not tell; the upgraded one checks every file once.
    _same_stamp_rewrite(stale, NEW)

    calls = emb.calls
    svc = service(workspace, db, emb)
    assert {f.ident for f in svc.store.files().values()} == {""}, "rows from before identities have none"
    r = svc.sync()
    assert not r.rebuilt and (r.files_unchanged, r.files_indexed) == (2, 1)
    assert emb.calls == calls + 1 and r.embedded == 1, "only the replaced file's new chunk is embedded"
    after = _vectors(svc)
    assert after[("MEMORY.md", 1)] == vectors[("MEMORY.md", 1)], "the unchanged file keeps its vector"
    assert {p: f.ident for p, f in svc.store.files().items()} == {
        "MEMORY.md": _ident(kept), "memory/where.md": _ident(stale),
        "memory/empty.md": _ident(workspace / "memory" / "empty.md")}
    assert "rail station rack" in _snippets(svc, "bike locked rail station")
    assert "pier seven" not in _snippets(svc, "pier seven Harwich boat moored")
    assert not svc.indexer.is_dirty()
    svc.close()


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _transcript(words: str) -> str:
    msg = {"role": "user", "content": [{"type": "text", "text": f"remember: {words}"}]}
    return "\n".join([_line({"type": "session", "id": "s1", "sessionKey": "agent:main:main"}),
                      _line({"type": "message", "message": msg})]) + "\n"


def _session_service(ws: Path, db: Path, sessions: Path, emb: HashEmbedder) -> MemoryService:
    cfg = on_backend(EVERY_SEARCH.model_copy(update={"sources": ["memory", "sessions"]}), db)
    return MemoryService(MemoryKey("main", ws), db, cfg, emb, sessions_dir=sessions,
                         environ={"HERMIT_TEST_PG_DSN": Backend.dsn})


def test_a_transcript_replaced_at_the_same_size_and_mtime_is_reindexed(workspace: Path, tmp_path: Path,
                                                                       store_backend: str) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    t = sessions / "s1.jsonl"
    t.write_text(_transcript("the boat is at pier seven"), encoding="utf-8")
    emb = HashEmbedder()
    svc = _session_service(workspace, tmp_path / "idx.sqlite", sessions, emb)
    svc.sync()
    assert "pier seven" in _snippets(svc, "boat pier seven")

    calls = emb.calls
    _chmod_until_ctime_moves(t)
    r = svc.sync()
    assert (r.files_indexed, r.embedded, emb.calls) == (0, 0, calls), "a chmod of a transcript embeds nothing"
    assert not svc.indexer.is_dirty()

    _same_stamp_rewrite(t, _transcript("the bike is at lot eleven"))
    assert svc.indexer.is_dirty()
    assert "lot eleven" in _snippets(svc, "bike lot eleven")
    assert "pier seven" not in _snippets(svc, "boat pier seven")
    svc.close()


def test_migrating_between_stores_keeps_identities(workspace: Path, tmp_path: Path, pg_dsn: str) -> None:
    """`hermit memory migrate` copies each file's identity, so the target's next sync reads nothing; a SQLite
    source from before identities (opened read-only: never upgraded) migrates too, its files checked once."""
    from hermit.memory.store.migrate import migrate_index
    from hermit.memory.store.postgres.schema import schema_name
    from hermit.memory.store.postgres.store import PgStore
    from hermit.memory.store.sqlite import IndexStore

    write(workspace / "MEMORY.md", "# Memory\n- likes green tea\n")
    write(workspace / "memory" / "where.md", OLD)
    emb = HashEmbedder()
    db = tmp_path / "main.sqlite"
    svc = MemoryService(MemoryKey("main", workspace), db, MemorySearchConfig(), emb)
    svc.sync()
    want = {p: f.ident for p, f in svc.store.files().items()}
    assert all(want.values())
    svc.close()
    pg_cfg = MemorySearchConfig.model_validate({"store": {"backend": "postgres",
                                                          "postgres": {"dsn_env": "HERMIT_TEST_PG_DSN"}}})
    for n, old_shape in enumerate((False, True)):
        if old_shape:
            lite = IndexStore(db)
            lite.conn.execute("alter table files drop column ident")
            lite.conn.execute("pragma user_version = 6")
            lite.close()
        src = IndexStore(db, readonly=True)
        prefix = f"copy{n}_"
        dst = PgStore(pg_dsn, schema_name(prefix, "main"), pg_cfg.store.postgres)
        migrate_index(src, dst)
        src.close()
        got = {p: f.ident for p, f in dst.files().items()}
        dst.close()
        assert got == ({p: "" for p in want} if old_shape else want)
        calls = emb.calls
        cfg = pg_cfg.model_copy(update={"store": pg_cfg.store.model_copy(update={
            "postgres": pg_cfg.store.postgres.model_copy(update={"schema_prefix": prefix})})})
        pg = MemoryService(MemoryKey("main", workspace), db, cfg, emb, environ={"HERMIT_TEST_PG_DSN": pg_dsn})
        assert pg.store.location.endswith(f"schema {prefix}main"), pg.store.location
        assert pg.indexer.is_dirty() == old_shape
        r = pg.sync()
        assert (r.files_indexed, r.embedded, emb.calls) == (0, 0, calls)
        assert {p: f.ident for p, f in pg.store.files().items()} == want and not pg.indexer.is_dirty()
        pg.close()
