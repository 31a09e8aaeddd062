"""The gateway's ASGI app (Starlette): the web app's page, its static files and favicon, its WebSocket, the
token-protected status, and the webhook routes channels contribute under /hooks/<channel>/<account>/.

Nothing else is served without the token: every piece of data the page shows travels over the
WebSocket after `connect`.

The Host header is checked too (`HostCheck`), against DNS rebinding: a page on a name the attacker
controls, re-pointed at this machine, is same-origin with the gateway in the browser's eyes, so its
Origin matches its Host and the WebSocket's Origin check lets it through (it still needs the token). The
page, its files, `/status` and the WebSocket answer only a Host that is an IP address (a browser sends one
only for a page loaded from that very address and port: the gateway itself), `localhost`, or the host of
an origin listed in `gateway.allowed_origins` (a name or a reverse proxy's public name); anything else
gets 421. Webhook routes are exempt: platforms reach them through a tunnel or proxy under its public
name, and each checks the platform's signature before anything else.

Every static file goes out with the page's SECURITY_HEADERS too (`PageFiles`): /static/index.html is the
app itself, and without them it could be framed and would run under no CSP. Every other reply (error pages, /status,
the favicon, the 421, webhook replies) gets REPLY_HEADERS where it sets none of its own (`ReplyHeaders`)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from hermit.gateway.webchat_api import WebchatApi
from hermit.refusals import RefusalLog, clip

STATIC_DIR = Path(str(files("hermit.gateway") / "static"))
# The page loads only its own files; even if escaping failed somewhere, injected markup could run no
# script and reach no other host. Trusted Types: the app writes text only (dom.js's el(), never innerHTML), so a
# browser refuses any string given to an HTML or script sink, and no policy may be made to let one through.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"),
    "Referrer-Policy": "no-referrer",  # the page URL carries a sign-in ticket, or the token
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


# What every other reply of the gateway carries when it sets none of its own (ReplyHeaders): error pages, /status,
# the favicon, the Host check's 421, webhook replies (one echoes WhatsApp's `hub.challenge`). Each is a document of
# the web app's origin if a browser opens it: it runs no script, cannot be framed, is never sniffed as HTML and
# (/status names the channels, their errors and the connected clients) is not kept in a cache.
REPLY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class ReplyHeaders:
    """ASGI middleware: REPLY_HEADERS added to each HTTP reply that does not set that header itself (the page and
    its files keep SECURITY_HEADERS and their cache rules, the favicon its max-age)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in REPLY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class PageFiles(StaticFiles):
    """The web app's static files, each with SECURITY_HEADERS (its CSP forbids framing: frame-ancestors).

    Scripts, styles and images go out `no-cache` with an ETag of their content: a reload asks whether they
    changed and gets 304 without a body (under `no-store` a phone on a slow link downloaded the whole app
    again at every reload). An HTML file stays `no-store`, as the page at / (opened by a URL that carries
    the token or a sign-in ticket: no cache entry is kept under it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._etags: dict[tuple[str, int, int], str] = {}

    def _etag(self, path: str, st: os.stat_result) -> str:
        """A strong ETag from the file's bytes (not its mtime: an upgrade may keep sizes and times)."""
        key = (path, st.st_mtime_ns, st.st_size)
        tag = self._etags.get(key)
        if tag is None:
            with open(path, "rb") as f:
                tag = '"' + hashlib.sha256(f.read()).hexdigest()[:32] + '"'
            self._etags = {k: v for k, v in self._etags.items() if k[0] != path}
            self._etags[key] = tag
        return tag

    def file_response(self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        path = os.fspath(full_path)
        headers = {**SECURITY_HEADERS, "etag": self._etag(path, stat_result)}
        if not path.endswith(".html"):
            headers["Cache-Control"] = "no-cache"  # stored, but asked about at each use
        response = FileResponse(path, status_code=status_code, stat_result=stat_result, headers=headers)
        if status_code == 200 and self.is_not_modified(response.headers, Headers(scope=scope)):
            unchanged = NotModifiedResponse(response.headers)  # its Cache-Control and ETag, no body
            unchanged.headers.update({k: v for k, v in SECURITY_HEADERS.items() if k != "Cache-Control"})
            return unchanged
        return response


log = logging.getLogger("hermit.gateway")
HOOKS_PREFIX = "/hooks/"
MISDIRECTED = 421


def _host_name(value: str) -> str | None:
    """The host of a Host header or an origin's netloc, without port, lower case, without a final dot."""
    try:
        name = urlsplit("//" + value.strip()).hostname
    except ValueError:  # "[::1" and the like
        return None
    return name.rstrip(".") if name else None


def allowed_host_names(allowed_origins: Iterable[str]) -> frozenset[str]:
    """The names a Host header may carry besides IP addresses: localhost and the allowed origins' hosts."""
    return frozenset({"localhost"} | {n for o in allowed_origins if (n := _host_name(urlsplit(o).netloc))})


def host_allowed(host: str | None, names: frozenset[str]) -> bool:
    name = _host_name(host) if host else None
    if name is None:
        return False
    if name in names:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True  # an address: rebinding needs a name the attacker controls


class HostCheck:
    """ASGI middleware: HTTP requests and WebSocket handshakes with a Host not in `names` (nor an IP
    address) get 421 and a JSON body saying what to do; webhook routes pass untouched."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        self.app = app
        self.names = names
        self.refusals = RefusalLog(log)  # anyone reaching the port can make it refuse: a flood logs a count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"].startswith(HOOKS_PREFIX):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        if host_allowed(host, self.names):
            await self.app(scope, receive, send)
            return
        self.refusals.warning("requests with a foreign Host", "%s request for %r with Host %r refused (not this "
                              "gateway's name)", scope["type"], clip(scope["path"]), clip(host))
        refusal = JSONResponse(
            {"error": "host_refused", "message": f"this gateway does not answer to the host {host!r}",
             "hint": "open it as http://127.0.0.1:<port>/ or http://localhost:<port>/, or add the origin you "
                     "use (https://name[:port]) to gateway.allowed_origins"},
            status_code=MISDIRECTED, headers={"Cache-Control": "no-store"})
        if scope["type"] == "http":
            await refusal(scope, receive, send)
            return
        ws = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await ws.send_denial_response(refusal)
        else:  # a server without the denial extension answers 403 to a handshake closed before accept
            await ws.close(1008, "host not allowed")


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
                   Mount("/static", PageFiles(directory=STATIC_DIR), name="static")]
    for channel, account, channel_routes in hooks:
        routes.append(Mount(f"/hooks/{channel}/{account}", routes=list(channel_routes)))
    return Starlette(routes=routes, middleware=[Middleware(ReplyHeaders),  # outermost: the 421 gets them too
                                                Middleware(HostCheck, names=allowed_host_names(api.allowed_origins))])
