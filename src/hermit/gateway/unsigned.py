"""Connections that have not signed in yet: how long they may stay, and how many of them one address may hold.

uvicorn keeps a TCP connection that never sends a byte (or half a request line) open for ever, and WebSocket pings
keep a socket that never sends `connect` open too. So anyone who can reach the port (a LAN client of a gateway on
0.0.0.0, another local user) could hold thousands of them and use up the gateway's file descriptors, locking the
owner out. Here:

- **a deadline** (`gateway.sign_in_seconds`): a connection must have sent a whole request's headers within it
  (from its opening, or from the first byte of a next request; idle keep-alive connections are uvicorn's 5 s rule),
  and a WebSocket must have completed `connect` within it from its accept (webchat_api.py closes it with
  CLOSE_SIGN_IN_TIMEOUT and says why);
- **a deadline for the whole request**: its body too must have come by then (a webhook's POST that dribbles a byte
  now and then was held until the cap; only the webhook routes read a body, and a platform sends it at once);
- **a cap**: at most PER_SOURCE connections not signed in from one source, in three pools that cannot use up each
  other's room: *yours* (a program of this machine run by the gateway's own uid; by address, TOTAL in all), *other
  local users* (by uid, LOCAL_TOTAL in all: whatever loopback addresses one uses, 127.0.0.2 … included, it is one
  source) and *the network* (by address, an IPv6 address's /64 — one host has the whole prefix — TOTAL in all). A
  uid of a subordinate range in /etc/subuid (a rootless container's) counts as the user owning the range. A
  local client whose uid cannot be read (gateway/peer_uid.py: not Linux, a client in another network namespace) is
  counted as another local user, whichever address of this machine it comes from: fail closed, so another user can
  never take the owner's room nor the network's. One over its source's cap is closed at once;
- **a fair share** of a full pool (other users' and the network's): a newcomer whose source holds at least two
  fewer than the largest holder takes the place of that holder's oldest connection (`Unsigned._make_room`); in the
  network's pool by network first (an IPv4 /24, an IPv6 /48), then by address. A LAN host with 8 addresses (or a
  /24's worth) fills the pool but cannot keep the owner's phone out; a user with several uids cannot keep a reverse
  proxy run as www-data out. A signed-in WebSocket (the owner's page) does not count, so it is never closed or
  refused for this;
- **reserved places** (`Reserved`): a network address (the exact address, not its /64 or /24) that signed in within
  RESERVED_DAYS has its connections counted in a pool of its own (PER_SOURCE each, RESERVED_TOTAL in all) that no
  stranger can take or evict: the owner's phone connects whatever a LAN guest in its /64 or many /48s hold. Only a
  completed `connect` earns one (webchat_api.py calls `signed_in`): a wrong token, a page load, a socket that never
  signs in earn nothing. At most RESERVED_ADDRESSES are kept, the one signed in longest ago dropped first, and kept
  across the gateway's restarts (gateway/reserved_file.py: a 0600 file, each entry bound to the gateway token). A
  phone whose address changed (a new network, a new IPv6 temporary address) is a stranger until it signs in again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, Literal

from hermit.gateway.peer_uid import address, client_uid, is_local, owner_of
from hermit.gateway.reserved_file import REFRESH_SECONDS, ReservedFile
from hermit.refusals import RefusalLog

log = logging.getLogger("hermit.gateway")

PER_SOURCE = 32  # a browser opens about 6 connections per host, and a WebSocket per tab: a dozen tabs fit
TOTAL = 256  # yours, and the network's: with LOCAL_TOTAL well under the 1024 descriptors a process gets by default
LOCAL_TOTAL = 64  # other local users together (one user may have many uids: a rootless container's subordinate ones)
RESERVED_ADDRESSES = 8  # network addresses that signed in lately: a phone, a laptop, a tablet, each on two networks
RESERVED_TOTAL = 64  # their connections not signed in, together (256 + 64 + 256 + 64 stays well under 1024)
RESERVED_DAYS = 7  # a DHCP lease or an IPv6 temporary address (valid 7 days) rarely outlives it

Pool = Literal["yours", "local", "network", "reserved"]
Source = tuple[Pool, str]  # a pool and, in it, an address (or /64) or a uid


def source_of(client: tuple[str, int] | None) -> str:
    """The address a connection is counted under: its IP, or an IPv6 address's /64."""
    if client is None:
        return "?"
    try:
        ip = ipaddress.ip_address(client[0])
    except ValueError:
        return client[0]
    if isinstance(ip, ipaddress.IPv6Address) and not ip.is_loopback:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


