"""Two ordinary PostgreSQL login roles in the test's database, for tests of one person's Hermit against another's
role sharing the database (each may create schemas there, as its own Hermit needs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg


def as_role(dsn: str, role: str) -> str:
    """The superuser DSN `dsn` with `role` as the user."""
    return dsn.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


@contextlib.contextmanager
def two_roles(pg_dsn: str, alice: str, bob: str) -> Iterator[tuple[str, str]]:
    """Create login roles `alice` and `bob` (no superuser; CREATE and CONNECT on the database), yield their DSNs, and
    drop them and everything they own afterwards."""
    db = pg_dsn.rsplit("/", 1)[1]
    with psycopg.connect(pg_dsn, autocommit=True) as su:
        for r in (alice, bob):
            su.execute(f"create role {r} login nosuperuser")
            su.execute(f'grant create, connect on database "{db}" to {r}')
    try:
        yield as_role(pg_dsn, alice), as_role(pg_dsn, bob)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as su:
            for r in (alice, bob):
                su.execute(f"drop owned by {r} cascade")
                su.execute(f"drop role {r}")
