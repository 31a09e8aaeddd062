"""The one way Hermit opens a PostgreSQL connection: only to a server it may trust with the password.

Any local user may listen on a free port, and on a Unix socket in a directory others can write, so while
the owner's PostgreSQL is down another user's program can sit where the DSN points, ask for the password
in cleartext (libpq sends it when asked) and answer searches with text of its choosing. Two defences:

- Who holds the other end. psycopg's connect runs libpq's non-blocking connect as a generator that
  yields each time libpq waits on its socket; `GuardedConnection` checks that socket every time before
  libpq goes on. libpq answers the server (the password included) only inside those steps, so the check
  comes before any authentication. A TCP peer on this machine is looked up in the kernel's socket table
  (`hermit.models.loopback`, the check model endpoints use: own uid, root and system accounts pass); a
  Unix-socket peer by SO_PEERCRED, the uid of the process that listens there, whoever owns the socket
  file or its directory. Another uid: the socket is shut and `HolderRefused` names the port or socket,
  the uid and what to do. Over TCP nothing has been sent; over a Unix socket libpq may have sent its
  startup packet (user and database names, no password) when the connect completed at once. A DSN that
  names `requirepeer` for a Unix socket has libpq itself refuse any other peer, so the owner can trust
  one other user's server on purpose; no such setting exists for TCP (run the server as a system account).
  A host on another machine is not looked up (not Linux, or no /proc/net: no TCP check either).
- How the password travels. Unless the DSN names `require_auth` (or libpq's PGREQUIREAUTH does) or
  verifies the server's certificate (`sslmode=verify-ca|verify-full`), `require_auth=!password` is added:
  libpq then refuses a server asking for the cleartext password instead of sending it, while trust,
  SCRAM, md5, GSS and certificates keep working. Servers on ldap/pam/radius auth ask for cleartext: their
  DSN says `require_auth=password` together with TLS. libpq older than 16 has no require_auth: nothing is
  added (psycopg[binary] ships a newer one).

psycopg is imported lazily: only a postgres store and `hermit doctor` need it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import struct
from collections.abc import Generator
from typing import Any

from hermit.errors import StoreError
from hermit.models.loopback import foreign_holder, trusted_uid

# Cleartext refused, everything else allowed; see the module docstring.
DEFAULT_REQUIRE_AUTH = "!password"
VERIFYING_SSLMODES = frozenset({"verify-ca", "verify-full"})
REQUIRE_AUTH_LIBPQ = 160000

HOLDER_HINT = ("start PostgreSQL (it is probably not running) as yourself, as root or as a system account "
               "(distribution packages run it as the user `postgres`); if another user's program holds it, "
               "stop it or ask an administrator to. Hermit does not send a password to a server run by "
               "another login user")
CLEARTEXT_HINT = ("the server asked for the password in cleartext, which Hermit refuses unless the DSN says so "
                  "(a program posing as the server would get it): switch the server to scram-sha-256 "
                  "(password_encryption = 'scram-sha-256', set the password again, pg_hba.conf method "
                  "scram-sha-256), or add sslmode=verify-full to the DSN, or, for ldap/pam auth over TLS, "
                  "require_auth=password")


class HolderRefused(StoreError):
    """The socket where the DSN points is held by another login user: Hermit sent it no password."""


def _user(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "no user name"


def _unix_peer(sock: socket.socket) -> tuple[int, int] | None:
    """(pid, uid) of the process listening at the other end of a Unix socket, None if unknown."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None  # not Linux: no peer credentials this way (degraded mode, the docs say so)
    try:
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
    except OSError:
        return None
    return pid, uid


def refusal(sock: socket.socket, trust_unix_peer: bool = False) -> HolderRefused | None:
    """Why connected `sock` must not be used (another user holds its other end), or None; None too while it
    is not connected yet (the check runs again at libpq's next step)."""
    try:
        peer = sock.getpeername()
    except OSError:
        return None
    me = f"not by you (uid {os.geteuid()}), root or a system account; Hermit sent it no password"
    if sock.family == socket.AF_UNIX:
        if trust_unix_peer:
            return None  # the DSN's requirepeer: libpq checks the peer's user itself
        cred = _unix_peer(sock)
        if cred is None or trusted_uid(cred[1]):
            return None
        pid, uid = cred
        path = peer.decode(errors="replace") if isinstance(peer, bytes) else str(peer)
        name = _user(uid)
        trust = (f"; to trust that user's server on purpose, add requirepeer={name} to the DSN"
                 if name != "no user name" else "")
        return HolderRefused(f"refused to use the PostgreSQL socket {path or '(unnamed)'}: the process listening "
                             f"there (pid {pid}) is run by another user (uid {uid}, {name}), {me}",
                             HOLDER_HINT + trust)
    holder = foreign_holder(sock)
    if holder is None:
        return None
    where = f"[{holder.host}]:{holder.port}" if ":" in holder.host else f"{holder.host}:{holder.port}"
    return HolderRefused(f"refused to use the PostgreSQL server at {where}: port {holder.port} is held by "
                         f"another user (uid {holder.uid}, {holder.user}), {me}", HOLDER_HINT)


