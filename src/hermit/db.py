"""SQLite connections for Hermit: WAL, busy timeout, sqlite-vec loading, numbered migrations.

The stdlib sqlite3 of many Python builds cannot load extensions, so Hermit uses sqlean.py (a DB-API
drop-in with a modern SQLite and FTS5). sqlite-vec is optional at run time: when it cannot load, the
index stores vectors in a plain BLOB table and vector search scans it in bounded blocks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlean as sqlite3

from hermit.config.paths import ensure_private_dir, private_file, tighten_dir
from hermit.errors import IndexError_

if TYPE_CHECKING:  # sqlean ships no type stubs; it is API-identical to the stdlib module
    from sqlite3 import Connection
else:
    Connection = sqlite3.Connection
DatabaseError = sqlite3.DatabaseError
OperationalError = sqlite3.OperationalError

BUSY_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class VecStatus:
    available: bool
    version: str | None
    error: str | None


def load_sqlite_vec(conn: Connection) -> VecStatus:
    """Try to load sqlite-vec into `conn`; never raises (the caller degrades and reports why)."""
    try:
        import sqlite_vec
    except ImportError as e:
        return VecStatus(False, None, f"the sqlite-vec package is not installed ({e})")
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        (version,) = conn.execute("select vec_version()").fetchone()
        return VecStatus(True, str(version), None)
    except (AttributeError, sqlite3.Error, OSError) as e:
        return VecStatus(False, None, f"sqlite-vec could not be loaded: {e}")


def connect_memory() -> Connection:
    """A private in-memory database (same SQLite build as the index, so the same FTS5 tokenizers)."""
    conn: Connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    return conn


def connect(path: Path | str, *, readonly: bool = False, load_vec: bool = True) -> tuple[Connection, VecStatus]:
    """Open `path` in WAL mode with a busy timeout; returns the connection and sqlite-vec status."""
    try:
        if path != ":memory:":
            _make_private(Path(path), readonly)
        uri = f"file:{path}?mode=ro" if readonly else str(path)
        conn = sqlite3.connect(uri, uri=readonly, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as e:
        raise IndexError_(f"cannot open the memory index {path}: {e}",
                          "check permissions of the state dir, or delete the file to rebuild it") from e
    try:
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
        if not readonly:
            mode = conn.execute("pragma journal_mode = wal").fetchone()[0]
            if str(mode).lower() != "wal" and path != ":memory:":
                raise IndexError_(f"{path}: could not switch to WAL mode (got {mode})",
                                  "put the state dir on a local filesystem")
            conn.execute("pragma synchronous = normal")
    except sqlite3.DatabaseError as e:
        conn.close()
        if "readonly" in str(e).lower() or not os.access(Path(path).parent, os.W_OK):
            # A read-only directory or filesystem: the index is fine, so never advise deleting it.
            raise IndexError_(f"cannot write the memory index {path}: its directory is read-only ({e})",
                              "make the state dir writable; the index itself is fine, do not delete it") from e
        raise IndexError_(f"{path} is not a usable SQLite database: {e}",
                          "it is derived data: delete it and run `hermit memory index --force`") from e
    vec = load_sqlite_vec(conn) if load_vec else VecStatus(False, None, "not requested")
    return conn, vec


def _make_private(path: Path, readonly: bool) -> None:
    """The index holds MEMORY.md's text: its dir is 0700 and the files 0600, however they came to be.
    SQLite gives its -wal/-shm files the database file's mode, so creating that file 0600 first covers them."""
    ensure_private_dir(path.parent)
    if readonly:
        return
    try:
        tighten_dir(path.parent)
        private_file(path)
        for extra in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if extra.exists():
                private_file(extra)
    except OSError:
        pass  # not ours to change (or a read-only state dir): opening it below reports the real problem


Migration = Callable[[Connection], None]


def migrate(conn: Connection, migrations: Sequence[Migration]) -> int:
    """Apply numbered migrations (index+1 = user_version) in one transaction each; returns the version."""
    (version,) = conn.execute("pragma user_version").fetchone()
    if version > len(migrations):
        raise IndexError_(
            f"the index was written by a newer Hermit (schema {version} > {len(migrations)})",
            "upgrade Hermit, or delete the index file and re-run `hermit memory index`",
        )
    for n in range(version, len(migrations)):
        with transaction(conn):
            migrations[n](conn)
            conn.execute(f"pragma user_version = {n + 1}")
    return len(migrations)


class transaction:  # noqa: N801 - used like a function: `with transaction(conn):`
    """BEGIN IMMEDIATE … COMMIT, rolling back on any exception (the connection is in autocommit mode)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __enter__(self) -> Connection:
        self.conn.execute("begin immediate")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.conn.execute("commit")
        else:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("rollback")
