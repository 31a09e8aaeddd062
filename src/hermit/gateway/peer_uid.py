"""Which local user holds the client end of a TCP connection to the gateway (Linux: the kernel's sock_diag).

A connection from a program of this machine has its other end in the kernel's socket table (whatever address it
came from: a local user may connect to 127.0.0.1 from the machine's LAN address), and that socket has an owner: the
uid of whoever made it; a client of another machine has none there. The gateway counts connections not signed in
by that uid (gateway/unsigned.py), so another local user cannot use up the slots the owner's own browser needs.

The lookup is one netlink request for the exact socket (SOCK_DIAG_BY_FAMILY with both ends: what `ss -e` asks),
O(1) however many sockets the machine holds: reading /proc/net/tcp instead costs a pass over every socket for each
new connection, which a flood of connections would turn quadratic. None when it cannot be known (not Linux, no
netlink in this sandbox, the client already gone, a client in another network namespace): the caller counts such a
connection as another user's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import socket
import struct

from hermit.loopback import is_own_address

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NO_COOKIE = 0xFFFFFFFF
ALL_STATES = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2 before its sockid: family, protocol, ext, pad, states
_UID_AT = _HEADER.size + 64  # inet_diag_msg: family..retrans (4), sockid (48), expires, rqueue, wqueue (12), uid

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def address(text: str) -> Address | None:
    """An IP address without a zone, an IPv4-mapped IPv6 one as IPv4; None when `text` is none."""
    try:
        ip = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_local(client: Address, server: Address | None) -> bool:
    """Whether a client at `client` that reached the gateway at `server` is surely a program of this machine (for a
    client whose socket was not found: then counted as another local user's, not as a network client): a loopback
    address, the gateway's own, or any other address of this machine (binding to it works: a local user may connect
    to 127.0.0.1 from the machine's LAN address, which without a uid looked like a network client's). Not whether
    binding to it works: with net.ipv4.ip_nonlocal_bind=1 any address binds, and every client of the LAN was one
    "local user of unknown uid" — one LAN host holding 32 connections shut out the owner's phone (s21 re-audit)."""
    return client.is_loopback or client == server or is_own_address(client)


SUBUID = "/etc/subuid"
_ranges: tuple[tuple[int, int, int], tuple[tuple[int, int, int], ...]] | None = None  # (file's stat, ranges)


def _subuid_ranges(path: str) -> tuple[tuple[int, int, int], ...]:
    """(first, end, owner uid) of each range in `path` (`name-or-uid:first:count` lines), read again only when the
    file changes (one stat per call)."""
    global _ranges
    try:
        st = os.stat(path)
    except OSError:
        return ()
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    if _ranges is not None and _ranges[0] == key:
        return _ranges[1]
    found: list[tuple[int, int, int]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        name = fields[0]
        try:
            owner = int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid
        except KeyError:
            continue  # a user this machine does not know: its range counts as its own uids
        found.append((int(fields[1]), int(fields[1]) + int(fields[2]), owner))
    _ranges = (key, tuple(found))
    return _ranges[1]


def owner_of(uid: int, path: str = SUBUID) -> int:
    """The user `uid` belongs to: the owner of the subordinate uid range (/etc/subuid) it is in, as a rootless
    container's or a user namespace's uids are; `uid` itself when it is in none. So one user with a range of
    65536 uids is one source of connections, not 65536."""
    for first, end, owner in _subuid_ranges(path):
        if first <= uid < end:
            return owner
    return uid


def client_uid(client: tuple[str, int], server: tuple[str, int] | None) -> int | None:
    """The uid owning the client's socket of the connection `client` → `server` (both as (address, port)), or
    None when it cannot be known."""
    peer = address(client[0])
    own = address(server[0]) if server is not None else None
    if peer is None or own is None or server is None or peer.version != own.version:
        return None
    family = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    # inet_diag_sockid: sport, dport (big-endian), src and dst (16 bytes each), interface, cookie (none)
    sockid = (struct.pack("!HH", client[1], server[1]) + peer.packed.ljust(16, b"\0") + own.packed.ljust(16, b"\0")
              + struct.pack("=III", 0, NO_COOKIE, NO_COOKIE))
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, ALL_STATES) + sockid
    message = _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body
    netlink = getattr(socket, "AF_NETLINK", None)
    if netlink is None:
        return None  # not Linux
    try:
        with socket.socket(netlink, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as s:
            s.sendto(message, (0, 0))
            reply = s.recv(8192, socket.MSG_DONTWAIT)  # queued by sendto itself: nothing there is no answer
    except OSError:
        return None
    with contextlib.suppress(struct.error):
        length, kind, _, _, _ = _HEADER.unpack_from(reply)
        if kind == SOCK_DIAG_BY_FAMILY and min(length, len(reply)) >= _UID_AT + 4 and _is_the_client(reply, sockid):
            return int(struct.unpack_from("=I", reply, _UID_AT)[0])
    return None  # an error (ENOENT: no such socket here) or a reply this code does not know


# The kernel's states whose uid is not the client program's: a listener (below), and the minimal sockets of
# TIME_WAIT (a closed connection's, orphaned FIN_WAIT2's too) and NEW_SYN_RECV, which report uid 0.
_TIME_WAIT, _LISTEN, _NEW_SYN_RECV = 6, 10, 12


def _is_the_client(reply: bytes, sockid: bytes) -> bool:
    """Whether the socket the kernel answered with is the client's end asked for. The lookup of one socket falls
    back to a *listener* on the client's port (inet_diag_find_one_icsk → inet_lookup tries established sockets,
    then listeners): a client of another machine that chose as its source port one that a program here listens on
    at 0.0.0.0 (the gateway's own port, sshd's 22) was given that program's uid — the gateway's own user's, so it
    was counted in the owner's pool, or root's. So the answer must be that very connection (same ports and
    addresses) in a state whose uid is its program's."""
    state = reply[_HEADER.size + 1]
    answered = reply[_HEADER.size + 4:_HEADER.size + 4 + 36]  # inet_diag_msg's sockid: ports, then addresses
    return state not in (_TIME_WAIT, _LISTEN, _NEW_SYN_RECV) and answered == sockid[:36]
