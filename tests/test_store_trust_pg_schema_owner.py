"""One PostgreSQL database, two login roles (two people, each with their own Hermit, both allowed to create
schemas in it): agent `main` of either is the schema `hermit_main`. The one that comes second must never
write its notes into the other's schema. Before: Bob made `hermit_main` first (Hermit itself, as Bob, made
the tables) and granted Alice use of it; Alice's Hermit found the schema and its migrations there and wrote
every note — owner-only ones included — into tables Bob owns and reads, and searched rows Bob writes (her
owner's searches return whatever the index holds: Bob's text as her own memory). Now a schema, and every
table in it, must be the connecting role's: anything else is refused, naming the owner."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import psycopg
import pytest

from hermit.config.memory_search import PostgresStoreConfig
from hermit.errors import StoreError
from hermit.memory.index.chunking import Chunk, text_hash
from hermit.memory.store.postgres.store import PgStore
from pgroles import two_roles

SECRET = "- Alice's owner-only note: the safe code is 4711"
_ROLES = itertools.count(1)


@pytest.fixture
def roles(pg_dsn: str) -> Iterator[tuple[str, str]]:
    """DSNs of two ordinary login roles that may create schemas in the test's database."""
    n = next(_ROLES)
    alice, bob = f"trust_alice_{n}", f"trust_bob_{n}"
    with two_roles(pg_dsn, alice, bob) as dsns:
        yield dsns


def _note(store: PgStore, text: str) -> None:
    store.replace_file(path="memory/2026-12-01.md", source="memory", file_hash=text_hash(text), mtime=1, size=1,
                       chunks=[Chunk(1, 1, text, text_hash(text))], vectors=None, model="none")


def test_a_schema_another_role_made_and_shared_is_refused(roles: tuple[str, str]) -> None:
    alice, bob = roles
    squat = PgStore(bob, "hermit_main", PostgresStoreConfig())  # Bob's Hermit, or Bob by hand: same tables
    who = squat.conn.execute("select current_user").fetchone()[0]
    alice_role = alice.split("//", 1)[1].split("@", 1)[0]
    for stmt in ("grant usage, create on schema hermit_main to {a}",
                 "grant all on all tables in schema hermit_main to {a}",
                 "grant all on all sequences in schema hermit_main to {a}"):
        squat.conn.execute(stmt.format(a=alice_role))
    try:
        with pytest.raises(StoreError) as e:
            store = PgStore(alice, "hermit_main", PostgresStoreConfig())
            _note(store, SECRET)  # what happened before: Alice's note in Bob's table
            store.close()
        assert who in e.value.message and "hermit_main" in e.value.message, e.value.message
        rows = [r[0] for r in squat.conn.execute("select text from hermit_main.chunks")]
        assert not any("4711" in t for t in rows), rows
    finally:
        squat.close()


def test_a_table_another_role_put_into_ones_own_schema_is_refused(roles: tuple[str, str]) -> None:
    alice, bob = roles
    alice_role = alice.split("//", 1)[1].split("@", 1)[0]
    bob_role = bob.split("//", 1)[1].split("@", 1)[0]
    own = PgStore(alice, "hermit_main", PostgresStoreConfig())
    own.conn.execute(f"grant usage, create on schema hermit_main to {bob_role}")  # a mistake, or an old grant
    own.conn.execute("drop table hermit_main.line_vectors")
    own.close()
    with psycopg.connect(bob, autocommit=True) as b:  # Bob plants a table of his where one of Alice's goes
        b.execute("create table hermit_main.line_vectors(path text not null, line integer not null,"
                  " embedding bytea not null, primary key(path, line))")
        b.execute(f"grant all on hermit_main.line_vectors to {alice_role}")
    with pytest.raises(StoreError) as e:
        PgStore(alice, "hermit_main", PostgresStoreConfig()).close()
    assert "line_vectors" in e.value.message and bob_role in e.value.message, e.value.message


def test_ones_own_schema_opens_again(roles: tuple[str, str]) -> None:
    alice, _ = roles
    store = PgStore(alice, "hermit_main", PostgresStoreConfig())
    _note(store, SECRET)
    store.close()
    again = PgStore(alice, "hermit_main", PostgresStoreConfig())
    assert again.chunk_count() == 1
    again.close()
