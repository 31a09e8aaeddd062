"""The PostgreSQL store against the SQLite one on a real server: FTS5-exact keyword scores, the same
search results, agent isolation, HNSW past its threshold, atomic rebuilds, and a DSN that is never shown."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import psycopg
import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.errors import StoreError
from hermit.memory.search.fts import build_match, or_match
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.postgres.schema import schema_name
from memhelpers import HashEmbedder


def _pg(cfg: dict[str, object] | None = None, **pg: object) -> MemorySearchConfig:
    raw: dict[str, object] = dict(cfg or {})
    raw["store"] = {"backend": "postgres", "postgres": {"dsn_env": "TEST_DSN", **pg}}
    return MemorySearchConfig.model_validate(raw)


def _corpus(ws: Path) -> None:
    """Daily logs with a rare word, common words, identifiers, repeats, CJK and accents."""
    r = random.Random(11)
    write(ws / "MEMORY.md", "# Memory\n- POSTGRES_URL lives in the vault; TICKET-4821 is the login bug.\n")
    for d in range(40):
        lines = [f"# Day {d}", "", "Meeting notes: " + " ".join(r.choice(["notes", "noted", "agenda", "café"])
                                                                for _ in range(r.randint(1, 8)))]
        if d % 2 == 0:
            lines.append("The project plan moved forward; projects overlap." if d % 4 == 0 else "Project status.")
        if d % 9 == 4:
            lines.append("Bought a kumquat tree." + " kumquat" * (d % 5))
        if d % 3 == 0:
            lines.append("周末练习钢琴，钢琴老师很耐心。" if d % 2 else "钢琴课改到周三。")
        lines.append("filler words " * r.randint(3, 30))
        write(ws / "memory" / f"2026-02-{d % 28 + 1:02d}-{d}.md", "\n".join(lines) + "\n")


def _pair(tmp_path: Path, dsn: str, embedder: HashEmbedder | None) -> tuple[MemoryService, MemoryService]:
    ws = tmp_path / "ws"
    _corpus(ws)
    extra = {} if embedder else {"provider": "none"}
    lite = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", MemorySearchConfig.model_validate(extra),
                         embedder)
    pg = MemoryService(MemoryKey("main", ws), tmp_path / "unused.sqlite", _pg(extra), embedder,
                       environ={"TEST_DSN": dsn})
    lite.sync()
    pg.sync()
    return lite, pg


def _by_place(svc: MemoryService, hits: list[tuple[int, float]]) -> dict[tuple[str, int], float]:
    rows = svc.store.chunk_rows([i for i, _ in hits])
    return {(rows[i].path, rows[i].start_line): s for i, s in hits}


def test_keyword_scores_equal_sqlite_fts5(tmp_path: Path, pg_dsn: str) -> None:
    lite, pg = _pair(tmp_path, pg_dsn, None)
    assert pg.store.fts_stats() == pytest.approx(lite.store.fts_stats())
    assert pg.store.counts() == lite.store.counts()
    matches = [build_match(q) for q in ("kumquat", "project notes", "钢琴课", "琴", "POSTGRES_URL", "TICKET-4821",
                                        "cafe", "noted agenda filler", "nothing-like-this")]
    matches.append(f"({or_match(['kumquat'])}) AND ({or_match(['kumquat', 'project', 'notes'])})")
    for match in matches:
        assert match
        assert pg.store.fts_count(match) == lite.store.fts_count(match), match
        a = _by_place(lite, lite.store.fts_search(match, 500))
        b = _by_place(pg, pg.store.fts_search(match, 500))
        assert set(a) == set(b), match
        for place, score in a.items():
            assert b[place] == pytest.approx(score, rel=1e-9, abs=1e-12), (match, place)
    lite.close()
    pg.close()


def _ranked(res: dict[str, object]) -> list[tuple[float, str, int]]:
    return sorted((-h["score"], h["path"], h["startLine"]) for h in res["results"])  # type: ignore[attr-defined]


def test_hybrid_search_gives_the_same_results(tmp_path: Path, pg_dsn: str) -> None:
    lite, pg = _pair(tmp_path, pg_dsn, HashEmbedder())
    for q in ("kumquat tree", "project plan", "钢琴老师", "where is POSTGRES_URL", "TICKET-4821 login", "café notes"):
        a, b = lite.search(q), pg.search(q)
        assert "error" not in b and b.get("mode") == a.get("mode"), q
        # Equal scores may come in either order (the two KNN implementations break ties differently).
        assert _ranked(a) == _ranked(b), q
    lite.close()
    pg.close()


def _token_df(svc: MemoryService) -> tuple[dict[str, int], dict[str, int]]:
    """(the maintained token_df, the same counts recomputed from the chunks)."""
    st = svc.store
    kept = {str(t): int(n) for t, n in st.conn.execute(f"select lexeme, df from {st.s}.token_df")}  # type: ignore[attr-defined]
    fresh = {str(t): int(n) for t, n in st.conn.execute(  # type: ignore[attr-defined]
        f"select u.lexeme, count(*) from {st.s}.chunks c cross join lateral unnest(c.tsv) u group by u.lexeme")}  # type: ignore[attr-defined]
    return kept, fresh


def test_token_counts_stay_exact_through_edits_deletes_and_an_upgrade(tmp_path: Path, pg_dsn: str) -> None:
    lite, pg = _pair(tmp_path, pg_dsn, None)
    ws = tmp_path / "ws"
    for step in range(3):
        kept, fresh = _token_df(pg)
        assert kept == fresh and kept["kumquat"] > 0, step
        for word in ("kumquat", "notes", "钢琴", "琴", "project"):
            assert pg.store.fts_count(build_match(word) or "") == lite.store.fts_count(build_match(word) or ""), word
        if step == 0:  # edit some files, delete others, add one
            for f in sorted((ws / "memory").glob("*.md"))[:6]:
                f.write_text(f.read_text() + "\nkumquat jam, more notes\n")
            for f in sorted((ws / "memory").glob("*.md"))[-5:]:
                f.unlink()
            write(ws / "memory" / "2026-03-01-new.md", "# New\n- 钢琴 kumquat\n")
        elif step == 1:  # a schema written by the previous Hermit (no token_df) is upgraded on open
            pg.close()
            with psycopg.connect(pg_dsn, autocommit=True) as c:
                c.execute("drop table hermit_main.token_df")
                c.execute("drop table hermit_main.line_vectors")  # migration 3, newer still
                c.execute("delete from hermit_main.migrations where version >= 2")
            pg = MemoryService(MemoryKey("main", ws), tmp_path / "unused.sqlite", _pg({"provider": "none"}), None,
                               environ={"TEST_DSN": pg_dsn})
        lite.sync()
        pg.sync()
    lite.close()
    pg.close()


def test_agents_are_isolated_in_their_own_schemas(tmp_path: Path, pg_dsn: str) -> None:
    env = {"TEST_DSN": pg_dsn}
    write(tmp_path / "a" / "MEMORY.md", "# A\n- the alpaca farm is in Peru\n")
    write(tmp_path / "b" / "MEMORY.md", "# B\n- the beaver dam needs repair\n")
    a = MemoryService(MemoryKey("main", tmp_path / "a"), tmp_path / "a.sqlite", _pg(), HashEmbedder(), environ=env)
    b = MemoryService(MemoryKey("Work-Team", tmp_path / "b"), tmp_path / "b.sqlite", _pg(), HashEmbedder(),
                      environ=env)
    a.sync()
    b.sync()
    assert a.search("alpaca")["results"] and not a.search("beaver dam")["results"]
    assert b.search("beaver dam")["results"] and not b.search("alpaca")["results"]
    sa, sb = a.status()["store"]["schema"], b.status()["store"]["schema"]
    assert sa == "hermit_main" and sb == schema_name("hermit_", "Work-Team") and sb.startswith("hermit_work_team_")
    a.close()
    b.close()


def test_hnsw_index_past_the_threshold_reports_its_recall(tmp_path: Path, pg_dsn: str) -> None:
    ws = tmp_path / "ws"
    for i in range(80):
        write(ws / "memory" / f"n{i:03d}.md", f"# note {i}\n- topic {i % 13} word{i} about thing {i % 7}\n")
    cfg = _pg(hnsw_threshold=50)
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "x.sqlite", cfg, HashEmbedder(), environ={"TEST_DSN": pg_dsn})
    small = MemoryService(MemoryKey("small", ws), tmp_path / "y.sqlite", _pg(hnsw_threshold=10_000), HashEmbedder(),
                          environ={"TEST_DSN": pg_dsn})
    svc.sync()
    small.sync()
    st = svc.status()["store"]
    assert st["vectors"] == 80 and st["hnsw_index"] is True
    assert st["recall_sample"] == 50 and st["hnsw_recall_at_10"] >= 0.9
    assert small.status()["store"]["hnsw_index"] is False  # below its threshold: exact scan
    for q in ("topic 3 thing", "word42"):
        assert [r["path"] for r in svc.search(q)["results"]] == [r["path"] for r in small.search(q)["results"]]
    svc.close()
    small.close()


def test_a_rebuild_shows_readers_the_old_or_the_new_index(tmp_path: Path, pg_dsn: str) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# M\n- the wifi password is in the blue notebook\n")
    for i in range(60):
        write(ws / "memory" / f"d{i:02d}.md", "\n".join(f"- line {j} of day {i} about errands" for j in range(40)))
    env = {"TEST_DSN": pg_dsn}
    writer = MemoryService(MemoryKey("main", ws), tmp_path / "w.sqlite", _pg(), HashEmbedder(), environ=env)
    writer.sync()
    reader = MemoryService(MemoryKey("main", ws), tmp_path / "r.sqlite", _pg({"sync": {"on_search": False}}),
                           HashEmbedder(), environ=env)
    seen: list[list[str]] = []
    errors: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            res = reader.search("wifi password")
            if "error" in res:
                errors.append(res["error"])
            seen.append([r["path"] for r in res["results"]][:1])

    t = threading.Thread(target=read)
    t.start()
    try:
        rebuilt = MemoryService(MemoryKey("main", ws), tmp_path / "w.sqlite",
                                _pg({"chunking": {"tokens": 64, "overlap": 0}}), HashEmbedder(), environ=env)
        r = rebuilt.sync()
    finally:
        stop.set()
        t.join(30)
    assert r.rebuilt and not errors
    assert len(seen) >= 3 and all(s == ["MEMORY.md"] for s in seen), sorted({tuple(s) for s in seen})
    assert reader.search("wifi password")["results"][0]["path"] == "MEMORY.md"
    schemas = [row[0] for row in reader.store.conn.execute(  # type: ignore[attr-defined]
        "select nspname from pg_namespace where nspname like 'hermit%'")]
    assert schemas == ["hermit_main"], "no staging schema is left behind"
    for s in (writer, reader, rebuilt):
        s.close()


def test_missing_dsn_variable_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as e:
        MemoryService(MemoryKey("main", tmp_path), tmp_path / "x.sqlite", _pg(), None, environ={})
    assert "$TEST_DSN is not set" in e.value.message and "export TEST_DSN=" in e.value.hint


def test_unreachable_server_error_never_shows_the_dsn(tmp_path: Path) -> None:
    dsn = "postgresql://hermit:s3cr3t-pw@127.0.0.1:1/memdb"
    with pytest.raises(StoreError) as e:
        MemoryService(MemoryKey("main", tmp_path), tmp_path / "x.sqlite", _pg(connect_timeout_s=2), None,
                      environ={"TEST_DSN": dsn})
    text = str(e.value)
    assert "127.0.0.1:1/memdb" in text and "$TEST_DSN" in text
    assert "s3cr3t" not in text and dsn not in text and "hermit:" not in text


def test_missing_pgvector_is_a_clear_error(tmp_path: Path, pg_server: object) -> None:
    import psycopg

    admin = pg_server.dsn  # type: ignore[attr-defined]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("create role plain_user login password 'pw-not-shown'")
        conn.execute("create database novec owner plain_user")
    dsn = admin.replace("postgres@", "plain_user:pw-not-shown@").rsplit("/", 1)[0] + "/novec"
    with pytest.raises(StoreError) as e:
        MemoryService(MemoryKey("main", tmp_path), tmp_path / "x.sqlite", _pg(), None, environ={"TEST_DSN": dsn})
    assert "pgvector extension is not installed" in e.value.message and "CREATE EXTENSION vector" in e.value.hint
    assert "pw-not-shown" not in str(e.value)


def test_a_dropped_connection_is_an_error_then_a_reconnect(tmp_path: Path, pg_dsn: str) -> None:
    import psycopg

    write(tmp_path / "ws" / "MEMORY.md", "# M\n- the spare key is under the mat\n")
    svc = MemoryService(MemoryKey("main", tmp_path / "ws"), tmp_path / "x.sqlite", _pg(), HashEmbedder(),
                        environ={"TEST_DSN": pg_dsn})
    svc.sync()
    pid = svc.store.conn.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # a server restart, as the store sees it
        admin.execute("select pg_terminate_backend(%s)", (pid,))
    first = svc.search("spare key")
    assert first["disabled"] is True and "PostgreSQL at 127.0.0.1:" in first["error"]
    assert "postgresql://" not in first["error"]
    assert svc.search("spare key")["results"][0]["path"] == "MEMORY.md"  # reconnected
    svc.close()


def test_every_public_store_method_maps_server_errors() -> None:
    """Each public PgStore method carries `guarded` (a psycopg error becomes a StoreError that names no
    DSN); reading() maps its own, iter_vectors is a generator and conn a property."""
    import inspect

    from hermit.memory.store.postgres.errors import guarded
    from hermit.memory.store.postgres.store import PgStore

    wrapper = guarded(lambda self: None).__code__  # every guarded method runs this one wrapper
    public = {n: f for n, f in vars(PgStore).items() if not n.startswith("_") and inspect.isfunction(f)}
    assert len(public) > 40
    assert {n for n, f in public.items() if f.__code__ is not wrapper} == {"reading", "iter_vectors"}