@lru_cache(maxsize=4096)
def group_of(source: str) -> str:
    """The network a network source is in, for sharing the pool fairly: an IPv4 address's /24, an IPv6 /64's /48
    (one site's, as a provider hands out). A LAN host can hold many addresses of its /24 but only one /64."""
    try:
        net = ipaddress.ip_network(source, strict=False)
    except ValueError:
        return source
    return str(net.supernet(new_prefix=24 if net.version == 4 else 48))


def _unsent(transport: asyncio.BaseTransport) -> int:
    """Bytes a transport still holds to send: a closing one keeps its descriptor until they are sent."""
    return transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else 0


def classify(client: tuple[str, int], server: tuple[str, int] | None, own_uid: int) -> Source:
    """The pool and source a connection from `client` to the gateway's `server` address is counted under.

    The client's socket is looked up whatever its address: another local user may connect to 127.0.0.1 from this
    machine's LAN address (or to [::1] from its IPv6 one), which would otherwise count as a network client's."""
    uid = client_uid(client, server)
    if uid is not None:
        # a uid of a subordinate range (/etc/subuid: a rootless container's) counts as its owner's, in this pool
        # even when the owner is the gateway's own user (a container's program is not the owner's browser)
        return ("yours", source_of(client)) if uid == own_uid else ("local", f"uid {owner_of(uid)}")
    ip = address(client[0])
    if ip is not None and is_local(ip, address(server[0]) if server else None):
        return "local", "uid unknown"  # a local client whose owner cannot be read: fail closed
    return "network", source_of(client)


class Reserved:
    """The network addresses that signed in lately: at most `size`, each for `seconds` after its last sign-in, the
    one signed in longest ago dropped first (so strangers cannot grow it: only a sign-in adds)."""

    def __init__(self, size: int = RESERVED_ADDRESSES, seconds: float = RESERVED_DAYS * 86400.0,
                 clock: Callable[[], float] = time.monotonic, store: ReservedFile | None = None) -> None:
        """`store`: the file they are kept in across restarts (read now, written as `add` changes them)."""
        self.size, self.seconds, self.clock, self.store = size, seconds, clock, store
        self._at: OrderedDict[str, float] = OrderedDict()  # address -> when it last signed in, oldest first
        self._written: dict[str, float] = {}  # address -> the wall time the file has for it
        if store is not None:
            now, wall = clock(), store.wall()
            for ip, at in store.load(seconds)[-size:]:
                self._at[ip], self._written[ip] = now - (wall - at), at
            if self._at:
                log.info("reserved places restored for %d address(es) that signed in lately", len(self._at))

    def add(self, ip: str) -> None:
        self._at.pop(ip, None)
        self._at[ip] = self.clock()
        dropped = False
        while len(self._at) > self.size:
            gone, _ = self._at.popitem(last=False)
            log.info("reserved place of %s dropped: %d addresses signed in since", gone, self.size)
            dropped = True
        if self.store is not None:
            last = self._written.get(ip)
            if dropped or last is None or self.store.wall() - last > REFRESH_SECONDS:
                self._save(self.store)

    def _save(self, store: ReservedFile) -> None:
        """The addresses still reserved, with the wall time of each one's last sign-in, into `store`."""
        now, wall = self.clock(), store.wall()
        entries = [(ip, round(wall - (now - at), 3)) for ip, at in self._at.items() if now - at <= self.seconds]
        if store.save(entries):
            self._written = dict(entries)

    def __contains__(self, ip: str) -> bool:
        at = self._at.get(ip)
        if at is not None and self.clock() - at > self.seconds:
            del self._at[ip]
            return False
        return at is not None

    def addresses(self) -> list[str]:
        return [ip for ip in list(self._at) if ip in self]


def exact(client: tuple[str, int]) -> str:
    """A client's exact address (no zone, an IPv4-mapped one as IPv4): what a reservation is for."""
    ip = address(client[0])
    return client[0] if ip is None else str(ip)


