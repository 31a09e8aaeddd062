"""The one proxy rule of every HTTP client and websocket Hermit opens: a request for this machine goes direct, a
request for any other host follows the environment's proxy variables (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and
NO_PROXY, as httpx reads them), decided for each request by the host it is for.

This machine is `localhost`, `*.localhost`, a loopback address, the unspecified one, an address of this machine's
own (its LAN address) and the numeric spellings a resolver reads as one of them (2130706433, 127.1):
`hermit.loopback.is_here`. A name other than localhost is not resolved: it keeps the environment's proxy.

httpx (like curl and requests) sends `http://localhost:11434` through HTTP_PROXY unless NO_PROXY names it: a
corporate or container proxy set for package downloads then got every prompt of a local model — MEMORY.md, the main
session, the key — in plain text, and could answer with tool calls; a Bot API server of one's own got the bot token
in its URL; and the port check (hermit.loopback's guard) saw the proxy's socket, not the local server's (audit 20).
A proxy cannot reach this machine's loopback anyway; Go's net/http never proxies localhost either. Deciding by the
request, not by the URLs a client is built with, matters because a platform hands out URLs of its own at run time:
WhatsApp's media lookup answers with a download URL that for a Graph double or relay of one's own may be at another
address of this machine (127.0.0.2) than its base URL, and it went through HTTP_PROXY with the access token.

httpx picks a request's transport in `_transport_for_url` (httpx 0.29, pinned in requirements.lock): overridden
here, the one place it can be decided per request. Other hosts keep the environment's proxy (HTTPS through it is a
tunnel the proxy cannot read).
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

import httpx

from hermit.loopback import is_here


class DirectHereClient(httpx.Client):
    def _transport_for_url(self, url: httpx.URL) -> httpx.BaseTransport:
        return self._transport if is_here(url.host) else super()._transport_for_url(url)


class DirectHereAsyncClient(httpx.AsyncClient):
    def _transport_for_url(self, url: httpx.URL) -> httpx.AsyncBaseTransport:
        return self._transport if is_here(url.host) else super()._transport_for_url(url)


def goes_direct(client: DirectHereClient, url: str) -> bool:
    """Whether `client` sends a request for `url` straight to its host (no proxy): what `hermit doctor` reports.
    httpx.InvalidURL for a URL httpx cannot read."""
    return client._transport_for_url(httpx.URL(url)) is client._transport


def websocket_proxy(url: str) -> Literal[True] | None:
    """`websockets.connect`'s `proxy` for `url`, by the same rule: none for a websocket on this machine (a relay of
    one's own: its frames would cross the environment's proxy in plain text), the environment's (True) for any
    other host."""
    return None if is_here(urlsplit(url).hostname or "") else True
