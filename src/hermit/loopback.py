"""Who holds the other end of a TCP connection to this machine: a server of another login user is refused.

Any local user may listen on a free port, so when a server the owner runs on this machine is down — a model
server (Ollama on 11434, LM Studio, vLLM), an embeddings endpoint, a chat platform's API (a Telegram Bot API
server of one's own, a local relay for Slack or WhatsApp) — another user's program can take its port. A model
port gets every prompt, MEMORY.md included, and answers with tool calls that run as the owner; a channel's
port gets the bot token (in Telegram's URL, in Slack's and WhatsApp's Authorization header), answers with
messages "from" an owner id that drive the owner's main session, and reads every reply. So each new
connection to an address of this machine is checked right after the TCP handshake, before a byte of the
request (or of a TLS hello) is sent: the kernel's socket table (`/proc/net/tcp`, `/proc/net/tcp6`) names the
uid of the socket at the other end, and Hermit goes on only when it is

- its own uid (a server the owner started, `ollama serve`, a rootless container's port forwarder, an ssh -L),
- root (uid 0: a system service, Docker's port proxy), or
- a system account: 1 … SYS_UID_MAX of /etc/login.defs (999 when not set there; UID_MIN - 1 when only that
  is), the range `useradd --system` allocates from: Ollama's Linux installer runs its service as the system
  user `ollama`.

Any other uid — another login user (UID_MIN … UID_MAX), a subordinate uid of someone's rootless container,
and 65534 (`nobody`, also the overflow uid under which a socket owned by a uid unmapped in Hermit's user
namespace is shown, so it may stand for anyone) — is refused with an error naming the port and the uid.
There is no setting to allow one: a server shared by several users belongs under a service account.

The socket at the other end is the exact one the connection reached (local = our peer, remote = our
address), so a server that dies and is replaced between two calls is caught on the next connection. When it
is not listed (an older kernel shows a not-yet-accepted connection as root's, a SYN-cookie handshake is
still in flight), the listening socket on that port decides; when neither is listed, the connection went to
no socket of this network namespace (a NAT rule, which only root can write) and is let through.

Not Linux, or no readable /proc/net: no check (the error-free degraded mode; the docs say so). A
connection to another machine is never looked up: only loopback and this machine's own addresses are.

A foundation module (not under models/) because both the model clients and the chat channels use it, and
channels do not import models. httpx clients use it through httpcore's `trace` request extension:
`guard_stream` for a sync client, `async_trace` for an async one.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import socket
import struct
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing asyncio costs every `hermit` command that reads the gateway's lock ~0.05 s of CPU
    import asyncio.trsock

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

PROC_NET = Path("/proc/net")
LOGIN_DEFS = Path("/etc/login.defs")
DEFAULT_SYS_UID_MAX = 999
_LISTEN = "0A"
_GONE = {"06", "07"}  # TIME_WAIT, CLOSE: a finished connection's leftovers, shown as root's

CONNECTED = "connection.connect_tcp.complete"  # httpcore's trace event for a new TCP connection
# What a model or embeddings server on a foreign port would get (Holder.describe's default).
MODEL_STAKES = "it would get your prompts and memory, and its replies would run tools as you"


def url_host(host: str) -> str:
    """`host` as a URL writes it: an IPv6 address in brackets (http://[::1]:8787/), anything else as it is."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True)
class Holder:
    """A socket on this machine, at the other end of a connection, owned by a uid Hermit does not talk to."""

    host: str
    port: int
    uid: int

    @property
    def user(self) -> str:
        try:
            import pwd

            return pwd.getpwuid(self.uid).pw_name
        except (ImportError, KeyError):
            return "no user name"

    @property
    def where(self) -> str:
        return f"{url_host(self.host)}:{self.port}"

    def describe(self, stakes: str = MODEL_STAKES) -> str:
        """Who holds the port and why Hermit sent nothing; `stakes` says what the server would have got."""
        return (f"the server at {self.where} is run by another user (uid {self.uid}, {self.user}), not by you "
                f"(uid {os.geteuid()}), root or a system account; Hermit sent it nothing: {stakes}")


@functools.cache
def sys_uid_max() -> int:
    """The highest uid of a system account: SYS_UID_MAX in /etc/login.defs, else UID_MIN - 1, else 999."""
    values: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in LOGIN_DEFS.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 2 and not parts[0].startswith("#"):
                values[parts[0]] = parts[1]
    for key, adjust in (("SYS_UID_MAX", 0), ("UID_MIN", -1)):
        with contextlib.suppress(KeyError, ValueError):
            return int(values[key]) + adjust
    return DEFAULT_SYS_UID_MAX


def trusted_uid(uid: int) -> bool:
    """Hermit's own uid, root, or a system account (see the module docstring for why)."""
    return uid in (os.geteuid(), 0) or 1 <= uid <= sys_uid_max()


def own_or_root(uid: int) -> bool:
    """The stricter rule for a server that is Hermit's own (the gateway, whose requests carry its token): the
    user's uid or root (who can read the token file anyway); a system account is not trusted with it."""
    return uid in (os.geteuid(), 0)


def foreign_holder(sock: socket.socket | asyncio.trsock.TransportSocket,
                   trusted: Callable[[int], bool] = trusted_uid) -> Holder | None:
    """The holder of the other end of connected `sock` when it is a socket on this machine whose uid is not
    `trusted`; None when it is trusted, on another machine, or cannot be known (no /proc/net)."""
    try:
        peer_host, peer_port = sock.getpeername()[:2]
        own_host, own_port = sock.getsockname()[:2]
    except (OSError, ValueError, TypeError):
        return None  # not an IP socket (a test transport), or already closed
    return foreign_peer(str(peer_host), int(peer_port), str(own_host), int(own_port), trusted)


def foreign_peer(peer_host: str, peer_port: int, own_host: str, own_port: int,
                 trusted: Callable[[int], bool] = trusted_uid) -> Holder | None:
    """`foreign_holder` by the two ends' addresses: also what a server uses for a client connected to it
    (the gateway: a program relaying a browser's connection from another user's account is refused)."""
    try:
        peer = _unmapped(ipaddress.ip_address(peer_host.split("%")[0]))
        own = _unmapped(ipaddress.ip_address(own_host.split("%")[0]))
    except ValueError:
        return None  # not an IP address (a test transport)
    if not (peer.is_loopback or peer.is_unspecified or _is_own_address(peer)):
        return None
    uid = _holder_uid(peer, peer_port, own, own_port)
    if uid is None or trusted(uid):
        return None
    return Holder(str(peer), peer_port, uid)


def port_holder(host: str, port: int, timeout: float = 2.0) -> Holder | None:
    """Who holds `port` at `host` (an address of this machine, or a name of one) when it is not a trusted
    uid: a TCP connection is opened and closed, no byte sent (for `hermit doctor`). None when it is trusted,
    when `host` is another machine (it is not connected to), or when nothing listens there."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    for family, kind, proto, _, addr in found:
        try:
            ip = _unmapped(ipaddress.ip_address(str(addr[0]).split("%")[0]))
        except ValueError:
            continue
        if not (ip.is_loopback or ip.is_unspecified or _is_own_address(ip)):
            continue
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(addr)
            except OSError:
                continue
            holder = foreign_holder(sock)
        if holder is not None:
            return holder
    return None

def stream_socket(stream: Any) -> socket.socket | asyncio.trsock.TransportSocket | None:
    """The socket under an httpcore network stream: a plain one (sync), asyncio's wrapper of it (async)."""
    sock = stream.get_extra_info("socket") if stream is not None else None
    trsock = sys.modules.get("asyncio.trsock")  # not imported: no asyncio stream exists, so none to recognise
    kinds = (socket.socket,) if trsock is None else (socket.socket, trsock.TransportSocket)
    return sock if isinstance(sock, kinds) else None


def guard_stream(stream: Any, refuse: Callable[[Holder], Exception],
                 trusted: Callable[[int], bool] = trusted_uid) -> None:
    """For a sync httpx client's trace hook at `connection.connect_tcp.complete`: when a foreign uid (one not
    `trusted`) holds the other end of the new connection, close it and raise `refuse(holder)` — before the
    request's first byte."""
    sock = stream_socket(stream)
    holder = foreign_holder(sock, trusted) if sock is not None else None
    if holder is None:
        return
    with contextlib.suppress(Exception):
        stream.close()
    raise refuse(holder)


def async_trace(refuse: Callable[[Holder], Exception]) -> Callable[[str, Mapping[str, Any]], Awaitable[None]]:
    """An async httpx client's trace hook (the request extension "trace", which httpcore awaits): each new
    connection held by a foreign uid is closed and `refuse(holder)` raised before the request's first byte.
    A kept-alive connection was checked when it was made; a proxy's connection is checked like any other."""
    async def trace(event: str, info: Mapping[str, Any]) -> None:
        if event != CONNECTED:
            return
        stream: Any = info.get("return_value")
        sock = stream_socket(stream)
        holder = foreign_holder(sock) if sock is not None else None
        if holder is None:
            return
        with contextlib.suppress(Exception):
            await stream.aclose()
        raise refuse(holder)

    return trace


def is_here(host: str) -> bool:
    """Whether a URL's `host` is this machine: `localhost`, `*.localhost`, a loopback address or one of this
    machine's own. A name other than localhost is not resolved here; hermit.direct_http, which decides each
    request's proxy by this, adds the names this machine calls itself (its hostname, /etc/hosts)."""
    host = host.strip("[]").lower().rstrip(".")  # "localhost." (fully qualified) is localhost too
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = _unmapped(ipaddress.ip_address(host.split("%")[0]))
    except ValueError:
        # 2130706433, 127.1, 0x7f.1: the resolver reads them as IPv4 addresses (inet_aton), so a proxy would too
        if not _NUMERIC_HOST.fullmatch(host):
            return False
        try:
            ip = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return False
    return ip.is_loopback or ip.is_unspecified or _is_own_address(ip)


_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}")


