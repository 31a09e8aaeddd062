"""Connections that have not signed in yet: how long they may stay, and how many of them one address may hold.

uvicorn keeps a TCP connection that never sends a byte (or half a request line) open for ever, and WebSocket pings
keep a socket that never sends `connect` open too. So anyone who can reach the port (a LAN client of a gateway on
0.0.0.0, another local user) could hold thousands of them and use up the gateway's file descriptors, locking the
owner out. Here:

- **a deadline** (`gateway.sign_in_seconds`): a connection must have sent a whole request's headers within it
  (from its opening, or from the first byte of a next request; idle keep-alive connections are uvicorn's 5 s rule),
  and a WebSocket must have completed `connect` within it from its accept (webchat_api.py closes it with
  CLOSE_SIGN_IN_TIMEOUT and says why);
- **a cap**: at most PER_SOURCE connections not signed in from one address (an IPv6 address's /64: one host has the
  whole prefix), TOTAL from everyone; one over it is closed at once. A signed-in WebSocket (the owner's page) no
  longer counts, so it is never closed or refused for this.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any

from hermit.refusals import RefusalLog

log = logging.getLogger("hermit.gateway")

PER_SOURCE = 32  # a browser opens about 6 connections per host, and a WebSocket per tab: a dozen tabs fit
TOTAL = 256  # well under the 1024 descriptors a process gets by default, whatever the number of addresses


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


class Unsigned:
    """The connections not signed in yet, by source address; each known by its client (ip, port)."""

    def __init__(self, per_source: int = PER_SOURCE, total: int = TOTAL) -> None:
        self.per_source = per_source
        self.total = total
        self._by_source: dict[str, dict[tuple[str, int], asyncio.BaseTransport]] = {}
        self.refusals = RefusalLog(log)

    def _count(self) -> int:
        return sum(len(b) for b in self._by_source.values())

    def _purge(self, source: str | None = None) -> None:
        """Forget connections already closed (one upgraded to a WebSocket that never reached the app ends unseen)."""
        for s in [source] if source is not None else list(self._by_source):
            bucket = self._by_source.get(s, {})
            for key in [k for k, t in bucket.items() if t.is_closing()]:
                del bucket[key]
            if not bucket:
                self._by_source.pop(s, None)

    def admit(self, client: tuple[str, int] | None, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection in; False (the caller closes it) when its source or everyone is at the cap."""
        if client is None:
            return True  # a unix socket: not the gateway's
        source = source_of(client)
        self._purge(source)
        if len(self._by_source.get(source, {})) >= self.per_source or self._count() >= self.total:
            self._purge()
            if len(self._by_source.get(source, {})) >= self.per_source or self._count() >= self.total:
                self.refusals.warning("connections over the cap of those not signed in", "connection from %s "
                                      "closed: %d connections not signed in from there, %d in all (caps %d, %d)",
                                      source, len(self._by_source.get(source, {})), self._count(), self.per_source,
                                      self.total)
                return False
        self._by_source.setdefault(source, {})[(client[0], client[1])] = transport
        return True

    def release(self, client: tuple[str, int] | None) -> None:
        """The connection signed in (a WebSocket after `connect`) or is gone."""
        if client is None:
            return
        source = source_of(client)
        bucket = self._by_source.get(source)
        if bucket is not None:
            bucket.pop((client[0], client[1]), None)
            if not bucket:
                del self._by_source[source]

    def holding(self) -> int:
        self._purge()
        return self._count()


def protocol_class(unsigned: Unsigned, deadline: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with `unsigned`'s cap and a deadline for each request's headers."""
    import h11  # uvicorn's, loaded only by a gateway that serves
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not unsigned.admit(self.client, transport):
                transport.abort()
                return
            self._arm()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(deadline, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                unsigned.refusals.warning("connections that sent no request in time", "connection from %s closed: "
                                          "no whole request within %.0f s", self.client and self.client[0], deadline)
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and data:
                self._arm()  # a request begun: its headers must be whole by the deadline, however slowly it comes
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            unsigned.release(self.client)
            super().connection_lost(exc)

        def shutdown(self) -> None:
            self._disarm()
            super().shutdown()

    return Guarded


def uvicorn_options(unsigned: Unsigned, deadline: float) -> dict[str, Any]:
    """uvicorn.Config's arguments for both rules."""
    return {"http": protocol_class(unsigned, deadline)}
