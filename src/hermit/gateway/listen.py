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

import errno
import ipaddress
import socket
from collections.abc import Callable

from hermit.errors import ConfigError
from hermit.loopback import port_holder

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
