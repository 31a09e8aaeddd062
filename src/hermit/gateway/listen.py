"""The gateway's listening sockets: the address it is given and, beside an IPv4 loopback or any-address socket,
`[::1]` at the same port.

Browsers try `::1` first for `localhost` (Chromium does), and any local user may bind `[::1]:<port>` beside a
socket on `127.0.0.1:<port>`. A gateway on 127.0.0.1 alone left `http://localhost:<port>/` — the address its own
421 hint suggests — to whatever another user's program listened there: a page looking like the web app took what
the owner typed, and a `#ticket=`/`#token=` link's secret. So the gateway holds `[::1]:<port>` too, and does not
start while something else holds it (a port the system chose is chosen again). A machine without IPv6 loopback
has nothing there for anyone to hold.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from hermit.errors import ConfigError
from hermit.loopback import port_holder

log = logging.getLogger("hermit.gateway")

TWIN = "::1"
PORT_TRIES = 8  # ports the system chose whose [::1] twin was taken, before giving up


def needs_twin(host: str) -> bool:
    """Whether a gateway listening on `host` must hold [::1] at its port too: an IPv4 loopback or any-address."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.version == 4 and (ip.is_loopback or ip.is_unspecified)


def bind_twin(port: int) -> socket.socket | None:
    """A listening socket on [::1]:`port`; None where this machine has no IPv6 loopback. ConfigError, naming who
    holds it when that is another user's program, when something else listens there."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None  # no IPv6 at all
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((TWIN, port))
    except OSError as e:
        sock.close()
        if e.errno != errno.EADDRINUSE:
            return None  # EADDRNOTAVAIL and the like: no [::1] here, nobody can listen on it
        holder = port_holder(TWIN, port)
        who = f"a program of {holder.user} (uid {holder.uid})" if holder is not None else "another program"
        raise ConfigError(f"cannot listen on [::1]:{port}: {who} listens there, and a browser opening "
                          f"http://localhost:{port}/ would reach it instead of Hermit",
                          "stop that program, or pick another port with --port (or gateway.port)") from e
    sock.listen(128)
    sock.setblocking(False)
    return sock


def listen_sockets(host: str, port: int, bind: Callable[[str, int], socket.socket]) -> list[socket.socket]:
    """`bind(host, port)`'s socket, then its [::1] twin when `host` needs one (see the module's docstring)."""
    for attempt in range(PORT_TRIES):
        sock = bind(host, port)
        if not needs_twin(host):
            return [sock]
        try:
            twin = bind_twin(sock.getsockname()[1])
        except ConfigError:
            sock.close()
            if port == 0 and attempt < PORT_TRIES - 1:
                continue  # the system's choice: another port
            raise
        return [sock] if twin is None else [sock, twin]
    raise AssertionError("unreachable")  # the last attempt returns or raises


# --- Listening sockets handed in by the process that started the gateway (socket activation) -------------------
#
# While the gateway's port is free — the gateway stopped, restarting, crashed — any local user may listen there,
# and a page the owner opens then runs that program's script in the web app's origin (docs/security.md). A service
# manager that binds the port itself and hands the listening sockets to the gateway (systemd's socket activation:
# `hermit service install` writes a .socket unit) keeps it taken across the gateway's restarts and crashes: the
# kernel queues new connections until the next gateway accepts them. The protocol is systemd's (sd_listen_fds):
# LISTEN_PID is this process, LISTEN_FDS sockets from fd 3 on.

LISTEN_FDS_START = 3
HELD_BEFORE = "HERMIT_LISTEN_HELD"  # exec_in_place: whether the port was held before the restart ("1"/"0")
MAX_LISTEN_FDS = 16


@dataclass(frozen=True)
class Listeners:
    """The gateway's listening sockets; `inherited`: handed in (LISTEN_FDS); `held`: the process that started the
    gateway holds them too (so the port stays taken while the gateway is down), and they cover the [::1] twin;
    `holder`: that process, when held (watch_holder: whether it still does)."""

    sockets: list[socket.socket]
    inherited: bool = False
    held: bool = False
    holder: Holder | None = None

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    @property
    def host(self) -> str:
        return str(self.sockets[0].getsockname()[0])


def _bad_fd(fd: int, what: str) -> ConfigError:
    return ConfigError(f"LISTEN_FDS hands the gateway fd {fd}, which {what}",
                       "hand it listening TCP sockets only (a .socket unit's ListenStream= lines, as `hermit service "
                       "install` writes them), or start the gateway without LISTEN_FDS")


def inherited_sockets(environ: MutableMapping[str, str] | None = None) -> list[socket.socket] | None:
    """The listening TCP sockets LISTEN_FDS hands this process, or None when none are (no LISTEN_FDS, or a
    LISTEN_PID of another process: the variables were meant for a parent). The variables are removed either way,
    so nothing the gateway starts takes them as its own. ConfigError for an fd that is not a listening TCP socket."""
    env = os.environ if environ is None else environ
    raw, pid = env.pop("LISTEN_FDS", None), env.pop("LISTEN_PID", None)
    env.pop("LISTEN_FDNAMES", None)
    if raw is None or pid != str(os.getpid()):
        return None
    try:
        count = int(raw)
    except ValueError:
        raise ConfigError(f"LISTEN_FDS={raw!r} is not a number of sockets",
                          "start the gateway without it, or from a .socket unit") from None
    if not 1 <= count <= MAX_LISTEN_FDS:
        raise ConfigError(f"LISTEN_FDS={raw!r}: the gateway takes 1 to {MAX_LISTEN_FDS} listening sockets",
                          "start the gateway without it, or from a .socket unit")
    socks: list[socket.socket] = []
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + count):
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            raise _bad_fd(fd, "is not a socket") from None
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            sock.detach()
            raise _bad_fd(fd, "is not a TCP socket")
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            sock.detach()
            raise _bad_fd(fd, "is not listening")
        sock.set_inheritable(False)
        sock.setblocking(False)
        socks.append(sock)
    return socks


def _socket_links(pid: int) -> set[str] | None:
    """The `socket:[inode]` names of process `pid`'s open sockets; None when they cannot be read."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    links = set()
    for n in names:
        with contextlib.suppress(OSError):
            links.add(os.readlink(f"{folder}/{n}"))
    return links