def _check_fd(fd: int, trust_unix_peer: bool, passed: set[tuple[Any, Any]]) -> None:
    """Raise the refusal for libpq's socket `fd` after shutting it, so that libpq cannot send anything more.
    `passed`: the (own, peer) addresses already checked in this connect (libpq waits several times on one)."""
    if fd < 0:
        return
    with socket.socket(fileno=os.dup(fd)) as sock:
        try:
            key = (sock.getsockname(), sock.getpeername())
        except OSError:
            return  # not connected yet (or refused): libpq's next step finds out, this check runs again
        if key in passed:
            return
        why = refusal(sock, trust_unix_peer)
        if why is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            raise why
        passed.add(key)


@functools.cache
def _connection_class() -> Any:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    if not hasattr(psycopg.Connection, "_connect_gen"):  # pragma: no cover - a psycopg that moved its hook
        raise StoreError(f"psycopg {psycopg.__version__} does not let Hermit check who holds the server's socket "
                         "before it authenticates", "install psycopg 3.2 or 3.3 (pip install 'psycopg[binary]<3.4')")

    class GuardedConnection(psycopg.Connection[Any]):
        """A psycopg connection whose socket is checked before each step of libpq's connect."""

        holder_checked = False

        @classmethod
        def _connect_gen(cls, conninfo: str = "") -> Generator[Any, Any, Any]:
            # One attempt (one host) per call; a DSN's requirepeer makes libpq check a Unix peer itself.
            trust_unix_peer = bool(conninfo_to_dict(conninfo).get("requirepeer"))
            passed: set[tuple[Any, Any]] = set()
            gen = super()._connect_gen(conninfo)
            try:
                wait = next(gen)
                while True:
                    ready = yield wait
                    _check_fd(int(wait[0]), trust_unix_peer, passed)  # the wait is over: libpq acts next
                    wait = gen.send(ready)
            except StopIteration as done:
                conn = done.value
                conn.holder_checked = bool(passed)
                return conn
            finally:
                gen.close()

    return GuardedConnection


def auth_options(dsn: str) -> dict[str, str]:
    """`require_auth` to add to `dsn`'s options: none when the DSN or libpq's environment chose, or when the
    server's certificate is verified (see the module docstring)."""
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict

    if pq.version() < REQUIRE_AUTH_LIBPQ:
        return {}
    params = conninfo_to_dict(dsn)
    env = {d.keyword.decode(): (d.val or b"").decode() for d in pq.Conninfo.get_defaults()
           if d.keyword in (b"require_auth", b"sslmode")}
    if params.get("require_auth") or env.get("require_auth"):
        return {}
    if str(params.get("sslmode") or env.get("sslmode") or "") in VERIFYING_SSLMODES:
        return {}
    return {"require_auth": DEFAULT_REQUIRE_AUTH}


def cleartext_refused(e: BaseException) -> bool:
    """Whether a connect failed because require_auth refused the server's request for a cleartext password."""
    return "authentication method requirement" in str(e) and "requested a cleartext password" in str(e)


def open_connection(dsn: str, *, timeout_s: float, **options: Any) -> Any:
    """A psycopg connection to `dsn` (psycopg's keyword `options` passed on), opened only to a server held by
    a trusted uid and never giving the password in cleartext unless the DSN says so. Raises HolderRefused
    (a StoreError) for a foreign holder and psycopg.Error for anything else (the caller names the DSN's
    variable; `cleartext_refused(e)` tells require_auth's refusal apart)."""
    conn = _connection_class().connect(dsn, connect_timeout=max(1, int(timeout_s)), **auth_options(dsn), **options)
    if not conn.holder_checked:  # pragma: no cover - psycopg stopped calling the hook, or libpq never waited
        conn.close()
        raise StoreError("psycopg connected without Hermit's check of who holds the server's socket",
                         "install psycopg 3.2 or 3.3 (pip install 'psycopg[binary]<3.4')")
    return conn
