"""WhatsApp media are fetched before access control runs (a refused stranger's too), so they are capped like
Discord's: a file the lookup says is over whatsapp.MAX_FILE_BYTES is never downloaded, and a download that
runs past it whatever the lookup said is cut off with nothing kept; the message goes on without the file.

Real parts: the WhatsApp adapter behind its signed webhook (uvicorn on 127.0.0.1) and the fake Graph API,
here serving cap+1 bytes (with and without a Content-Length).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, webhook_body
from hermit.channels.base import InboundMessage
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import MAX_FILE_BYTES, WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig

SECRET = "app-secret"
CHUNK = 1 << 16


class SizedWhatsApp(FakeWhatsApp):
    """The fake Graph API, whose media lookup may state a size other than the file's (`declared`), and whose
    download may be streamed in chunks with no Content-Length (`chunked`); downloads are recorded."""

    declared: int | None = None
    chunked = False

    async def _media_info(self, request: Any) -> Any:
        from aiohttp import web

        resp = await super()._media_info(request)
        if self.declared is None or resp.status != 200:
            return resp
        body = json.loads(resp.body)
        return web.json_response({**body, "file_size": self.declared})

    async def _media_bytes(self, request: Any) -> Any:
        from aiohttp import web

        fault = await self.fault_or_none("media_bytes", request)
        if fault is not None:
            return fault
        self.record("media_bytes", request.match_info["media_id"])
        if not self.chunked:
            return await super()._media_bytes(request)
        data, mime = self.media[request.match_info["media_id"]]
        resp = web.StreamResponse(headers={"Content-Type": mime})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(0, len(data), CHUNK):
            await resp.write(data[i:i + CHUNK])
        await resp.write_eof()
        return resp


@asynccontextmanager
async def whatsapp(tmp: Path) -> AsyncIterator[tuple[SizedWhatsApp, QueueSink, str]]:
    fake = SizedWhatsApp()
    await fake.start()
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
    ch = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token="v",
                         inbox_dir=tmp / "inbox", state_dir=tmp, policy=FAST)
    sink = QueueSink()
    await ch.start(sink)
    try:
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base:
            yield fake, sink, base + "/hooks/whatsapp/personal/"
    finally:
        await ch.stop()
        await fake.stop()


def document_from_a_stranger(tmp: Path, size: int, *, declared: int | None = None, chunked: bool = False,
                             faults: tuple[str, ...] = ()) -> tuple[InboundMessage, list[str]]:
    """A stranger sends a document of `size` bytes; what the adapter publishes, and the downloads the fake saw."""
    async def main() -> tuple[InboundMessage, list[str]]:
        async with whatsapp(tmp) as (fake, sink, url), httpx.AsyncClient() as c:
            fake.media["M1"] = (b"\0" * size, "application/pdf")
            fake.declared, fake.chunked = declared, chunked
            fake.fail("media_bytes", *faults)  # type: ignore[arg-type]
            m = {"from": "15559999999", "id": "wamid.X1", "timestamp": str(int(time.time())), "type": "document",
                 "document": {"id": "M1", "mime_type": "application/pdf", "filename": "big.pdf",
                              "caption": "read this"}}
            body = json.dumps(webhook_body(m)).encode()
            assert (await c.post(url, content=body, headers=sign(SECRET, body))).status_code == 200
            return await sink.next(), fake.done("media_bytes")
    return run(main)


def inbox_files(tmp: Path) -> list[Path]:
    return sorted((tmp / "inbox").iterdir()) if (tmp / "inbox").exists() else []


def test_a_file_the_lookup_says_is_too_large_is_never_downloaded(tmp_path: Path) -> None:
    msg, downloads = document_from_a_stranger(tmp_path, MAX_FILE_BYTES + 1)
    [att] = msg.attachments
    assert msg.text == "read this" and att.name == "big.pdf"  # the message still goes on, without the file
    assert (att.path, att.size) == ("", MAX_FILE_BYTES + 1)
    assert downloads == [] and inbox_files(tmp_path) == []


def test_a_lying_lookup_is_cut_off_by_the_content_length(tmp_path: Path) -> None:
    msg, downloads = document_from_a_stranger(tmp_path, MAX_FILE_BYTES + 1, declared=1000)
    [att] = msg.attachments
    assert att.path == "" and downloads == ["M1"] and inbox_files(tmp_path) == []


def test_a_stream_past_the_cap_is_cut_off_and_leaves_no_partial_file(tmp_path: Path) -> None:
    msg, downloads = document_from_a_stranger(tmp_path, MAX_FILE_BYTES + 1, declared=1000, chunked=True)
    [att] = msg.attachments
    assert att.path == "" and downloads == ["M1"] and inbox_files(tmp_path) == []


def test_a_file_of_exactly_the_cap_is_kept_whole(tmp_path: Path) -> None:
    msg, _ = document_from_a_stranger(tmp_path, MAX_FILE_BYTES, chunked=True)
    [att] = msg.attachments
    assert att.path and att.size == MAX_FILE_BYTES and Path(att.path).stat().st_size == MAX_FILE_BYTES
    assert inbox_files(tmp_path) == [Path(att.path)]


def test_a_failed_download_is_retried_from_the_start(tmp_path: Path) -> None:
    msg, downloads = document_from_a_stranger(tmp_path, 3 * CHUNK + 5, chunked=True, faults=("500", "drop"))
    [att] = msg.attachments
    assert Path(att.path).read_bytes() == b"\0" * (3 * CHUNK + 5) and att.size == 3 * CHUNK + 5
    assert downloads == ["M1"]  # (the two faulted attempts are recorded as faulted)
