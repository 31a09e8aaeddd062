"""A rebuild's leftovers on PostgreSQL are dropped by what Hermit marked, not by their name: agent `work`'s
cleanup leaves agent `work_old20240101`'s live index (`hermit_work_old20240101`, named like a leftover of
`hermit_work`) alone, and still drops the staging schema of its own killed rebuild."""

from __future__ import annotations

from pathlib import Path

import psycopg

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.postgres.schema import migrate
from hermit.memory.store.postgres.store import PgStore
from memhelpers import HashEmbedder

SIBLINGS = ("work_old20240101", "work_rb0badcafe")  # valid agent ids whose schemas look like work's leftovers


def _pg(extra: dict[str, object] | None = None) -> MemorySearchConfig:
    return MemorySearchConfig.model_validate({**(extra or {}), "store": {"backend": "postgres",
                                                                         "postgres": {"dsn_env": "TEST_DSN"}}})


def _agent(tmp_path: Path, dsn: str, agent: str, extra: dict[str, object] | None = None) -> MemoryService:
    ws = tmp_path / agent
    if not (ws / "MEMORY.md").exists():
        write(ws / "MEMORY.md", f"# M\n- {agent} keeps the garden fence key under the blue pot\n")
    return MemoryService(MemoryKey(agent, ws), tmp_path / f"{agent}.sqlite", _pg(extra), HashEmbedder(),
                         environ={"TEST_DSN": dsn})


def _schemas(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(str(r[0]) for r in conn.execute("select nspname from pg_namespace where nspname like 'hermit%'"))


def _found(svc: MemoryService) -> list[str]:
    out = svc.search("garden fence key")
    assert "error" not in out, out
    return [r["path"] for r in out["results"]]


def test_another_agents_schema_named_like_a_leftover_survives_opens_syncs_and_rebuilds(tmp_path: Path,
                                                                                       pg_dsn: str) -> None:
    for agent in SIBLINGS:
        sib = _agent(tmp_path, pg_dsn, agent)
        sib.sync()
        sib.close()
    work = _agent(tmp_path, pg_dsn, "work")  # opening it cleans leftovers of hermit_work
    work.sync()
    write(tmp_path / "work" / "memory" / "2026-01-02.md", "- another note\n")
    work.sync()  # an ordinary incremental sync cleans them too
    work.close()
    work = _agent(tmp_path, pg_dsn, "work", {"chunking": {"tokens": 64, "overlap": 0}})
    assert work.sync().rebuilt  # a full rebuild: staging schema, swap, then the next sync's cleanup
    work.sync()
    assert _schemas(pg_dsn) == ["hermit_work", *sorted(f"hermit_{a}" for a in SIBLINGS)]
    for agent in SIBLINGS:
        sib = _agent(tmp_path, pg_dsn, agent)
        assert sib.status()["files"] == 1, agent
        assert _found(sib) == ["MEMORY.md"], agent
        sib.close()
    assert _found(work) == ["MEMORY.md"]
    work.close()


def test_a_killed_rebuilds_marked_leftovers_are_dropped_unmarked_ones_kept(tmp_path: Path, pg_dsn: str) -> None:
    work = _agent(tmp_path, pg_dsn, "work")
    work.sync()
    store = work.store
    assert isinstance(store, PgStore)
    # A rebuild killed after it created its staging schema: the process is gone, its schema stays.
    staging = store.open_rebuild()
    assert isinstance(staging, PgStore)
    staging.close()
    # The old live index of a swap that never dropped it, as the swap marks it before its rename.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, "hermit_work_old0123abcd")
        conn.execute("insert into hermit_work_old0123abcd.meta values ('retired_of', 'hermit_work')")
        # What an older Hermit left (no mark), and a copy marked for another schema: both kept.
        migrate(conn, "hermit_work_rb89abcdef")
        migrate(conn, "hermit_work_old4567cdef")
        conn.execute("insert into hermit_work_old4567cdef.meta values ('retired_of', 'hermit_other')")
        conn.execute("create schema hermit_work_rb00000000")  # no meta table at all
    assert staging.schema in _schemas(pg_dsn)
    assert work.indexer.clean_stale_rebuilds() == 2
    assert _schemas(pg_dsn) == ["hermit_work", "hermit_work_old4567cdef", "hermit_work_rb00000000",
                                "hermit_work_rb89abcdef"]
    assert _found(work) == ["MEMORY.md"]
    work.close()


def test_the_swapped_in_index_carries_no_staging_mark(tmp_path: Path, pg_dsn: str) -> None:
    work = _agent(tmp_path, pg_dsn, "work")
    work.sync()
    work.close()
    work = _agent(tmp_path, pg_dsn, "work", {"chunking": {"tokens": 64, "overlap": 0}})
    assert work.sync().rebuilt
    assert _schemas(pg_dsn) == ["hermit_work"]
    meta = work.store.meta()
    assert "staging_of" not in meta and "retired_of" not in meta
    work.close()
