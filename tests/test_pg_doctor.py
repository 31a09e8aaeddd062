"""`hermit doctor` against a real PostgreSQL: DSN variable, reachability, version, pgvector, pg_trgm — never the DSN."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import psycopg
import pytest
import yaml

from hermit.cli.main import main
from hermit.cli.pg_doctor import ServerFacts, extension_check, probe, scrub, version_check
from hermit.memory.store.postgres.schema import MIGRATIONS, mask_dsn

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
    host_port_db = mask_dsn(pg_dsn)
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


def _doctor(home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setenv("HERMIT_HOME", str(home))
    main(["doctor", "--json"])
    out, err = capsys.readouterr()
    checks = {c["name"]: c for c in json.loads(out)}
    return checks["postgres"]


def test_doctor_reports_the_server_and_each_agents_schema(
    tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "workspace" / "memory").mkdir(parents=True)
    (home / "workspace" / "MEMORY.md").write_text("# MEMORY\n\nThe doctor checks the Postgres schema.\n")
    store = {"backend": "postgres", "postgres": {"dsn_env": ENV, "hnsw_threshold": 1}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(
        {"agents": {"defaults": {"memory_search": {"provider": "none", "store": store}}}}))
    monkeypatch.delenv(ENV, raising=False)
    unset = _doctor(home, capsys, monkeypatch)
    assert unset["status"] == "fail" and f"{ENV} is not set" in str(unset["detail"])

    monkeypatch.setenv(ENV, pg_dsn)
    before = _doctor(home, capsys, monkeypatch)
    assert before["status"] == "warn" and "agent main has no index on this server yet" in str(before["detail"])
    assert "PostgreSQL 1" in str(before["detail"]) and "pgvector 0.8" in str(before["detail"])

    assert main(["memory", "index"]) == 0
    capsys.readouterr()
    after = _doctor(home, capsys, monkeypatch)
    assert after["status"] == "ok", after
    assert f"schema hermit_main: agent main: schema v{len(MIGRATIONS)}, GIN keyword index" in str(after["detail"])
    assert pg_dsn not in json.dumps(after)

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # vectors past the threshold, no HNSW index yet
        conn.execute('create table "hermit_main".chunks_vec(id bigint primary key, embedding vector(3))')
        conn.execute('insert into "hermit_main".chunks_vec values (1, \'[1,0,0]\'), (2, \'[0,1,0]\')')
    no_hnsw = _doctor(home, capsys, monkeypatch)
    assert no_hnsw["status"] == "warn" and "2 vectors but no HNSW index (threshold 1)" in str(no_hnsw["detail"])

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute('drop index "hermit_main".chunks_tsv')
    broken = _doctor(home, capsys, monkeypatch)
    assert broken["status"] == "fail" and "GIN on chunks.tsv) is missing" in str(broken["detail"])
    assert "memory index --force" in str(broken["fix"])


def test_doctor_skips_postgres_on_the_sqlite_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump({"agents": {"defaults": {"memory_search": {"provider": "none"}}}}))
    c = _doctor(home, capsys, monkeypatch)
    assert c["status"] == "skip" and "backend: sqlite" in str(c["detail"])