def _start_time(pid: int) -> str | None:
    """Process `pid`'s start time (/proc/<pid>/stat, field 22): a pid reused by a later process differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the name, which may hold blanks and parentheses
    return fields[19] if len(fields) > 19 else None


@dataclass(frozen=True)
class Holder:
    """The process that started the gateway and holds its listening sockets too (a service manager's socket unit):
    its pid, its start time (a reused pid is not it) and the sockets' `socket:[inode]` names."""

    pid: int
    started: str
    links: frozenset[str]

    def holds(self) -> bool:
        """Whether it still does: still this process's parent (not exited, this process not reparented), the same
        process, and the sockets still among its open fds. A socket unit stopped while the gateway runs (`systemctl
        --user stop <name>.socket`) closes the manager's copies: the port then goes free when the gateway stops."""
        if os.getppid() != self.pid or _start_time(self.pid) != self.started:
            return False
        links = _socket_links(self.pid)
        return links is not None and self.links <= links


def holder_of(socks: list[socket.socket]) -> Holder | None:
    """The process that started this one when it holds `socks` too (the same sockets, by inode): a service
    manager keeps them while the gateway restarts. A wrapper that bound them and exec'd the gateway
    (systemd-socket-activate) holds nothing: the port goes free when the gateway exits.

    Only a parent whose fds can be read is ever a holder (a user's own manager, `systemd --user`, is the user's): one
    that cannot be read (another user's, pid 1 of a system unit) is not, whatever it is named — a name is chosen by
    whoever starts a process (prctl PR_SET_NAME), and an orphan's reaper holds nothing — and no later look could tell
    whether it still holds them (Holder.holds)."""
    ppid = os.getppid()
    started = _start_time(ppid)
    holder = Holder(ppid, started or "", frozenset(f"socket:[{os.fstat(s.fileno()).st_ino}]" for s in socks))
    return holder if started is not None and holder.holds() else None


async def watch_holder(holder: Holder, lost: Callable[[], None], interval: float) -> None:
    """Looks every `interval` seconds whether `holder` still holds the sockets; `lost()` once it does not (then ends):
    the port would go free when the gateway stops, so what relied on it being held must stop relying on it."""
    import asyncio

    while await asyncio.to_thread(holder.holds):
        await asyncio.sleep(interval)
    lost()


def _covers_twin(socks: list[socket.socket]) -> bool:
    """Whether the [::1] twin an IPv4 loopback or any-address socket needs (module docstring) is among `socks`, or
    this machine has no IPv6 loopback for anyone to hold."""
    names = [s.getsockname() for s in socks]
    for addr in names:
        if needs_twin(str(addr[0])) and not any(a[0] in (TWIN, "::") and a[1] == addr[1] for a in names):
            try:
                probe = bind_twin(0)
            except ConfigError:
                return False
            if probe is None:
                continue  # no [::1] here
            probe.close()
            return False
    return True


def open_listeners(host: str, port: int, bind: Callable[[str, int], socket.socket],
                   environ: MutableMapping[str, str] | None = None) -> Listeners:
    """The sockets LISTEN_FDS hands in (whatever `host`/`port` say: the unit that binds them decides the address;
    a missing [::1] twin is bound here), else `listen_sockets(host, port, bind)`."""
    env = os.environ if environ is None else environ
    before = env.pop(HELD_BEFORE, None)  # set by exec_in_place: a restart in place never makes a port held
    socks = inherited_sockets(env)
    if socks is None:
        return Listeners(listen_sockets(host, port, bind))
    handed = sorted({int(s.getsockname()[1]) for s in socks})
    if port and port not in handed:
        log.warning("listening on port %s, which the service's socket unit holds, not on port %d (gateway.port or "
                    "--port): run `hermit service install` again to move it", "/".join(map(str, handed)), port)
    holder = holder_of(socks) if before != "0" and _covers_twin(socks) else None
    socks.sort(key=lambda s: s.family != socket.AF_INET)  # IPv4 first: the address the gateway names
    first = socks[0].getsockname()
    if needs_twin(str(first[0])) and not any(s.getsockname()[0] in (TWIN, "::") for s in socks):
        twin = bind_twin(int(first[1]))
        if twin is not None:
            socks.append(twin)
    return Listeners(socks, inherited=True, held=holder is not None, holder=holder)


def kept_for_restart(socks: list[socket.socket]) -> list[int]:
    """Copies of the listening sockets' fds, taken before the server closes its own: the port stays taken while the
    gateway stops and starts again in place (`exec_in_place`)."""
    return [os.dup(s.fileno()) for s in socks]


def exec_in_place(fds: list[int], argv: list[str] | None = None, *, held: bool = False) -> None:
    """Start this gateway again in this process (the same pid) with `fds` as its listening sockets (LISTEN_FDS):
    never a moment when the port is free for another program. Does not return.

    `held`: whether the port is still held by the starter (Listeners.held, and not lost since: watch_holder). Only
    that decision can carry over, never be raised: a gateway run by hand whose parent went away (nohup, a closed ssh
    session) is reparented to init or a subreaper, which must not be taken for a socket unit's manager after the
    restart, nor may a socket unit stopped meanwhile be.
    SIGUSR1 stays blocked across the exec (the new image unblocks it once it handles it): a second signal during the
    new image's start is a restart asked for, not the default action's death."""
    import signal
    import sys

    high = [fcntl_dup_high(fd) for fd in fds]  # out of the way of fds 3… before they are overwritten
    for i, fd in enumerate(high):
        os.dup2(fd, LISTEN_FDS_START + i)  # inheritable: the new image gets it
        os.close(fd)
    os.environ.update(LISTEN_FDS=str(len(fds)), LISTEN_PID=str(os.getpid()), **{HELD_BEFORE: "1" if held else "0"})
    os.environ.pop("LISTEN_FDNAMES", None)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    argv = list(sys.orig_argv) if argv is None else argv
    os.execv(sys.executable, [sys.executable, *argv[1:]])


def fcntl_dup_high(fd: int) -> int:
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(fd)
    return new
