"""WhatsApp adapter: signed webhook (served by uvicorn on 127.0.0.1) in, the fake Graph API out."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, text_message, webhook_body
from hermit.channels.base import ChannelDeps, OutboundMessage, Target
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel, create_channel, signature_ok
from hermit.config.schema import WhatsAppAccountConfig
from hermit.errors import ChannelError, ConfigError

SECRET = "app-secret"
VERIFY = "verify-me"


@asynccontextmanager
async def whatsapp(tmp: Path) -> AsyncIterator[tuple[FakeWhatsApp, WhatsAppChannel, QueueSink, str]]:
    fake = await FakeWhatsApp().start()
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
    ch = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token=VERIFY,
                         inbox_dir=tmp / "ws" / "inbox", state_dir=tmp, policy=FAST)
    sink = QueueSink()
    await ch.start(sink)
    try:
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base:
            yield fake, ch, sink, base + "/hooks/whatsapp/personal/"
    finally:
        await ch.stop()
        await fake.stop()


def test_webhook_verification_echoes_the_challenge_only_for_the_right_token(tmp_path: Path) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (_fake, _ch, _sink, url), httpx.AsyncClient() as c:
            ok = await c.get(url, params={"hub.mode": "subscribe", "hub.verify_token": VERIFY,
                                          "hub.challenge": "1158201444"})
            assert ok.status_code == 200 and ok.text == "1158201444"
            bad = await c.get(url, params={"hub.mode": "subscribe", "hub.verify_token": "guess",
                                           "hub.challenge": "1158201444"})
            assert bad.status_code == 403 and "1158201444" not in bad.text
            odd = await c.get(url, params={"hub.mode": "subscribe", "hub.verify_token": "véri",
                                           "hub.challenge": "1158201444"})
            assert odd.status_code == 403 and "1158201444" not in odd.text
    run(main)


def test_signed_message_is_published_once_and_answered(tmp_path: Path) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (fake, ch, sink, url), httpx.AsyncClient() as c:
            body = json.dumps(webhook_body(text_message("15551234", "hola", "wamid.A1"))).encode()
            r = await c.post(url, content=body, headers=sign(SECRET, body))
            assert r.status_code == 200
            assert (await c.post(url, content=body, headers=sign(SECRET, body))).status_code == 200  # redelivery
            msg = await sink.next()
            assert (msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.text, msg.sender_name) == \
                ("whatsapp", "personal", "dm", "15551234", "hola", "Ann")
            await asyncio.sleep(0.1)
            assert len(sink.published) == 1
            await ch.send(OutboundMessage(Target.of(msg), "¡hola!"))
            [sent] = fake.sent()
            assert sent["to"] == "15551234" and sent["text"]["body"] == "¡hola!"
            assert sent["messaging_product"] == "whatsapp"
    run(main)


def test_messages_for_another_number_are_ignored(tmp_path: Path) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (_fake, _ch, sink, url), httpx.AsyncClient() as c:
            body = json.dumps(webhook_body(text_message("1555", "not for us", "wamid.X"),
                                           phone_number_id="999")).encode()
            assert (await c.post(url, content=body, headers=sign(SECRET, body))).status_code == 200
            await asyncio.sleep(0.1)
            assert sink.published == []
    run(main)


@pytest.mark.parametrize("forgery", ["wrong-secret", "missing", "tampered", "not-sha256", "not-ascii"])
def test_a_forged_signature_gets_401_and_nothing_is_dispatched(tmp_path: Path, forgery: str) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (_fake, _ch, sink, url), httpx.AsyncClient() as c:
            body = json.dumps(webhook_body(text_message("15551234", "pay me", "wamid.F"))).encode()
            headers = {
                "wrong-secret": sign("other-secret", body),
                "missing": {"Content-Type": "application/json"},
                "tampered": sign(SECRET, body.replace(b"pay me", b"PAY ME")),
                "not-sha256": {"X-Hub-Signature-256": "sha1=" + "0" * 40},
                "not-ascii": {"X-Hub-Signature-256": "sha256=é…".encode()},
            }[forgery]
            r = await c.post(url, content=body, headers=headers)
            assert r.status_code == 401
            await asyncio.sleep(0.1)
            assert sink.published == []
    run(main)


def test_media_is_downloaded_into_inbox(tmp_path: Path) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (fake, _ch, sink, url), httpx.AsyncClient() as c:
            fake.media["MEDIA1"] = (b"%PDF-1.7 bytes", "application/pdf")
            m = {"from": "1555", "id": "wamid.D1", "timestamp": str(int(time.time())), "type": "document",
                 "document": {"id": "MEDIA1", "filename": "invoice.pdf", "mime_type": "application/pdf",
                              "caption": "my invoice"}}
            body = json.dumps(webhook_body(m)).encode()
            assert (await c.post(url, content=body, headers=sign(SECRET, body))).status_code == 200
            msg = await sink.next()
            [att] = msg.attachments
            assert msg.text == "my invoice" and att.kind == "document" and att.name == "invoice.pdf"
            assert Path(att.path).read_bytes() == b"%PDF-1.7 bytes"
            assert Path(att.path).parent == (tmp_path / "ws" / "inbox").resolve()
    run(main)


@pytest.mark.parametrize("fault", ["429", "500", "drop"])
def test_send_retries_and_delivers_once(tmp_path: Path, fault: str) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (fake, ch, _sink, _url):
            fake.fail("messages", fault, fault)  # type: ignore[arg-type]
            await ch.send(OutboundMessage(Target("whatsapp", "personal", "dm", "1555"), "once"))
            assert [s["text"]["body"] for s in fake.sent()] == ["once"]
    run(main)


def test_a_rejected_send_raises_with_the_platform_reason(tmp_path: Path) -> None:
    async def main() -> None:
        async with whatsapp(tmp_path) as (fake, ch, _sink, _url):
            fake.access_token = "rotated"
            with pytest.raises(ChannelError, match="Invalid OAuth access token"):
                await ch.send(OutboundMessage(Target("whatsapp", "personal", "dm", "1555"), "x"))
            assert "401" in (ch.status().last_error or "")
    run(main)


def test_signature_check_is_exact() -> None:
    body = b'{"x": 1}'
    header = sign(SECRET, body)["X-Hub-Signature-256"]
    assert signature_ok(SECRET, body, header)
    assert not signature_ok(SECRET, body + b" ", header)
    assert not signature_ok("", body, header)


def test_factory_reads_three_secrets_by_name(tmp_path: Path) -> None:
    cfg = WhatsAppAccountConfig(phone_number_id="1")
    env = {"WHATSAPP_ACCESS_TOKEN": "a", "WHATSAPP_APP_SECRET": "b", "WHATSAPP_VERIFY_TOKEN": "c"}
    ch = create_channel(ChannelDeps(tmp_path, env, time.time), "personal", cfg)
    assert ch.account_id == "personal" and len(ch.http_routes()) == 1
    with pytest.raises(ConfigError, match="WHATSAPP_APP_SECRET"):
        create_channel(ChannelDeps(tmp_path, {**env, "WHATSAPP_APP_SECRET": ""}, time.time), "personal", cfg)
    with pytest.raises(ChannelError, match="phone_number_id"):
        create_channel(ChannelDeps(tmp_path, env, time.time), "personal", WhatsAppAccountConfig())
