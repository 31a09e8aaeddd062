"""The gateway's ASGI app (Starlette): the web app's page, its static files and favicon, its WebSocket, the
token-protected status, and the webhook routes channels contribute under /hooks/<channel>/<account>/.

Nothing else is served without the token: every piece of data the page shows travels over the
WebSocket after `connect`."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from hermit.gateway.webchat_api import WebchatApi

STATIC_DIR = Path(str(files("hermit.gateway") / "static"))
# The page loads only its own files; even if escaping failed somewhere, injected markup could run no
# script and reach no other host.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "Referrer-Policy": "no-referrer",  # the page URL carries the token
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def bearer_ok(request: Request, token: str) -> bool:
    given = request.headers.get("authorization", "")
    return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())


def build_app(api: WebchatApi, token: str, status: Callable[[], Awaitable[dict[str, Any]]],
              hooks: Sequence[tuple[str, str, Sequence[BaseRoute]]] = (), *,
              webchat: bool = True) -> Starlette:
    async def index(_: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)

    async def favicon(_: Request) -> Response:
        # Browsers ask for /favicon.ico whatever the page names; a 404 there filled the console.
        return FileResponse(STATIC_DIR / "favicon.ico", media_type="image/x-icon",
                            headers={"Cache-Control": "max-age=86400"})

    async def status_route(request: Request) -> Response:
        if not bearer_ok(request, token):
            return JSONResponse({"error": "unauthorized", "hint": "send Authorization: Bearer <gateway token>"},
                                status_code=401)
        return JSONResponse(await status())

    routes: list[BaseRoute] = [Route("/status", status_route)]
    if webchat:
        routes += [Route("/", index), Route("/favicon.ico", favicon), WebSocketRoute("/ws", api.endpoint),
                   Mount("/static", StaticFiles(directory=STATIC_DIR), name="static")]
    for channel, account, channel_routes in hooks:
        routes.append(Mount(f"/hooks/{channel}/{account}", routes=list(channel_routes)))
    return Starlette(routes=routes)
