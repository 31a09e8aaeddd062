"""Hermit gives the PostgreSQL password only to a server it may trust, and never in cleartext unless told to.

Another user can listen where the owner's database should be (its TCP port on 127.0.0.1 or ::1, or a Unix
socket in a directory others can write) while the database is down, ask for the password in cleartext and
answer searches itself. Hermit checks who holds the other end of libpq's socket before libpq answers
anything (hermit.memory.store.postgres.guard) and adds require_auth=!password to a DSN that does not choose.
The squatters here are real processes run as other uids (the suite runs as root in CI) speaking enough of
the PostgreSQL protocol to ask for a cleartext password; the real server is the suite's embedded PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import write
from hermit.cli.pg_doctor import probe
from hermit.errors import StoreError
from hermit.memory.store.postgres.schema import connect
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from prochelpers import PROC_TIMEOUT, ServerAs, fake_embeddings_config, shared_dir


def guard() -> Any:
    """The guard module, imported per test: on a Hermit without it each test fails on its own."""
    from hermit.memory.store.postgres import guard as module

    return module


OTHER_USER = 54321  # a regular login user's uid (UID_MIN 1000 … UID_MAX 60000)
NOBODY = 65534
PASSWORD = "S3cret-PG-pass"
ENV = "HERMIT_PG_DSN"

# A PostgreSQL impostor: says no to SSL/GSS encryption, answers a startup packet with "send the password in
# cleartext", keeps every byte it receives and reports them (and any password message) when stdin closes.
FAKE_PG = r"""
import json, os, select, socket, struct, sys
where, port = sys.argv[1], int(sys.argv[2])
if where.startswith("/"):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = os.path.join(where, f".s.PGSQL.{port}")
    srv.bind(path); os.chmod(path, 0o777)
