"""Webhook routes a channel contributes to the gateway's HTTP server, as plain values plus a pure-ASGI app.

A channel that receives over HTTP (Slack Events API, WhatsApp Cloud API) returns `WebhookRoute`s; the
gateway mounts `asgi_app(routes)` (or wraps each handler in its own framework's route). Handlers get the
raw body: signatures are computed over the exact bytes, before anything is parsed.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from hermit.refusals import RefusalLog

log = logging.getLogger(__name__)
REFUSALS = RefusalLog(log)  # anyone who knows a webhook URL can cause these: a few lines a minute per kind

MAX_BODY = 1024 * 1024  # platform events are small; a bigger body is refused before it is read whole
# A platform sends its whole event at once (Slack waits 3 s for the whole answer): a body still arriving
# after this is a client holding the connection open, answered 408.
BODY_DEADLINE_SECONDS = 5.0
# Bodies being read at once, and the bytes they may hold together, across every channel account of the
# process. Past the count, a newcomer evicts the reader that has waited longest for a byte (408, connection
# closed) among those whose reading has begun: a platform's request arrives whole, so its reading ends in the
# step that begins it, and before that step it cannot be evicted (a burst of requests admitted in the same
# turn of the event loop used to evict a genuine one whose body was already buffered), while a client
# trickling bodies, or reopening its connections as fast as it likes, only ever evicts its own. When no
# reader has begun (more than MAX_READERS requests in one turn), the newcomer is answered 503 with
# Retry-After. Past the bytes, the longest waiting others are evicted (memory first).
MAX_READERS = 64
MAX_HELD_BYTES = 32 * 1024 * 1024
# Requests whose body is in and whose handler runs (signature checked, event handed on): past it, 503.
# Only a complete request gets here, so a slow sender cannot hold these.
MAX_HANDLING = 64
LOG_PATH_CHARS = 200  # a path is logged with %r and cut here: a decoded %0A must not start a log line


def same_secret(given: str, expected: str) -> bool:
    """A signature or token from a request against the expected one, in constant time. Compared as bytes:
    `hmac.compare_digest` raises on non-ASCII `str`, and a header is whatever the sender put there."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


