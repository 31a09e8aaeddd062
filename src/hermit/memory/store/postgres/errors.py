"""PostgreSQL failures as StoreError: the `guarded` decorator each public PgStore method carries."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from hermit.errors import StoreError
from hermit.memory.store.postgres.schema import mask_dsn, scrub

P = ParamSpec("P")
R = TypeVar("R")


class _HasDsn(Protocol):
    _dsn: str


S = TypeVar("S", bound=_HasDsn)


def failure(dsn: str, e: Exception) -> StoreError:
    """A server failure as a StoreError naming host and database only, never the DSN's secrets."""
    first = (str(e).strip().splitlines() or ["unknown error"])[0]
    return StoreError(f"PostgreSQL at {mask_dsn(dsn)} failed: {scrub(first, dsn)}",
                      "check that the server is up and reachable; the next call reconnects")


def guarded(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """A psycopg error raised inside the store call becomes a StoreError (a StoreError passes through)."""

    @functools.wraps(fn)
    def call(self: S, /, *args: P.args, **kw: P.kwargs) -> R:
        import psycopg

        try:
            return fn(self, *args, **kw)
        except psycopg.Error as e:
            raise failure(self._dsn, e) from None

    return call