class Unsigned:
    """The connections not signed in yet, by pool and source; each known by its client (ip, port)."""

    def __init__(self, per_source: int = PER_SOURCE, total: int = TOTAL, local_total: int = LOCAL_TOTAL,
                 own_uid: int | None = None, reserved: Reserved | None = None) -> None:
        self.per_source = per_source
        self.totals: dict[Pool, int] = {"yours": total, "local": local_total, "network": total,
                                        "reserved": RESERVED_TOTAL}
        self.own_uid = os.geteuid() if own_uid is None else own_uid
        self.reserved = Reserved() if reserved is None else reserved
        self._by_source: dict[Source, dict[tuple[str, int], asyncio.BaseTransport]] = {}
        self._source: dict[tuple[str, int], Source] = {}  # each held connection's source, for release()
        self.refusals = RefusalLog(log)

    def _count(self, pool: Pool | None = None) -> int:
        return sum(len(b) for s, b in self._by_source.items() if pool is None or s[0] == pool)

    def _purge(self, source: Source | None = None) -> None:
        """Forget connections already closed (one upgraded to a WebSocket that never reached the app ends unseen); one
        closing with bytes still unsent holds its descriptor, and counts until it is gone."""
        for s in [source] if source is not None else list(self._by_source):
            bucket = self._by_source.get(s, {})
            for key in [k for k, t in bucket.items() if t.is_closing() and not _unsent(t)]:
                del bucket[key]
                self._source.pop(key, None)
            if not bucket:
                self._by_source.pop(s, None)

    def _full(self, source: Source) -> bool:
        return (len(self._by_source.get(source, {})) >= self.per_source
                or self._count(source[0]) >= self.totals[source[0]])

    def admit(self, client: tuple[str, int] | None, transport: asyncio.BaseTransport,
              server: tuple[str, int] | None = None) -> bool:
        """Count a new connection from `client` to the gateway's `server` address in; False (the caller closes it)
        when its source or its pool is at the cap."""
        if client is None:
            return True  # a unix socket: not the gateway's
        source = classify(client, server, self.own_uid)
        if source[0] == "network" and exact(client) in self.reserved:  # signed in lately: its own places first
            mine: Source = ("reserved", exact(client))
            self._purge(mine)
            if self._full(mine):
                self._purge()
            if not self._full(mine) or self._make_room(mine, client):
                source = mine  # else it competes for the network's places as anyone does
        self._purge(source)
        if self._full(source):
            self._purge()
            if self._full(source) and not self._make_room(source, client):
                pool = source[0]
                self.refusals.warning("connections over the cap of those not signed in", "connection from %s (%s) "
                                      "closed: %d connections not signed in from there, %d in its pool (%s; caps %d, "
                                      "%d)", client[0], source[1], len(self._by_source.get(source, {})),
                                      self._count(pool), pool, self.per_source, self.totals[pool])
                return False
        key = (client[0], client[1])
        self._by_source.setdefault(source, {})[key] = transport
        self._source[key] = source
        return True

    def _make_room(self, source: Source, client: tuple[str, int]) -> bool:
        """A full pool shared fairly: a newcomer whose source holds fewer than the pool's largest holder (by at least
        two) takes the place of that holder's oldest connection, which is reset. In the network's pool the share is
        first by network (group_of: a /24, an IPv6 /48), then by address within it. So a host that fills the pool
        from 8 addresses (or 254, or many /64s of a /48) cannot keep the owner's phone out: the phone's address holds
        fewer than any of them. False when the source is at its own cap or holds as many as anyone, and in the
        gateway's own user's pool (all of it the owner's: no one to share it with)."""
        mine = len(self._by_source.get(source, {}))
        pool = source[0]
        if mine >= self.per_source or pool == "yours":
            return False
        held = [(s, b) for s, b in self._by_source.items() if s[0] == pool and b and s != source]
        other_network = False  # the newcomer's network holds fewer than another: that one gives way
        if pool == "network":
            groups: dict[str, int] = {}
            for s, b in [*held, (source, self._by_source.get(source, {}))]:
                groups[group_of(s[1])] = groups.get(group_of(s[1]), 0) + len(b)
            own = group_of(source[1])
            largest = max(groups, key=lambda g: groups[g])
            other_network = groups[largest] >= groups.get(own, 0) + 2
            held = [(s, b) for s, b in held if group_of(s[1]) == (largest if other_network else own)]
        if not held:
            return False
        victim, bucket = max(held, key=lambda sb: len(sb[1]))
        if not other_network and len(bucket) < mine + 2:
            return False
        key = next(iter(bucket))
        transport = bucket[key]
        self.release(key)
        self.refusals.warning("connections closed to share the pool", "connection from %s (%s) closed to make room "
                              "for %s (%s): %d not signed in from there against %d", key[0], victim[1], client[0],
                              source[1], len(bucket) + 1, mine)
        if isinstance(transport, asyncio.Transport):
            reset(transport)
        else:
            transport.close()
        return True

    def signed_in(self, client: tuple[str, int] | None) -> None:
        """The connection from `client` completed `connect` (a right token, ticket or device): it is no longer
        counted, and its address, if a network one, gets reserved places (`Reserved`) for its next connections."""
        if client is None:
            return
        source = self._source.get((client[0], client[1]))
        if source is not None and source[0] in ("network", "reserved"):
            self.reserved.add(exact(client))
        self.release(client)

    def release(self, client: tuple[str, int] | None) -> None:
        """The connection signed in (a WebSocket after `connect`) or is gone."""
        if client is None:
            return
        key = (client[0], client[1])
        source = self._source.pop(key, None)
        bucket = self._by_source.get(source) if source is not None else None
        if source is not None and bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del self._by_source[source]

    def holding(self) -> int:
        self._purge()
        return self._count()


