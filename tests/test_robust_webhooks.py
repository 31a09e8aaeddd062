"""Slow senders cannot hold the gateway's webhook routes: a body not in within the deadline gets 408, past
the cap of bodies being read the oldest reader is evicted at once (408), a declared oversize body 413 before
it is read; hundreds of trickling connections are all answered and closed, and a real event still gets
through."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from agenthelpers import load_offline
from channelhelpers import FAST, run, serve_asgi
from fakes.fake_whatsapp import PHONE_NUMBER_ID, sign, text_message, webhook_body
from hermit.channels import webhook
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig
from hermit.gateway.state import ensure_token
from hermit.gateway.supervisor import Gateway

SECRET = "app-secret"
PATH = "/hooks/whatsapp/personal/"


async def _slow_request(host: str, port: int, declared: int = 1000) -> tuple[int, float]:
    """Headers and a few bytes of a body that never completes: the status the gateway answers, and when."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {declared}\r\n\r\n{{\"entry\"".encode())
    await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
        await asyncio.wait_for(reader.read(), 30)  # the gateway closes the connection after answering
    finally:
        writer.close()
    return int(line.split()[1]) if line else 0, time.monotonic() - started


def test_five_hundred_slow_bodies_are_answered_and_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook, "BODY_DEADLINE_SECONDS", 1.0)
    readers = webhook.BodyReaders(16, webhook.MAX_HELD_BYTES)
    monkeypatch.setattr(webhook, "READERS", readers)
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url="http://127.0.0.1:9")
    wa = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token="v",
                         inbox_dir=tmp_path / "inbox", state_dir=tmp_path, policy=FAST)
    gw = Gateway(load_offline(tmp_path), tmp_path, {}, {}, ensure_token(tmp_path), host="127.0.0.1", port=0,
                 channels=[wa], service_factories=[])

    async def main() -> None:
        published: list[str] = []

        class Sink:
            async def publish(self, msg: object) -> str:
                published.append(getattr(msg, "text", ""))
                return "queued"

        await wa.start(Sink())  # type: ignore[arg-type]
        try:
            async with serve_asgi(gw.app) as base:
                host, port = base.removeprefix("http://").split(":")
                results = await asyncio.gather(*(_slow_request(host, int(port)) for _ in range(500)))
                statuses = [s for s, _ in results]
                # 16 read until the deadline (408); the rest came in a burst, none of the 16 had waited a second
                # for a byte, so they were answered 503 at once (or evicted a reader that had: 408)
                assert set(statuses) <= {408, 503} and statuses.count(408) >= 16, sorted(set(statuses))
                assert max(t for _, t in results) < 10
                status, took = await _slow_request(host, int(port), declared=10**9)
                assert status == 413 and took < 5  # refused by its Content-Length, at the deadline at most
                async with httpx.AsyncClient() as c:
                    body = json.dumps(webhook_body(text_message("4915", "still here", "wamid.9"))).encode()
                    r = await c.post(base + PATH, content=body, headers=sign(SECRET, body))
                    assert r.status_code == 200 and published == ["still here"]
                assert len(readers) == 0 and readers.held == 0  # every slot given back
                assert webhook.HANDLING.now == 0
        finally:
            await wa.stop()
    run(main, timeout=120)