def _unmapped(ip: Address) -> Address:
    return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip


def is_own_address(ip: Address) -> bool:
    """Whether `ip` is an address of this machine, e.g. its LAN address (a loopback or unspecified one too): on Linux
    the kernel's route for it is of type local (what `ip route get` says). Binding to it was the test before, but
    binding works for any address where foreign ones may be bound (net.ipv4.ip_nonlocal_bind=1, as on a keepalived
    or HAProxy host) and for multicast and broadcast ones: every client of another machine was then "of this
    machine" (gateway/peer_uid.py) and every numeric URL "here" (s21 re-audit). Without netlink (not Linux), the
    bind is still the test."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    if ip.is_multicast:
        return False
    kind = _route_type(ip)
    if kind is not None:
        return kind == _RTN_LOCAL
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


_RTM_GETROUTE, _RTM_NEWROUTE, _NLMSG_ERROR, _RTA_DST, _RTN_LOCAL, _RTN_UNREACHABLE = 26, 24, 2, 1, 2, 7
_NL_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags


def _route_type(ip: Address) -> int | None:
    """The type of the kernel's route to `ip` (RTM_GETROUTE, one netlink request: no packet is sent); _RTN_UNREACHABLE
    when there is none (the kernel's error), None when it cannot be asked (not Linux, no netlink here)."""
    netlink = getattr(socket, "AF_NETLINK", None)
    if netlink is None:
        return None
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    body = _RTMSG.pack(family, ip.max_prefixlen, 0, 0, 0, 0, 0, 0, 0) + struct.pack("=HH", 4 + len(ip.packed),
                                                                                   _RTA_DST) + ip.packed
    message = _NL_HEADER.pack(_NL_HEADER.size + len(body), _RTM_GETROUTE, 1, 1, 0) + body  # NLM_F_REQUEST
    try:
        with socket.socket(netlink, socket.SOCK_RAW, 0) as s:  # NETLINK_ROUTE
            s.settimeout(2)
            s.sendto(message, (0, 0))
            reply = s.recv(8192)
        _, kind, _, _, _ = _NL_HEADER.unpack_from(reply)
        if kind == _NLMSG_ERROR:
            return _RTN_UNREACHABLE
        return _RTMSG.unpack_from(reply, _NL_HEADER.size)[7] if kind == _RTM_NEWROUTE else None
    except (OSError, struct.error):
        return None


_is_own_address = is_own_address


def _hex(ip: Address) -> str:
    """An address as /proc/net/tcp* print it: 32-bit words in the machine's byte order."""
    packed = ip.packed
    return "".join(f"{struct.unpack('=I', packed[i:i + 4])[0]:08X}" for i in range(0, len(packed), 4))


def _forms(ip: Address, port: int) -> dict[str, set[str]]:
    """How an endpoint appears in each table: IPv4 ones also as ::ffff:a.b.c.d in tcp6 (dual-stack sockets)."""
    if isinstance(ip, ipaddress.IPv4Address):
        mapped = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
        return {"tcp": {f"{_hex(ip)}:{port:04X}"}, "tcp6": {f"{_hex(mapped)}:{port:04X}"}}
    return {"tcp": set(), "tcp6": {f"{_hex(ip)}:{port:04X}"}}


def _tables() -> dict[str, list[list[str]]] | None:
    rows: dict[str, list[list[str]]] = {}
    for name in ("tcp", "tcp6"):
        try:
            text = (PROC_NET / name).read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        rows[name] = [line.split() for line in text.splitlines()[1:]]
    return rows or None


def _holder_uid(peer: Address, peer_port: int, own: Address, own_port: int) -> int | None:
    """The uid of the socket at the other end (see the module docstring for the fallbacks), None if unknown."""
    tables = _tables()
    if tables is None:
        return None
    there, here = _forms(peer, peer_port), _forms(own, own_port)
    any_addr: Address = ipaddress.IPv4Address(0) if peer.version == 4 else ipaddress.IPv6Address(0)
    wildcard = _forms(any_addr, peer_port)
    if peer.version == 4:
        wildcard["tcp6"] |= _forms(ipaddress.IPv6Address(0), peer_port)["tcp6"]
    exact_peer: int | None = None
    listeners: list[tuple[int, int]] = []  # (0 for an exact address, 1 for a wildcard one; uid)
    for name, rows in tables.items():
        for f in rows:
            if len(f) < 8 or not f[7].isdigit():
                continue
            if f[3] == _LISTEN:
                if f[1] in there[name]:
                    listeners.append((0, int(f[7])))
                elif f[1] in wildcard[name]:
                    listeners.append((1, int(f[7])))
            elif f[3] not in _GONE and f[1] in there[name] and f[2] in here[name]:
                exact_peer = int(f[7])
    listener = min(listeners)[1] if listeners else None
    if exact_peer is not None and (exact_peer != 0 or listener is None):
        return exact_peer
    return listener