class Timer:
    """One deadline of a connection: `arm` starts it unless it runs already (so the time counts from the first
    cause), `disarm` stops it; `fire` is called when it runs out."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float, fire: Callable[[], None]) -> None:
        self.loop, self.seconds, self.fire = loop, seconds, fire
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if self._handle is None:
            self._handle = self.loop.call_later(self.seconds, self._ran_out)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _ran_out(self) -> None:
        self._handle = None
        self.fire()


def _ip_port(address: tuple[str, int | None] | None) -> tuple[str, int] | None:
    return (address[0], address[1]) if address is not None and address[1] is not None else None


def reset(transport: asyncio.Transport) -> None:
    """End a connection at once, dropping what it has not sent, the kernel's buffer too: a plain close leaves a
    socket whose reader takes nothing to linger with its megabytes (a reset, SO_LINGER 0, frees them)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def request_overdue(transport: asyncio.Transport, client: tuple[str, int] | None, unsigned: Unsigned,
                    deadline: float) -> None:
    """A connection's request did not come whole within the deadline: closed, at once if bytes are still unsent
    (close() would wait for them to be read: for ever, by such a client)."""
    if not transport.is_closing():
        unsigned.refusals.warning("connections that sent no request in time", "connection from %s closed: no whole "
                                  "request within %.0f s", client and client[0], deadline)
        transport.close()
    if transport.get_write_buffer_size():
        reset(transport)


def reply_unread(transport: asyncio.Transport, client: tuple[str, int] | None, unsigned: Unsigned,
                 deadline: float) -> None:
    """A connection's reply is still not read after the deadline: ended at once, its unsent bytes dropped."""
    if transport.get_write_buffer_size():
        unsigned.refusals.warning("connections that read no reply in time", "connection from %s closed: its reply "
                                  "not read within %.0f s", client and client[0], deadline)
        reset(transport)


def protocol_class(unsigned: Unsigned, deadline: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with `unsigned`'s cap and a deadline for each request (headers and body) and for
    reading each reply.

    The reply's deadline: a client that leaves the gateway's buffer full (pause_writing), or has not taken the end
    of a reply, must read within the deadline too. Without it a client that asked for /static/chat.js a hundred
    times and read nothing held its connection for ever; and once uvicorn's keep-alive rule closed it, asyncio kept
    the descriptor until the buffer drained (never) while the count no longer saw it (a closing transport): such
    connections had no cap at all."""
    import h11  # uvicorn's, loaded only by a gateway that serves
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        _upgraded = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.request_timer = Timer(self.loop, deadline, partial(request_overdue, transport, self.client, unsigned,
                                                                    deadline))
            self.reading_timer = Timer(self.loop, deadline, partial(reply_unread, transport, self.client, unsigned,
                                                                    deadline))
            if not unsigned.admit(self.client, transport, _ip_port(self.server)):
                transport.abort()
                return
            self.request_timer.arm()

        def pause_writing(self) -> None:
            super().pause_writing()
            self.reading_timer.arm()

        def resume_writing(self) -> None:
            super().resume_writing()
            self.reading_timer.disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.get_write_buffer_size():
                self.reading_timer.arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._upgraded:
                return  # the WebSocket's own protocol reads from here on (its deadline: webchat_api.py)
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and data:
                self.request_timer.arm()  # a request begun: whole, body included, by the deadline, however slowly
            else:
                self.request_timer.disarm()

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            self._upgraded = True
            self._stop()
            super().handle_websocket_upgrade(event)

        def _stop(self) -> None:
            self.request_timer.disarm()
            self.reading_timer.disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop()
            unsigned.release(self.client)
            super().connection_lost(exc)

        def shutdown(self) -> None:
            self._stop()
            super().shutdown()

    return Guarded


def uvicorn_options(unsigned: Unsigned, deadline: float) -> dict[str, Any]:
    """uvicorn.Config's arguments for both rules."""
    return {"http": protocol_class(unsigned, deadline)}
