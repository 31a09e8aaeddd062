"""SQLite connections for Hermit: WAL, busy timeout, sqlite-vec loading, numbered migrations.

The stdlib sqlite3 of many Python builds cannot load extensions, so Hermit uses sqlean.py (a DB-API
drop-in with a modern SQLite and FTS5). sqlite-vec is optional at run time: when it cannot load, the
index stores vectors in a plain BLOB table and vector search scans it in bounded blocks.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlean as sqlite3

from hermit.config.paths import (
    NotOwnFile,
    ensure_private_dir,
    not_own_opened,
    private_file,
    tighten_dir,
    unsafe_folder,
)
from hermit.errors import HermitError, IndexError_, disk_full

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


def _vec_extension() -> str | None:
    """The sqlite-vec extension's file, as sqlite_vec.loadable_path() names it, found without importing the
    package: its __init__ imports numpy.typing (~0.1 s of CPU) for a helper Hermit does not use. None when the
    package is not installed."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.normpath(os.path.join(next(iter(spec.submodule_search_locations)), "vec0"))


def load_sqlite_vec(conn: Connection) -> VecStatus:
    """Try to load sqlite-vec into `conn`; never raises (the caller degrades and reports why)."""
    extension = _vec_extension()
    if extension is None:
        return VecStatus(False, None, "the sqlite-vec package is not installed")
    try:
        conn.enable_load_extension(True)
        conn.load_extension(extension)
        conn.enable_load_extension(False)
        (version,) = conn.execute("select vec_version()").fetchone()
        return VecStatus(True, str(version), None)
    except (AttributeError, sqlite3.Error, OSError) as e:
        return VecStatus(False, None, f"sqlite-vec could not be loaded: {e}")


def connect_memory() -> Connection:
    """A private in-memory database (same SQLite build as the index, so the same FTS5 tokenizers)."""
    conn: Connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("pragma temp_store = memory")  # its sorts never spill note text to /var/tmp (connect)
    return conn


def connect(path: Path | str, *, readonly: bool = False, load_vec: bool = True,
            own_dir: bool = True) -> tuple[Connection, VecStatus]:
    """Open `path` in WAL mode with a busy timeout; returns the connection and sqlite-vec status.
    `own_dir`: the directory is Hermit's (the state layout's index dir), so its mode is tightened too; a
    directory the user named (memory_search.store.path) keeps its mode, the files are still 0600."""
    try:
        if path != ":memory:":
            _make_private(Path(path), readonly, own_dir)
        uri = f"file:{path}?mode=ro" if readonly else str(path)
        conn = sqlite3.connect(uri, uri=readonly, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as e:
        raise IndexError_(f"cannot open the memory index {path}: {e}",
                          "check permissions of the state dir, or delete the file to rebuild it") from e
    try:
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
        # A sort or temporary table that outgrows the page cache spills to SQLite's own temp file
        # ($SQLITE_TMPDIR, /var/tmp, /tmp): note text outside the state dir, its freed blocks keeping it.
        conn.execute("pragma temp_store = memory")
        if not readonly:
            mode = conn.execute("pragma journal_mode = wal").fetchone()[0]
            if str(mode).lower() != "wal" and path != ":memory:":
                raise IndexError_(f"{path}: could not switch to WAL mode (got {mode})",
                                  "put the state dir on a local filesystem")
            conn.execute("pragma synchronous = normal")
    except sqlite3.DatabaseError as e:
        conn.close()
        if not is_disk_full(e, path) and ("readonly" in str(e).lower() or not os.access(Path(path).parent, os.W_OK)):
            # A read-only directory or filesystem: the index is fine, so never advise deleting it.
            raise IndexError_(f"cannot write the memory index {path}: its directory is read-only ({e})",
                              "make the state dir writable; the index itself is fine, do not delete it") from e
        raise index_error(e, path) from e
    vec = load_sqlite_vec(conn) if load_vec else VecStatus(False, None, "not requested")
    return conn, vec


# SQLite's primary result codes that say what went wrong with the file (sqlite3.h).
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 10, 11, 13, 26
# An I/O error with less than this free is a full disk: SQLite reports a failed -shm or -wal extension as
# SQLITE_IOERR ("disk I/O error"), not SQLITE_FULL, and a write that needs a few pages fails before zero.
NEARLY_FULL_BYTES = 16 * 1024 * 1024


def _free_bytes(path: Path | str) -> int | None:
    for p in (Path(path), *Path(path).parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def is_disk_full(e: BaseException, path: Path | str) -> bool:
    """Whether `e`, raised reading or writing `path`, means the filesystem holding it is full."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(e, sqlite3.Error):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(e).lower()
    if primary == SQLITE_FULL or "database or disk is full" in text:
        return True
    if primary == SQLITE_IOERR or "disk i/o error" in text:
        free = _free_bytes(path)
        return free is not None and free < NEARLY_FULL_BYTES
    return False


def is_corrupt(e: BaseException) -> bool:
    """Whether SQLite says the file itself is damaged or is not a database (the one case to rebuild)."""
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return True
    text = str(e).lower()
    return "malformed" in text or "not a database" in text


def index_error(e: BaseException, path: Path | str) -> HermitError:
    """The clear error for a failed read or write of the index at `path`. Deleting the index is advised only
    when SQLite says the file is damaged: on a full disk or a failing device it would lose the embeddings
    for nothing (and rebuilding needs more space than keeping)."""
    if is_disk_full(e, path):
        return disk_full(path, "the memory index")
    if is_corrupt(e):
        return IndexError_(f"{path} is not a usable SQLite database: {e}",
                           "it is derived data: delete it and run `hermit memory index --force`")
    return IndexError_(f"cannot use the memory index {path}: {e}",
                       "check the disk holding it (free space, `dmesg` for I/O errors) and try again; the "
                       "index is probably fine, so do not delete it for this")


def _make_private(path: Path, readonly: bool, own_dir: bool) -> None:
    """The index holds MEMORY.md's text: its dir is 0700 and the files 0600, however they came to be.
    SQLite gives its -wal/-shm files the database file's mode, so creating that file 0600 first covers them.
    Only a directory Hermit owns is tightened (`own_dir`, and never a shared one: config.paths.tighten_dir)."""
    _own_folder(path)  # before creating anything in it, and again once it exists (made by someone else between)
    ensure_private_dir(path.parent)
    _own_folder(path)
    try:
        if own_dir and not readonly:
            tighten_dir(path.parent)
        for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if readonly:  # judged, never changed
                if os.path.lexists(name) and (bad := not_own_opened(os.lstat(name))) is not None:
                    raise NotOwnFile(name, bad)
            elif name == path or os.path.lexists(name):
                private_file(name)
    except NotOwnFile as e:  # planted before the folder was ours, or a link to somewhere else: never used
        raise IndexError_(f"the memory index file {e.path} {e.why}: Hermit will not write your notes into it",
                          f"remove it (rm {e.path}; `hermit memory index` rebuilds the index)") from e
    except OSError:
        pass  # not ours to change (or a read-only state dir): opening it below reports the real problem


def _own_folder(path: Path) -> None:
    """The index's folder must be the user's (config.paths.unsafe_folder): in a folder another user made first
    they would read the notes written there, or have planted the file."""
    if (found := unsafe_folder(path.parent)) is not None:
        folder, why = found
        where = "in" if folder == path.parent.resolve() else "inside"
        raise IndexError_(f"the memory index {path} is {where} {folder}, which {why}: another user could read or "
                          "swap your notes there", "point memory_search.store.path at a folder of your own (the "
                          "default is the state dir's memory/)")


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
