"""`hermit doctor` against a real PostgreSQL: DSN variable, reachability, version, pgvector, pg_trgm — never the DSN."""

from __future__ import annotations

import socket

import psycopg

from hermit.cli.pg_doctor import ServerFacts, extension_check, probe, scrub, version_check, where

ENV = "HERMIT_TEST_PG_DSN"


def _by_name(checks: list) -> dict[str, object]:
    return {c.name: c for c in checks}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_ready_database_passes_every_check(pg_dsn: str) -> None:
    checks = probe(ENV, {ENV: pg_dsn})
    c = _by_name(checks)
    assert [x.name for x in checks] == ["postgres dsn", "postgres", "pgvector", "pg_trgm"]
    assert all(x.status == "ok" for x in checks), checks
    assert c["postgres"].detail.startswith("PostgreSQL 1")
    assert c["pgvector"].detail.startswith("pgvector 0.8")
    host_port_db = where(pg_dsn)
    assert c["postgres dsn"].detail == f"{ENV} is set ({host_port_db})"
    assert host_port_db.startswith("127.0.0.1:") and "postgres@" not in repr(checks)


def test_unset_variable_is_one_clear_failure() -> None:
    [only] = probe(ENV, {})
    assert only.status == "fail" and ENV in only.detail and f"export {ENV}=" in only.fix


def test_unreachable_port_fails_with_where_and_without_the_secret() -> None:
    dsn = f"postgresql://hermit:s3cret-pw@127.0.0.1:{_free_port()}/memory"
    checks = probe(ENV, {ENV: dsn})
    c = _by_name(checks)
    assert [x.status for x in checks] == ["ok", "fail"]
    assert "cannot reach PostgreSQL at 127.0.0.1:" in c["postgres"].detail and "/memory" in c["postgres"].detail
    assert "listen_addresses" in c["postgres"].fix
    assert "s3cret-pw" not in repr(checks)


def test_database_without_the_extensions_says_how_to_create_them(pg_server) -> None:
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute("create database doctor_bare")
    dsn = pg_server.dsn.rsplit("/", 1)[0] + "/doctor_bare"
    c = _by_name(probe(ENV, {ENV: dsn}))
    assert c["postgres"].status == "ok"
    assert c["pgvector"].status == "fail"
    assert "available on the server" in c["pgvector"].detail and "create extension vector" in c["pgvector"].fix
    assert c["pg_trgm"].status == "fail" and "create extension pg_trgm" in c["pg_trgm"].fix


def test_old_server_and_old_pgvector_are_refused() -> None:
    facts = ServerFacts("14.11", 140011, {"vector": "0.7.4", "pg_trgm": "1.6"}, {"vector": "0.7.4"})
    assert version_check(facts).status == "fail" and "15 or newer" in version_check(facts).detail
    old = extension_check(facts, "vector", (0, 8, 0))
    assert old.status == "fail" and "0.7.4 is too old" in old.detail
    missing = extension_check(ServerFacts("16.2", 160002, {}, {}), "vector", (0, 8, 0))
    assert missing.status == "fail" and "not installed on the server" in missing.detail


def test_scrub_removes_dsn_and_passwords() -> None:
    dsn = "host=db user=u password=hunter2"
    assert scrub(f"failed: {dsn}", dsn) == "failed: <dsn>"
    assert scrub("connection to db password=abc failed", "") == "connection to db password=*** failed"