else:
    srv = socket.socket(socket.AF_INET6 if ":" in where else socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((where, port)); port = srv.getsockname()[1]
srv.listen(16)
print(port, flush=True)
accepted, received, passwords = 0, b"", []

def read(c, n):
    global received
    data = b""
    while len(data) < n:
        chunk = c.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk; received += chunk
    return data

def serve(c):
    c.settimeout(10)
    while True:
        body = read(c, struct.unpack("!I", read(c, 4))[0] - 4)
        if struct.unpack("!I", body[:4])[0] in (80877103, 80877104):  # SSLRequest, GSSENCRequest
            c.sendall(b"N"); continue
        break
    c.sendall(b"R" + struct.pack("!II", 8, 3))  # AuthenticationCleartextPassword
    kind = read(c, 1)
    msg = read(c, struct.unpack("!I", read(c, 4))[0] - 4)
    if kind == b"p":
        passwords.append(msg.rstrip(b"\0").decode("latin-1"))
    c.sendall(b"E" + struct.pack("!I", 11) + b"SFATAL\0\0")

while True:
    ready = select.select([srv, 0], [], [])[0]
    if 0 in ready and not os.read(0, 100):
        break
    if srv in ready:
        c = srv.accept()[0]; accepted += 1
        try:
            serve(c)
        except (EOFError, OSError, struct.error):
            pass
        c.close()
print(json.dumps({"accepted": accepted, "received": received.decode("latin-1"), "passwords": passwords}),
      flush=True)
"""


class FakePg(ServerAs):
    """FAKE_PG as `uid` (None: this process's own) on `where` (an IP address or a socket directory)."""

    def __init__(self, uid: int | None, where: str, port: int = 0) -> None:
        super().__init__(uid, FAKE_PG, where, str(port))
        host = f"[{where}]" if ":" in where else where
        self.dsn = (f"postgresql://hermit:{PASSWORD}@/hermit?host={where}&port={self.port}" if where.startswith("/")
                    else f"postgresql://hermit:{PASSWORD}@{host}:{self.port}/hermit")

    def finish(self) -> dict[str, Any]:
        return dict(super().finish())


def fake_pg(uid: int | None, where: str = "127.0.0.1", port: int = 0) -> FakePg:
    return FakePg(uid, where, port)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A socket directory any user can write (as /tmp is): pytest's tmp_path is root's alone."""
    with shared_dir("hermit-pgsock-") as path:
        yield path


# -- another user's listener ---------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
@pytest.mark.parametrize("uid", [OTHER_USER, NOBODY])
def test_a_server_of_another_user_on_loopback_gets_nothing(uid: int, host: str) -> None:
    with fake_pg(uid, host) as fake:
        with pytest.raises(StoreError) as e:
            connect(fake.dsn, timeout_s=5, dsn_env=ENV)
        got = fake.finish()
    assert got["accepted"] >= 1, "the squatter was never reached: the test proves nothing"
    assert got["received"] == "" and got["passwords"] == [], got  # not even the startup packet
    assert isinstance(e.value, guard().HolderRefused)
    msg = str(e.value)
    assert f"port {fake.port} is held by another user (uid {uid}" in msg and f"${ENV}" in msg
    assert "sent it no password" in msg and "system account" in e.value.hint
    assert PASSWORD not in msg


@pytest.mark.parametrize("uid", [OTHER_USER, NOBODY])
def test_a_socket_of_another_user_in_a_shared_directory_gets_no_password(uid: int, shared: Path) -> None:
    with fake_pg(uid, str(shared), 5432) as fake:
        with pytest.raises(StoreError) as e:
            connect(fake.dsn, timeout_s=5, dsn_env=ENV)
        got = fake.finish()
    assert got["accepted"] >= 1 and got["passwords"] == [] and PASSWORD not in got["received"], got
    assert isinstance(e.value, guard().HolderRefused)
    msg = str(e.value)
    assert f"{shared}/.s.PGSQL.5432" in msg and f"(uid {uid}, " in msg and "system account" in e.value.hint
    assert ("requirepeer=nobody" in e.value.hint) == (uid == NOBODY)  # a uid with no name cannot be named


def test_requirepeer_trusts_that_user_on_purpose_and_cleartext_is_still_refused(shared: Path) -> None:
    """The escape the hint names: the DSN's requirepeer=nobody lets nobody's socket through the holder check
    (libpq checks that peer itself); this impostor then asks for cleartext, which require_auth refuses."""
    with fake_pg(NOBODY, str(shared), 5432) as fake:
        with pytest.raises(StoreError) as e:
            connect(fake.dsn + "&requirepeer=nobody", timeout_s=5, dsn_env=ENV)
        got = fake.finish()
    assert not isinstance(e.value, guard().HolderRefused)
    assert "cleartext" in str(e.value) and "scram" in e.value.hint
    assert "user\0hermit" in got["received"] and got["passwords"] == [], got


def test_hermit_memory_index_refuses_the_squatter_and_says_what_to_do(tmp_path: Path) -> None:
    """The audit's reproducer, end to end: `hermit memory index` with the DSN on a port another user holds."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n- the lawyer meets us on Tuesday\n")
    home = tmp_path / "home"
    with FakeEmbeddingServer() as srv, fake_pg(OTHER_USER) as fake:
        config = fake_embeddings_config(srv, "      store: {backend: postgres}\n")
        write(home / "hermit.yaml", config.replace("  defaults:\n", f"  defaults:\n    workspace: {ws}\n", 1))
        env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE", ENV: fake.dsn}
        done = subprocess.run([sys.executable, "-m", "hermit.cli.main", "memory", "index"], env=env,
                              capture_output=True, text=True, timeout=PROC_TIMEOUT)
        got = fake.finish()
    assert done.returncode != 0, done.stdout
    assert got["received"] == "" and got["passwords"] == [], got
    assert f"uid {OTHER_USER}" in done.stderr and f"port {fake.port}" in done.stderr, done.stderr
    assert "hint:" in done.stderr and PASSWORD not in done.stderr + done.stdout


def test_doctor_names_the_holder_and_sends_it_nothing() -> None:
    with fake_pg(NOBODY) as fake:
        checks = probe(ENV, {ENV: fake.dsn})
        got = fake.finish()
    assert [c.status for c in checks] == ["ok", "fail"], checks
    assert f"uid {NOBODY}" in checks[1].detail and f"port {fake.port}" in checks[1].detail
    assert "system account" in checks[1].fix
    assert got["received"] == "" and PASSWORD not in repr(checks)


# -- a server that asks for the password in cleartext ----------------------------------------------------------


def test_an_own_server_asking_for_cleartext_gets_no_password_unless_the_dsn_allows_it() -> None:
    with fake_pg(None) as fake:
        with pytest.raises(StoreError) as e:
            connect(fake.dsn, timeout_s=5, dsn_env=ENV)
        checks = probe(ENV, {ENV: fake.dsn})
        # The DSN's own choice stands, and shows that this impostor does record a password it is sent.
        with contextlib.suppress(StoreError):
            connect(fake.dsn + "?require_auth=password", timeout_s=5, dsn_env=ENV)
        got = fake.finish()
    assert "server requested a cleartext password" in str(e.value) and "scram-sha-256" in e.value.hint
    assert checks[1].status == "fail" and "scram-sha-256" in checks[1].fix
    assert got["accepted"] == 3 and got["passwords"] == [PASSWORD], got
    assert PASSWORD not in str(e.value) + repr(checks)


def test_the_default_require_auth_and_when_the_dsn_or_libpq_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    base = "postgresql://u:p@db.example:5432/d"
    assert guard().auth_options(base) == {"require_auth": "!password"}
    assert guard().auth_options(base + "?require_auth=scram-sha-256") == {}
    assert guard().auth_options(base + "?sslmode=verify-full") == {}
    assert guard().auth_options(base + "?sslmode=verify-ca") == {}
    assert guard().auth_options(base + "?sslmode=require") == {"require_auth": "!password"}  # no proof of the server
    monkeypatch.setenv("PGREQUIREAUTH", "password")
    assert guard().auth_options(base) == {}
    monkeypatch.delenv("PGREQUIREAUTH")
    monkeypatch.setenv("PGSSLMODE", "verify-full")
    assert guard().auth_options(base) == {}


# -- the real server ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_roles(pg_server: Any) -> dict[str, str]:
    """Two login roles on the suite's server: hermit_clear (pg_hba `password`: the server asks for cleartext)
    and hermit_scram (`scram-sha-256`); their DSN templates by name."""
    hba = pg_server.pgdata / "pg_hba.conf"
    rules = ("host all hermit_clear 127.0.0.1/32 password\nhost all hermit_scram 127.0.0.1/32 scram-sha-256\n")
    text = hba.read_text()
    if rules not in text:
        with hba.open("w") as f:  # in place: the file stays the server user's
            f.write(rules + text)
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        for role in ("hermit_clear", "hermit_scram"):
            if not conn.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone():
                conn.execute(f"create role {role} login password '{PASSWORD}'")
        conn.execute("select pg_reload_conf()")
    db = pg_server.create_database("hermit_auth_roles")  # with pgvector, which these roles may not create
    dsns = {r: db.replace("postgresql://postgres@", f"postgresql://{r}:{PASSWORD}@")
            for r in ("hermit_clear", "hermit_scram")}
    deadline = time.monotonic() + 60
    while True:  # the reload is a signal: wait until the scram rule is what the server applies
        try:
            with psycopg.connect(dsns["hermit_scram"] + "?require_auth=scram-sha-256", connect_timeout=5):
                break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return dsns


def test_the_real_server_on_scram_and_on_trust_connects_with_the_default(auth_roles: dict[str, str],
                                                                          pg_dsn: str) -> None:
    assert guard().auth_options(auth_roles["hermit_scram"]) == {"require_auth": "!password"}
    with connect(auth_roles["hermit_scram"], timeout_s=10, dsn_env=ENV) as conn:
        assert conn.execute("select current_user").fetchone()[0] == "hermit_scram"
    with connect(pg_dsn, timeout_s=10, dsn_env=ENV) as conn:  # the suite's server: trust, run as a system account
        assert conn.execute("select current_user").fetchone()[0] == "postgres"


def test_the_real_server_asking_for_cleartext_is_refused_unless_the_dsn_says_so(auth_roles: dict[str, str]) -> None:
    with pytest.raises(StoreError) as e:
        connect(auth_roles["hermit_clear"], timeout_s=10, dsn_env=ENV)
    assert "cleartext" in str(e.value) and "require_auth=password" in e.value.hint and PASSWORD not in str(e.value)
    with connect(auth_roles["hermit_clear"] + "?require_auth=password", timeout_s=10, dsn_env=ENV) as conn:
        assert conn.execute("select current_user").fetchone()[0] == "hermit_clear"


def test_the_real_server_over_its_unix_socket_passes_the_peer_check(pg_server: Any) -> None:
    """SO_PEERCRED names the server's system account: trusted, so the socket in its own directory works."""
    dsn = f"postgresql://postgres@/postgres?host={pg_server.root}&port={pg_server.port}"
    with connect(dsn, timeout_s=10, dsn_env=ENV) as conn:
        assert conn.execute("select current_user").fetchone()[0] == "postgres"
        assert conn.pgconn.host.decode() == str(pg_server.root)
