"""The one proxy rule of every HTTP client and websocket Hermit opens: a request for this machine goes direct, a
request for any other host follows the environment's proxy variables (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and
NO_PROXY, as httpx reads them), decided for each request by the host it is for.

This machine is `localhost`, `*.localhost`, a loopback address, the unspecified one, an address of this machine's
own (its LAN address) and the numeric spellings a resolver reads as one of them (2130706433, 127.1):
`hermit.loopback.is_here`; and a name this machine calls itself: its hostname, or a name /etc/hosts gives one of its
addresses (the resolver reads that file before DNS; a proxy elsewhere does not, and got a local model's prompts and
key when its URL said `http://<hostname>:11434`). No other name is resolved: it keeps the environment's proxy.

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

import os
import socket
import threading
from typing import Literal
from urllib.parse import urlsplit

import httpx

from hermit.loopback import is_here

HOSTS_FILE = "/etc/hosts"
MAX_HOSTS_BYTES = 1 << 20


def here(host: str) -> bool:
    """Whether a request for `host` is for this machine: `is_here`, or a name this machine calls itself."""
    if is_here(host):
        return True
    name = host.strip("[]").lower().rstrip(".")
    return bool(name) and (name == socket.gethostname().lower().rstrip(".") or name in _hosts.names())


class _HostsNames:
    """The names /etc/hosts gives an address of this machine, read again when the file changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, int, int] | None = None
        self._names: frozenset[str] = frozenset()

    def names(self) -> frozenset[str]:
        try:
            st = os.stat(HOSTS_FILE)
        except OSError:
            return frozenset()
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if key != self._key:
                self._names, self._key = _read_hosts(), key
            return self._names


def _read_hosts() -> frozenset[str]:
    try:
        with open(HOSTS_FILE, "rb") as f:
            text = f.read(MAX_HOSTS_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return frozenset()
    names: set[str] = set()
    judged: dict[str, bool] = {}  # an ad-blocking hosts file names 0.0.0.0 on thousands of lines
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        if fields[0] not in judged:
            judged[fields[0]] = is_here(fields[0])
        if judged[fields[0]]:
            names.update(n.lower().rstrip(".") for n in fields[1:])
    return frozenset(names)


_hosts = _HostsNames()


class DirectHereClient(httpx.Client):
    def _transport_for_url(self, url: httpx.URL) -> httpx.BaseTransport:
        return self._transport if here(url.host) else super()._transport_for_url(url)


class DirectHereAsyncClient(httpx.AsyncClient):
    def _transport_for_url(self, url: httpx.URL) -> httpx.AsyncBaseTransport:
        return self._transport if here(url.host) else super()._transport_for_url(url)


def goes_direct(client: DirectHereClient, url: str) -> bool:
    """Whether `client` sends a request for `url` straight to its host (no proxy): what `hermit doctor` reports.
    httpx.InvalidURL for a URL httpx cannot read."""
    return client._transport_for_url(httpx.URL(url)) is client._transport


def websocket_proxy(url: str) -> Literal[True] | None:
    """`websockets.connect`'s `proxy` for `url`, by the same rule: none for a websocket on this machine (a relay of
    one's own: its frames would cross the environment's proxy in plain text), the environment's (True) for any
    other host. The host is read as `websockets` connects to it: IDNA-encoded (`localhost。` is `localhost.`)."""
    host = urlsplit(url).hostname or ""
    if not url.isascii():  # what websockets (uri.parse_uri) does
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return True  # websockets cannot encode it either: it connects nowhere
    return None if here(host) else True