class InFlight:
    """A count of handlers in progress, shared by every webhook app (one event loop: no lock needed)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.now = 0

    def take(self) -> bool:
        if self.now >= self.limit:
            return False
        self.now += 1
        return True

    def give(self) -> None:
        self.now -= 1


class Reader:
    """One body being read: its task (cancelled on eviction), the bytes it holds so far, when its last byte
    came (or when it was admitted), and whether its reading has begun (its task ran up to a wait)."""

    __slots__ = ("begun", "evicted", "held", "last", "task")

    def __init__(self, now: float = 0.0) -> None:
        self.task: asyncio.Task[bytes | None] | None = None
        self.held = 0
        self.last = now
        self.begun = False
        self.evicted = False


class BodyReaders:
    """The bodies being read, shared by every webhook app (one event loop: no lock needed).

    `admit` at `limit` readers evicts, among those whose reading has begun, the one that has waited longest
    for a byte, else refuses the newcomer (False); `grow` past `max_bytes` held evicts the longest waiting
    others. An evicted reader's task is cancelled and its request answered 408 by its owner."""

    def __init__(self, limit: int, max_bytes: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.clock = clock
        self.held = 0
        self.evicted = 0  # since the process started, for logs and tests
        self._readers: dict[Reader, None] = {}

    def __len__(self) -> int:
        return len(self._readers)

    def admit(self, reader: Reader) -> bool:
        now = self.clock()
        reader.last = now
        while len(self._readers) >= max(self.limit, 1):
            idle = self._longest_waiting(spare=None, begun=True)
            if idle is None:
                return False
            self._evict(idle, f"{len(self._readers)} bodies being read")
        self._readers[reader] = None
        return True

    def grow(self, reader: Reader, size: int) -> None:
        reader.held += size
        self.held += size
        if size > 0:
            reader.last = self.clock()
        while self.held > self.max_bytes and (idle := self._longest_waiting(spare=reader)) is not None:
            self._evict(idle, f"{self.held} bytes held")

    def leave(self, reader: Reader) -> None:
        if reader in self._readers:
            del self._readers[reader]
            self.held -= reader.held

    def _longest_waiting(self, *, spare: Reader | None, begun: bool = False) -> Reader | None:
        return min((r for r in self._readers if r is not spare and (r.begun or not begun)), key=lambda r: r.last,
                   default=None)

    def _evict(self, reader: Reader, why: str) -> None:
        self.leave(reader)
        reader.evicted = True
        if reader.task is not None:
            reader.task.cancel()
        self.evicted += 1
        # A trickling client can cause thousands a second.
        REFUSALS.warning("slow webhook bodies evicted", "webhook: %s, evicted the one waiting longest for a "
                         "byte (answered 408)", why)


READERS = BodyReaders(MAX_READERS, MAX_HELD_BYTES)
HANDLING = InFlight(MAX_HANDLING)


@dataclass(frozen=True)
class WebhookRequest:
    method: str
    path: str
    body: bytes = b""
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-cased


@dataclass(frozen=True)
class WebhookResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


Handler = Callable[[WebhookRequest], Awaitable[WebhookResponse]]


@dataclass(frozen=True)
class WebhookRoute:
    path: str  # absolute, as the gateway serves it: /hooks/<channel>/<account>/ (trailing slash optional)
    methods: tuple[str, ...]
    handler: Handler


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


CLOSE = [(b"connection", b"close")]


async def _respond(send: Send, r: WebhookResponse, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": r.status,
                "headers": [(b"content-type", r.content_type.encode()),
                            (b"content-length", str(len(r.body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": r.body})


class _Gone(Exception):
    """The client went away before its body was in: there is no request to handle, nobody to answer."""


async def _read_body(receive: Receive, declared: int | None, reader: Reader, readers: BodyReaders) -> bytes | None:
    """The whole body, or None when it is (or says it will be) over MAX_BODY: then the rest is read and
    dropped, so the sender sees the 413 rather than a reset connection. The bytes kept are counted in
    `readers` as they arrive (which may evict the oldest other readers). Raises _Gone on a disconnect:
    a cut-off body is not handed to a handler (it would only fail its signature check, loudly)."""
    chunks: list[bytes] = []
    size, too_big = 0, declared is not None and declared > MAX_BODY
    reader.begun = True  # from here on it may be evicted: a whole request is read before this step ends
    try:
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                raise _Gone
            piece = event.get("body", b"")
            size += len(piece)
            too_big = too_big or size > MAX_BODY
            if too_big:
                chunks.clear()
                readers.grow(reader, -reader.held)
            elif piece:
                chunks.append(piece)
                readers.grow(reader, len(piece))
            if not event.get("more_body"):
                return None if too_big else b"".join(chunks)
    finally:
        readers.leave(reader)  # done (or gone): its slot is free before the handler runs


async def _read(scope: Scope, receive: Receive, send: Send, declared: int | None, pool: BodyReaders,
                deadline: float) -> bytes | None:
    """The body, or None once a refusal was sent (every refusal closes the connection: uvicorn restarts
    its keep-alive timer on each byte, so a connection left open could be kept by a trickling sender)."""
    reader = Reader()
    if not pool.admit(reader):  # no reader has begun: a burst in one turn of the loop, nobody to evict
        REFUSALS.warning("webhooks refused while bodies were being read", "webhook %r: %d bodies being "
                         "read, none begun, answered 503", scope["path"][:LOG_PATH_CHARS], len(pool))
        await _respond(send, WebhookResponse(503, b"busy, retry later"), [(b"retry-after", b"5"), *CLOSE])
        return None
    # No await between admitting and starting the task: eviction cancels the task.
    reader.task = task = asyncio.create_task(_read_body(receive, declared, reader, pool))
    try:
        await asyncio.wait({task}, timeout=deadline)
    finally:
        pool.leave(reader)
        task.cancel()  # a no-op once it is done
    too_big = declared is not None and declared > MAX_BODY
    if not task.done() or task.cancelled():
        if not reader.evicted:
            REFUSALS.warning("webhook bodies that took too long", "webhook %r: refused a body that took "
                             "over %.0f s", scope["path"][:LOG_PATH_CHARS], deadline)
        await _respond(send, WebhookResponse(413, b"body too large") if too_big
                       else WebhookResponse(408, b"request body not received in time"), CLOSE)
        return None
    try:
        body = task.result()
    except _Gone:
        return None
    if body is None:
        await _respond(send, WebhookResponse(413, b"body too large"), CLOSE)
    return body


def asgi_app(routes: Sequence[WebhookRoute], *, body_deadline: float | None = None,
             readers: BodyReaders | None = None, handling: InFlight | None = None) -> ASGIApp:
    """An ASGI app serving `routes`: 404 elsewhere, 405 for other methods, 413 past MAX_BODY (at once when
    Content-Length says so), 408 when the body is not in after `body_deadline` seconds (default
    BODY_DEADLINE_SECONDS) or its reader was evicted from `readers` (default: the process's READERS) to
    make room, 503 when `handling` (default: the process's HANDLING) is full once the body is in. The
    defaults are looked up per request, so a test can swap the module's values."""
    table = {r.path.rstrip("/"): r for r in routes}

    async def read(scope: Scope, receive: Receive, send: Send, declared: int | None) -> bytes | None:
        return await _read(scope, receive, send, declared, READERS if readers is None else readers,
                           BODY_DEADLINE_SECONDS if body_deadline is None else body_deadline)

    async def handle(scope: Scope, receive: Receive, send: Send, route: WebhookRoute) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        length = headers.get("content-length", "")
        body = await read(scope, receive, send, int(length) if length.isdigit() else None)
        if body is None:
            return
        limiter = HANDLING if handling is None else handling
        if not limiter.take():
            REFUSALS.warning("webhooks refused while handlers were busy", "webhook %r: %d requests being "
                             "handled, answered 503", scope["path"][:LOG_PATH_CHARS], limiter.now)
            await _respond(send, WebhookResponse(503, b"busy, retry later"), [(b"retry-after", b"5"), *CLOSE])
            return
        try:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
            response = await route.handler(WebhookRequest(scope["method"], scope["path"], body, query, headers))
        finally:
            limiter.give()
        await _respond(send, response)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        route = table.get(scope["path"].rstrip("/"))
        if route is None:
            await _respond(send, WebhookResponse(404, b"not found"))
            return
        if scope["method"] not in route.methods:
            await _respond(send, WebhookResponse(405, b"method not allowed"))
            return
        await handle(scope, receive, send, route)

    return app


class _Endpoint:
    """An ASGI app as a Starlette endpoint (Starlette wraps plain functions as request handlers instead)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def http_routes(routes: Sequence[WebhookRoute]) -> list[Any]:
    """`routes` as the Starlette routes the gateway mounts under /hooks/<channel>/<account>: the mount
    keeps the full path in the ASGI scope, so `asgi_app` still sees /hooks/<channel>/<account>/."""
    if not routes:
        return []
    from starlette.routing import Route

    return [Route("/", endpoint=_Endpoint(asgi_app(routes)))]
