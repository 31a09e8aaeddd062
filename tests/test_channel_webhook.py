"""The webhook seam served over real HTTP: raw bodies reach handlers; unknown paths, methods, huge bodies refused."""

from __future__ import annotations

from pathlib import Path

import httpx

from channelhelpers import run, serve_asgi
from hermit.channels.webhook import MAX_BODY, WebhookRequest, WebhookResponse, WebhookRoute, asgi_app


def test_routes_get_the_exact_bytes_query_and_lowercased_headers(tmp_path: Path) -> None:
    seen: list[WebhookRequest] = []

    async def handler(req: WebhookRequest) -> WebhookResponse:
        seen.append(req)
        return WebhookResponse(201, b"took it", "application/json")

    async def main() -> None:
        app = asgi_app([WebhookRoute("/hooks/x/a", ("POST",), handler)])
        async with serve_asgi(app) as base, httpx.AsyncClient() as c:
            body = b'{"a": 1,   "b": "\xc3\xa9"}'
            r = await c.post(base + "/hooks/x/a?hub.mode=subscribe&x=", content=body, headers={"X-Sig": "v0=1"})
            assert (r.status_code, r.text, r.headers["content-type"]) == (201, "took it", "application/json")
            assert (await c.get(base + "/hooks/x/a")).status_code == 405
            assert (await c.post(base + "/hooks/x/b", content=b"{}")).status_code == 404
            big = await c.post(base + "/hooks/x/a", content=b"x" * (MAX_BODY + 1))
            assert big.status_code == 413
        [req] = seen
        assert req.body == body and req.method == "POST" and req.path == "/hooks/x/a"
        assert req.query == {"hub.mode": "subscribe", "x": ""} and req.headers["x-sig"] == "v0=1"

    run(main)
