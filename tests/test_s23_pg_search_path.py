"""One PostgreSQL database shared by two people, each with their own Hermit (docs/postgres.md: "two people sharing
one database give their Hermits different schema_prefixes"): both roles may create schemas in it. The server's
default search_path is `"$user", public`, so a schema named like Alice's role is searched before pgvector's.
Bob made that schema, granted Alice its use, and put in it an operator `<=>` for two vectors (and, in the second
test, a type `vector` beside it). Before: every search of Alice's Hermit ran Bob's function with Alice's
privileges; it copied every chunk — owner-only notes included — into a table of Bob's (2 of 2 chunks, one
copy per KNN and per rescoring), and its distances decided what her searches returned. Now each store
connection resolves names in pg_catalog only and names pgvector's type, operator and operator class through
the extension's own schema: nothing of Bob's runs."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest

from hermit.config.memory_search import PostgresStoreConfig
from hermit.memory.index.chunking import Chunk, text_hash
from hermit.memory.store.postgres.store import PgStore
from pgroles import two_roles

SECRET = "- Alice's owner-only note: the safe code is 4711"
OTHER = "- Alice's shared note: the plumber comes on Tuesday"
_ROLES = itertools.count(1)


@pytest.fixture
def roles(pg_dsn: str) -> Iterator[tuple[str, str, str]]:
    """DSNs of two ordinary login roles that may create schemas in the test's database, and Alice's role name."""
    n = next(_ROLES)
    alice, bob = f"path_alice_{n}", f"path_bob_{n}"
    with two_roles(pg_dsn, alice, bob) as dsns:
        yield dsns[0], dsns[1], alice


def _plant(bob: str, alice_role: str, *, own_type: bool) -> None:
    """Bob's `"$user"` schema for Alice: an operator <=> whose function copies her chunks into his table (and
    returns the true distance, so nothing looks wrong), optionally over a `vector` type of his own."""
    with psycopg.connect(bob, autocommit=True) as b:
        b.execute(f"create schema {alice_role}")
        b.execute(f"grant usage on schema {alice_role} to {alice_role}")
        b.execute("create schema loot")
        b.execute(f"grant usage on schema loot to {alice_role}")
        b.execute("create table loot.t(x text)")
        b.execute(f"grant insert on loot.t to {alice_role}")
        b.execute("set check_function_bodies = off")  # her tables do not exist yet
        right = "public.vector"
        if own_type:
            b.execute(f"create domain {alice_role}.vector as public.vector")
            right = f"{alice_role}.vector"
        b.execute(f"create function {alice_role}.steal(a public.vector, b {right}) returns float8 language sql volatile"
                  " as $$ insert into loot.t select text from hermit_main.chunks;"
                  " select public.cosine_distance(a, b::public.vector) $$")
        b.execute(f"create operator {alice_role}.<=> (leftarg = public.vector, rightarg = {right},"
                  f" function = {alice_role}.steal)")


def _loot(bob: str) -> list[str]:
    with psycopg.connect(bob, autocommit=True) as b:
        return [str(r[0]) for r in b.execute("select x from loot.t")]


def _index(store: PgStore) -> None:
    for i, text in enumerate((SECRET, OTHER)):
        vec = np.zeros((1, 4), dtype=np.float32)
        vec[0, i] = 1.0
        store.replace_file(path=f"memory/2026-12-0{i + 1}.md", source="memory", file_hash=text_hash(text), mtime=1,
                           size=1, chunks=[Chunk(1, 1, text, text_hash(text))], vectors=vec, model="m")


@pytest.mark.parametrize("own_type", [False, True], ids=["operator", "operator-and-type"])
def test_another_roles_user_schema_never_runs_in_a_search(roles: tuple[str, str, str], own_type: bool) -> None:
    alice, bob, alice_role = roles
    _plant(bob, alice_role, own_type=own_type)
    store = PgStore(alice, "hermit_main", PostgresStoreConfig(hnsw_threshold=1))
    try:
        _index(store)
        q = np.array([1.0, 0.1, 0.0, 0.0], dtype=np.float32)
        q /= np.linalg.norm(q)
        exact = store.vec_knn(q, 2)
        scores = store.vec_scores(q, [i for i, _ in exact])
        with store.reading():  # a search's view: the KNN with its rows
            in_view = store.vec_knn(q, 2)
        store.optimize()  # the HNSW index, over pgvector's operator class
        assert store.has_hnsw()
        approx = store.vec_knn(q, 2)
        rows = store.chunk_rows([i for i, _ in exact])
    finally:
        store.close()
    assert _loot(bob) == [], "Bob's operator ran in Alice's searches"
    assert [rows[i].text for i, _ in exact] == [SECRET, OTHER]
    assert exact == in_view == approx
    assert scores[exact[0][0]] == pytest.approx(float(q[0]), abs=1e-6)


def test_the_store_still_searches_with_pgvector_elsewhere_than_public(pg_dsn: str) -> None:
    """An extension installed in a schema of its own (`create extension vector schema ext`) is found by name."""
    with psycopg.connect(pg_dsn, autocommit=True) as su:
        su.execute("drop extension if exists vector cascade")
        su.execute("create schema ext")
        su.execute("create extension vector schema ext")
    store = PgStore(pg_dsn, "hermit_main", PostgresStoreConfig(hnsw_threshold=1))
    try:
        _index(store)
        store.optimize()
        q = np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32)
        got = store.vec_knn(q, 1)
        assert store.chunk_rows([got[0][0]])[got[0][0]].text == OTHER
        assert store.v == '"ext"'
    finally:
        store.close()
