"""A URL a platform hands out at run time, on this machine but not at its base URL's address, goes direct (s21 t5).

s20 kept a proxy from the environment (HTTP_PROXY, ALL_PROXY, without NO_PROXY) from every request for this machine
that a client knew of when it was built: the loopback names and its base URLs' hosts. WhatsApp's media lookup answers
with a download URL of the platform's choosing; for a Graph relay or double of one's own it may be at another
address of this machine — 127.0.0.2, or the machine's LAN address — and that GET, with the access token as its
Bearer, went through the proxy (which answered 502: the file was lost too). Real WhatsApp adapter, real sockets, a
recording "proxy", a media server on each such address.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from channelhelpers import FAST, QueueSink, run
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, webhook_body
from hermit.channels.webhook import WebhookRequest
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig
from test_audit20_errors_proxy import RecordingProxy, proxy  # noqa: F401 (a fixture)
from test_s20_gateway_unsigned import lan_address

TOKEN = "EAAG-S21-MEDIA-TOKEN-5150"
SECRET = "s21-media-app-secret"
PHOTO = b"\xff\xd8\xff S21 photo bytes"


class Media(BaseHTTPRequestHandler):
    got: list[str]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.got.append(self.headers.get("Authorization", ""))
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Content-Length", str(len(PHOTO)))
        self.end_headers()
        self.wfile.write(PHOTO)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def media_server(host: str) -> Iterator[tuple[str, list[str]]]:
    got: list[str] = []
    server = ThreadingHTTPServer((host, 0), type("Handler", (Media,), {"got": got}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/m1", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class PointingWhatsApp(FakeWhatsApp):
    """The owner's own Graph double, whose media lookup hands out `media_url` (another address of this machine)."""

    media_url = ""

    async def _media_info(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"url": self.media_url, "mime_type": "image/jpeg", "file_size": len(PHOTO),
                                  "id": "M1", "messaging_product": "whatsapp"})


@pytest.mark.parametrize("host", ["127.0.0.2", "127.9.9.9"])
def test_a_media_url_at_another_address_of_this_machine_goes_direct(tmp_path: Path, host: str,
                                                                    proxy: RecordingProxy) -> None:  # noqa: F811
    with media_server(host) as (url, got):
        async def main() -> Any:
            graph = PointingWhatsApp(TOKEN)
            graph.media_url = url
            await graph.start()
            cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=graph.base_url)
            ch = WhatsAppChannel("personal", cfg, access_token=TOKEN, app_secret=SECRET, verify_token="v",
                                 inbox_dir=tmp_path / "inbox", state_dir=tmp_path, policy=FAST)
            sink = QueueSink()
            await ch.start(sink)
            try:
                m = {"from": "15551234", "id": "wamid.S21", "timestamp": str(int(time.time())), "type": "image",
                     "image": {"id": "M1", "mime_type": "image/jpeg", "caption": "look"}}
                body = json.dumps(webhook_body(m)).encode()
                headers = {k.lower(): v for k, v in sign(SECRET, body).items()}
                resp = await ch.handle_http(WebhookRequest("POST", "/", body, headers=headers))
                assert resp.status == 200
                return await sink.next()
            finally:
                await ch.stop()
                await graph.stop()
        msg = run(main)
    seen = b"".join(proxy.seen)
    assert TOKEN.encode() not in seen and seen == b"", f"the proxy got: {seen[:300]!r}"
    assert got == [f"Bearer {TOKEN}"]  # the media server itself got the one request
    [att] = msg.attachments
    assert att.path and Path(att.path).read_bytes() == PHOTO


def test_which_hosts_are_this_machine() -> None:
    """The LAN address is this machine's (the tests' socket guard lets no test connect to it, so it is checked
    here); a name other than localhost is not resolved, and another machine's address is not this one."""
    from hermit.loopback import is_here

    for host in ("localhost", "a.localhost", "127.0.0.2", "[::1]", "::ffff:127.0.0.5", lan_address()):
        assert is_here(host), host
    for host in ("example.test", "192.0.2.254", "2001:db8::9", "localhost.example"):
        assert not is_here(host), host


def test_a_host_elsewhere_keeps_the_proxy(proxy: RecordingProxy) -> None:  # noqa: F811
    """Guard: the per-request choice sends another machine's URL through the environment's proxy as before."""
    import httpx

    from hermit.direct_http import DirectHereAsyncClient

    async def main() -> int:
        async with DirectHereAsyncClient(timeout=10) as client:
            return (await client.get("http://media.example.test/m1")).status_code
    assert run(main) == 502
    assert b"GET http://media.example.test/m1" in b"".join(proxy.seen)
    assert httpx.__version__ == "0.29.0"  # _transport_for_url is httpx's: a new httpx must be checked here first


def test_setup_asks_a_local_ollama_directly(proxy: RecordingProxy) -> None:  # noqa: F811
    """`hermit setup`'s look for a local Ollama's models went through the proxy, which could answer with a list of
    its own (and see that one was asked for)."""
    from hermit.cli.setup import ollama_models

    tags = json.dumps({"models": [{"name": "llama-s21:latest"}]}).encode()

    class Tags(Media):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(tags)))
            self.end_headers()
            self.wfile.write(tags)

    server = ThreadingHTTPServer(("127.0.0.2", 0), Tags)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert ollama_models(f"http://127.0.0.2:{server.server_address[1]}") == ["llama-s21"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert proxy.seen == []
