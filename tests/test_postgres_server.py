"""The test PostgreSQL server: loopback TCP, unprivileged, with the extensions the postgres store needs."""

from __future__ import annotations

import psycopg


def test_server_is_loopback_with_pgvector_and_trgm(pg_server, pg_dsn):
    assert "127.0.0.1" in pg_dsn
    with psycopg.connect(pg_dsn) as conn:
        version = conn.execute("show server_version_num").fetchone()[0]
        exts = dict(conn.execute("select extname, extversion from pg_extension").fetchall())
        user = conn.execute("select current_setting('listen_addresses')").fetchone()[0]
        dist = conn.execute("select '[1,0]'::vector <=> '[0,1]'::vector").fetchone()[0]
    assert int(version) >= 150000
    assert exts["vector"] >= "0.8" and "pg_trgm" in exts
    assert user == "127.0.0.1"
    assert abs(dist - 1.0) < 1e-6


def test_each_test_gets_its_own_database(pg_server, pg_dsn):
    other = pg_server.create_database("hermit_other_db")
    assert other != pg_dsn
    with psycopg.connect(pg_dsn) as a, psycopg.connect(other) as b:
        a.execute("create table only_here(x int)")
        a.commit()
        assert b.execute("select to_regclass('only_here')").fetchone()[0] is None
