"""One PostgreSQL database shared by two people (each may create schemas in it). Hermit reads a `meta` table in
schemas besides its live one: each leftover of a killed rebuild (`hermit_main_rb…`, at every start of the memory
service), and, before it checks who a schema belongs to, the schema `hermit memory claim` and `hermit memory
migrate --from postgres` name. Bob made such a schema with a `meta` that is a VIEW calling a function of his.
Before: the read ran his function with Alice's privileges — every chunk of hers (owner-only notes included)
copied into his table (1 of 1 here), at every start of her gateway — and her start then failed ("must be owner
of schema"), memory off until Bob's schema went. Now only schemas, and `meta` tables, of the role Hermit connects
as are read: Bob's leftover is passed over, and a claim or a migration of his schema is refused, naming it."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from hermit.config.memory_search import PostgresStoreConfig
from hermit.errors import StoreError
from hermit.memory.index.chunking import Chunk, text_hash
from hermit.memory.store.postgres.claim import StateId, claim, doctor_problem
from hermit.memory.store.postgres.store import PgStore
from pgroles import two_roles

SECRET = "- Alice's owner-only note: the safe code is 4711"
_ROLES = itertools.count(1)


@pytest.fixture
def roles(pg_dsn: str) -> Iterator[tuple[str, str]]:
    n = next(_ROLES)
    alice, bob = f"meta_alice_{n}", f"meta_bob_{n}"
    with two_roles(pg_dsn, alice, bob) as dsns:
        yield dsns


def _alice_with_a_note(alice: str, tmp_path: Path) -> StateId:
    state = StateId.of(tmp_path / "alice-home")
    store = PgStore(alice, "hermit_main", PostgresStoreConfig(), state=state)
    store.replace_file(path="memory/2026-12-01.md", source="memory", file_hash=text_hash(SECRET), mtime=1, size=1,
                       chunks=[Chunk(1, 1, SECRET, text_hash(SECRET))], vectors=None, model="none")
    store.close()
    return state


def _plant(bob: str, schema: str) -> None:
    """Bob's schema `schema` whose `meta` is a view over his function, which copies Alice's chunks into his table."""
    with psycopg.connect(bob, autocommit=True) as b:
        b.execute("create schema loot")
        b.execute("grant usage on schema loot to public")
        b.execute("create table loot.t(x text)")
        b.execute("grant insert on loot.t to public")
        b.execute("set check_function_bodies = off")
        b.execute("create function loot.steal() returns text language sql volatile as"
                  " $$ insert into loot.t select text from hermit_main.chunks; select 'hermit_main' $$")
        b.execute("grant execute on function loot.steal() to public")
        b.execute(f"create schema {schema}")
        b.execute(f"grant usage on schema {schema} to public")
        b.execute(f"create view {schema}.meta as select k as key, loot.steal() as value"
                  " from (values ('staging_of'), ('claimed_by')) v(k)")
        b.execute(f"grant select on {schema}.meta to public")


def _loot(bob: str) -> list[str]:
    with psycopg.connect(bob, autocommit=True) as b:
        return [str(r[0]) for r in b.execute("select x from loot.t")]


def test_a_leftover_named_schema_of_another_role_is_never_read(roles: tuple[str, str], tmp_path: Path) -> None:
    alice, bob = roles
    state = _alice_with_a_note(alice, tmp_path)
    _plant(bob, "hermit_main_rb0123abcd")
    store = PgStore(alice, "hermit_main", PostgresStoreConfig(), state=state)
    try:
        assert store.clean_stale_rebuilds() == 0  # what MemoryService does at every start
        assert store.chunk_count() == 1
    finally:
        store.close()
    assert _loot(bob) == [], "Bob's view ran in Alice's cleanup of stale rebuilds"
    with psycopg.connect(bob, autocommit=True) as b:
        assert b.execute("select to_regclass('hermit_main_rb0123abcd.meta') is not null").fetchone()[0]


@pytest.mark.parametrize("how", ["migrate-from", "claim", "doctor"])
def test_another_roles_schema_is_not_read_to_check_its_claim(roles: tuple[str, str], tmp_path: Path,
                                                             how: str) -> None:
    alice, bob = roles
    _alice_with_a_note(alice, tmp_path)  # her agent `main`; Bob squats the schema of her agent `work`
    _plant(bob, "hermit_work")
    state = StateId.of(tmp_path / "alice-home")
    said = ""
    conn = PgStore(alice, "hermit_main", PostgresStoreConfig(), state=state).conn
    try:
        if how == "migrate-from":  # `hermit memory migrate --to sqlite` reads the postgres index it moves from
            PgStore(alice, "hermit_work", PostgresStoreConfig(), create=False, state=state).close()
        elif how == "claim":
            claim(conn, "hermit_work", '"hermit_work"', state, only=False)
        else:
            said = doctor_problem(conn, "hermit_work", state) or ""
    except (StoreError, psycopg.Error) as e:
        said = str(e)
    finally:
        conn.close()
    assert _loot(bob) == [], f"Bob's view ran in Alice's {how}"
    assert re.search(r"belongs to (another role|the role)", said), said


def test_doctor_never_reads_another_roles_schema_under_an_agents_name(roles: tuple[str, str], tmp_path: Path) -> None:
    """`hermit doctor` read `<schema>.migrations` (and counted `chunks_vec`) before asking whose the schema is: Bob's
    `hermit_work` with a view for `migrations` ran his function as Alice. Now the schema and everything in it must be
    her role's first; Bob's is reported as his."""
    from hermit.cli.pg_doctor import connect, schema_checks

    alice, bob = roles
    state = _alice_with_a_note(alice, tmp_path)
    _plant(bob, "hermit_work")
    with psycopg.connect(bob, autocommit=True) as b:
        b.execute("create view hermit_work.migrations as select 5 as version, loot.steal() as applied_at")
        b.execute("grant select on hermit_work.migrations to public")
    conn = connect(alice)
    try:
        checks = schema_checks([("main", "hermit_main", 10_000), ("work", "hermit_work", 10_000)], state)(conn)
    finally:
        conn.close()
    assert _loot(bob) == [], "Bob's view ran in Alice's doctor"
    main, work = checks
    assert main.ok, main
    assert not work.ok and "belongs to the role" in work.detail, work
