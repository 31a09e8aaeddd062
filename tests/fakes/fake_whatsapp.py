"""A fake WhatsApp Cloud (Graph) API on 127.0.0.1: `/{phone_number_id}/messages`, media lookup and download;
plus `webhook_body()` / `sign()` to build the signed webhook POSTs Meta sends.

By hand: `cd tests && python -m fakes.fake_whatsapp --port 18812`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import time
from typing import Any

from fakes.fake_platform import FakePlatform, json_body, serve_forever

PHONE_NUMBER_ID = "1065550100"


def sign(app_secret: str, body: bytes) -> dict[str, str]:
    mac = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={mac}", "Content-Type": "application/json"}


def text_message(wa_id: str, text: str, mid: str) -> dict[str, Any]:
    return {"from": wa_id, "id": mid, "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}


def webhook_body(*messages: dict[str, Any], phone_number_id: str = PHONE_NUMBER_ID,
                 name: str = "Ann") -> dict[str, Any]:
    contacts = [{"wa_id": m["from"], "profile": {"name": name}} for m in messages]
    return {"object": "whatsapp_business_account", "entry": [{"id": "WABA1", "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550100", "phone_number_id": phone_number_id},
        "contacts": contacts, "messages": list(messages)}}]}]}


class FakeWhatsApp(FakePlatform):
    def __init__(self, access_token: str = "EAAG-test", phone_number_id: str = PHONE_NUMBER_ID, *,
                 retry_after: float = 0.0) -> None:
        super().__init__(retry_after=retry_after)
        self.access_token = access_token
        self.phone_number_id = phone_number_id
        self.media: dict[str, tuple[bytes, str]] = {}

    def sent(self) -> list[dict[str, Any]]:
        return self.done("messages")

    def routes(self, app: Any) -> None:
        app.router.add_post("/{phone}/messages", self._messages)
        app.router.add_get("/media-bytes/{media_id}", self._media_bytes)
        app.router.add_get("/{media_id}", self._media_info)

    def _authorised(self, request: Any) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.access_token}"

    def _error(self, status: int, message: str) -> Any:
        from aiohttp import web

        return web.json_response({"error": {"message": message, "type": "OAuthException", "code": status}},
                                 status=status)

    async def _messages(self, request: Any) -> Any:
        from aiohttp import web

        body = json_body(await request.read())
        fault = await self.fault_or_none("messages", request, body)
        if fault is not None:
            return fault
        if not self._authorised(request):
            self.record("messages", body, faulted="401")
            return self._error(401, "Invalid OAuth access token.")
        if request.match_info["phone"] != self.phone_number_id:
            self.record("messages", body, faulted="400")
            return self._error(400, "Unsupported post request.")
        if len(str((body.get("text") or {}).get("body", ""))) > 4096:
            self.record("messages", body, faulted="400")
            return self._error(400, "Param text['body'] must be at most 4096 characters long.")
        self.record("messages", body)
        return web.json_response({"messaging_product": "whatsapp", "contacts": [{"wa_id": body.get("to")}],
                                  "messages": [{"id": f"wamid.OUT{len(self.calls)}"}]})

    async def _media_info(self, request: Any) -> Any:
        from aiohttp import web

        mid = request.match_info["media_id"]
        if not self._authorised(request) or mid not in self.media:
            return self._error(404, "Unknown media")
        data, mime = self.media[mid]
        return web.json_response({"url": f"{self.base_url}/media-bytes/{mid}", "mime_type": mime,
                                  "file_size": len(data), "id": mid, "messaging_product": "whatsapp"})

    async def _media_bytes(self, request: Any) -> Any:
        from aiohttp import web

        mid = request.match_info["media_id"]
        if not self._authorised(request) or mid not in self.media:
            return web.Response(status=404)
        data, mime = self.media[mid]
        return web.Response(body=data, content_type=mime)


class SlowMedia(FakeWhatsApp):
    """Media bytes sent only once `go` is set; `asked` is set when a download has begun (a photo still downloading
    while the webhooks after it arrive)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked, self.go = asyncio.Event(), asyncio.Event()

    async def _media_bytes(self, request: Any) -> Any:
        self.asked.set()
        await self.go.wait()
        return await super()._media_bytes(request)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=18812)
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(FakeWhatsApp(), args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
