"""Webhook routes a channel contributes to the gateway's HTTP server, as plain values plus a pure-ASGI app.

A channel that receives over HTTP (Slack Events API, WhatsApp Cloud API) returns `WebhookRoute`s; the
gateway mounts `asgi_app(routes)` (or wraps each handler in its own framework's route). Handlers get the
raw body: signatures are computed over the exact bytes, before anything is parsed.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024  # platform events are small; a bigger body is refused before it is read whole
# A platform sends its whole event at once (Slack waits 3 s for the answer): a body still arriving after
# this is a client holding the connection open, answered 408.
BODY_DEADLINE_SECONDS = 10.0
# Webhook requests being read or handled at once, across every channel account of the process; past it
# the answer is 503 at once, so slow senders cannot hold the gateway's connections (or memory) hostage.
MAX_IN_FLIGHT = 64


def same_secret(given: str, expected: str) -> bool:
    """A signature or token from a request against the expected one, in constant time. Compared as bytes:
    `hmac.compare_digest` raises on non-ASCII `str`, and a header is whatever the sender put there."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


class InFlight:
    """A count of requests in progress, shared by every webhook app (one event loop: no lock needed)."""

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


IN_FLIGHT = InFlight(MAX_IN_FLIGHT)


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


async def _respond(send: Send, r: WebhookResponse, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": r.status,
                "headers": [(b"content-type", r.content_type.encode()),
                            (b"content-length", str(len(r.body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": r.body})


async def _read_body(receive: Receive, declared: int | None) -> bytes | None:
    """The whole body, or None when it is (or says it will be) over MAX_BODY: then the rest is read and
    dropped, so the sender sees the 413 rather than a reset connection."""
    chunks: list[bytes] = []
    size, too_big = 0, declared is not None and declared > MAX_BODY
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            return None if too_big else b"".join(chunks)
        piece = event.get("body", b"")
        size += len(piece)
        too_big = too_big or size > MAX_BODY
        if not too_big:
            chunks.append(piece)
        if not event.get("more_body"):
            return None if too_big else b"".join(chunks)


def asgi_app(routes: Sequence[WebhookRoute], *, body_deadline: float | None = None,
             in_flight: InFlight | None = None) -> ASGIApp:
    """An ASGI app serving `routes`: 404 elsewhere, 405 for other methods, 413 past MAX_BODY (at once when
    Content-Length says so), 408 when the body is not in after `body_deadline` seconds (default
    BODY_DEADLINE_SECONDS), 503 when `in_flight` (default: the process's IN_FLIGHT) is full."""
    table = {r.path.rstrip("/"): r for r in routes}
    limiter = IN_FLIGHT if in_flight is None else in_flight
    deadline = BODY_DEADLINE_SECONDS if body_deadline is None else body_deadline

    async def handle(scope: Scope, receive: Receive, send: Send, route: WebhookRoute) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        length = headers.get("content-length", "")
        declared = int(length) if length.isdigit() else None
        # Every refusal closes the connection: uvicorn restarts its keep-alive timer on each byte, so a
        # connection left open after an answer could be kept forever by a trickling sender.
        close = [(b"connection", b"close")]
        try:
            body = await asyncio.wait_for(_read_body(receive, declared), deadline)
        except TimeoutError:
            too_big = declared is not None and declared > MAX_BODY
            log.warning("webhook %s: refused a body that took over %.0f s", scope["path"], deadline)
            await _respond(send, WebhookResponse(413, b"body too large") if too_big
                          else WebhookResponse(408, b"request body not received in time"), close)
            return
        if body is None:
            await _respond(send, WebhookResponse(413, b"body too large"), close)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        req = WebhookRequest(scope["method"], scope["path"], body, query, headers)
        await _respond(send, await route.handler(req))

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
        if not limiter.take():
            log.warning("webhook %s: %d requests in progress, answered 503", scope["path"], limiter.now)
            await _respond(send, WebhookResponse(503, b"busy, retry later"),
                          [(b"retry-after", b"5"), (b"connection", b"close")])
            return
        try:
            await handle(scope, receive, send, route)
        finally:
            limiter.give()

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
