"""httpx clients that send no request for this machine through a proxy, whatever URL the request is for.

`hermit.loopback.direct_here` gives a client `mounts` for the names and the addresses it is built with (the base
URLs of the config). A platform hands out URLs of its own at run time: WhatsApp's media lookup answers with a
download URL, which for a Graph double or relay of one's own may be at another address of this machine
(127.0.0.2, the machine's LAN address) than its base URL. Such a request went through HTTP_PROXY with the
access token in its Authorization header. These clients decide for each request: a host that is `localhost`,
`*.localhost`, a loopback address or one of this machine's own goes direct; any other keeps the environment's
proxy. httpx picks a request's transport in `_transport_for_url` (httpx 0.29, pinned in requirements.lock):
overridden here, the one place it can be decided per request.
"""

from __future__ import annotations

import httpx

from hermit.loopback import is_here


class DirectHereClient(httpx.Client):
    def _transport_for_url(self, url: httpx.URL) -> httpx.BaseTransport:
        return self._transport if is_here(url.host) else super()._transport_for_url(url)


class DirectHereAsyncClient(httpx.AsyncClient):
    def _transport_for_url(self, url: httpx.URL) -> httpx.AsyncBaseTransport:
        return self._transport if is_here(url.host) else super()._transport_for_url(url)
