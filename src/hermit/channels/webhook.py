"""Webhook routes a channel contributes to the gateway's HTTP server, as plain values plus a pure-ASGI app.

A channel that receives over HTTP (Slack Events API, WhatsApp Cloud API) returns `WebhookRoute`s; the
gateway mounts `asgi_app(routes)` (or wraps each handler in its own framework's route). Handlers get the
raw body: signatures are computed over the exact bytes, before anything is parsed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

MAX_BODY = 1024 * 1024  # platform events are small; a bigger body is refused before it is read whole


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


def asgi_app(routes: Sequence[WebhookRoute]) -> ASGIApp:
    """An ASGI app serving `routes` (404 elsewhere, 405 for other methods, 413 past MAX_BODY)."""
    table = {r.path.rstrip("/"): r for r in routes}

    async def respond(send: Send, r: WebhookResponse) -> None:
        await send({"type": "http.response.start", "status": r.status,
                    "headers": [(b"content-type", r.content_type.encode()),
                                (b"content-length", str(len(r.body)).encode())]})
        await send({"type": "http.response.body", "body": r.body})

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
            await respond(send, WebhookResponse(404, b"not found"))
            return
        if scope["method"] not in route.methods:
            await respond(send, WebhookResponse(405, b"method not allowed"))
            return
        chunks, size = [], 0
        while True:
            event = await receive()
            piece = event.get("body", b"")
            size += len(piece)
            if size > MAX_BODY:
                await respond(send, WebhookResponse(413, b"body too large"))
                return
            chunks.append(piece)
            if not event.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        req = WebhookRequest(scope["method"], scope["path"], b"".join(chunks), query, headers)
        await respond(send, await route.handler(req))

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
