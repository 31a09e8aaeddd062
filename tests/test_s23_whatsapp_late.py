"""A WhatsApp message Meta delivers late: its webhook came after a later message of the chat was handed on (s23 t6).

Meta retries a failed webhook for hours. Ann writes "yes, book it" (to the 9:00 slot), that webhook fails; she then
asks "what's the weather tomorrow?", answered; the retry of "yes, book it" comes an hour later. It was handed on as if
just said, after the weather answer, and read as a reply to whatever the model had said last. Now it is marked: when
it was sent and that it came late. It is not put back before the answers given since: those stand, and the late one
runs after them (its place in the transcript is where it came). A message on time carries no mark.

Real `hermit gateway run`, the WhatsApp adapter behind its signed webhook, the fake Graph API, the fake model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx

from audit19_who import last_user_text
from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, SlowMedia, sign, text_message, webhook_body
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_audit22_household_order import photo
from test_channel_gateway import stack, until

ANN = "15550001001"
POLICIES = {"wa": {"owners": [ANN]}}


def at(message: dict[str, object], sent: int) -> dict[str, object]:
    return {**message, "timestamp": str(sent)}


def test_a_message_delivered_after_a_later_one_is_marked_late_and_answered_after(tmp_path: Path) -> None:
    now = int(time.time())

    async def main() -> list[Any]:
        with FakeProvider([{"text": "ok", "repeat": True}]) as provider:
            async with stack(tmp_path, "whatsapp", provider, POLICIES) as (d, _gw):
                await d.deliver("wa", at(text_message(ANN, "LT-FIRST which slot is free?", "wamid.1"), now - 3700))
                await until(lambda: len(d.texts("wa", ANN)) == 1, "the first answer")
                await d.deliver("wa", at(text_message(ANN, "LT-WEATHER what's the weather tomorrow?", "wamid.3"),
                                         now - 60))
                await until(lambda: len(d.texts("wa", ANN)) == 2, "the weather answer")
                # The retry of a message sent before the weather question, an hour after it was sent.
                await d.deliver("wa", at(text_message(ANN, "LT-YES yes, book it", "wamid.2"), now - 3600))
                await until(lambda: len(d.texts("wa", ANN)) == 3, "the late message's answer")
                return [r.body for r in provider.requests]

    bodies = run(main, timeout=PROC_TIMEOUT * 2)
    first, weather, late = (last_user_text(b) for b in bodies)
    assert "late" not in first and "late" not in weather  # on time: no mark
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now - 3600))
    assert f"(sent {when}; it came late, after later messages" in late and "LT-YES yes, book it" in late
    said = [m["content"] for m in bodies[2]["messages"] if m.get("role") == "user"]
    order = [next(k for k in ("LT-FIRST", "LT-WEATHER", "LT-YES") if k in json.dumps(c)) for c in said]
    assert order == ["LT-FIRST", "LT-WEATHER", "LT-YES"]  # what was answered stays before it


class TricklingMedia(SlowMedia):
    """A photo on a slow link: its bytes come a few at a time (each read well inside the client's timeout) until
    `go` is set — a download that takes longer than the 30 s a later message of the chat waits for it."""

    async def _media_bytes(self, request: Any) -> Any:
        from aiohttp import web

        self.asked.set()
        data, mime = self.media[request.match_info["media_id"]]
        resp = web.StreamResponse(headers={"Content-Type": mime})
        await resp.prepare(request)
        while not self.go.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.go.wait(), 1.0)
            await resp.write(data[:1])  # a byte a second: the link is alive, just slow
        await resp.write(data)
        await resp.write_eof()
        return resp


def test_a_photo_whose_download_outlasts_the_wait_is_marked_late_when_the_text_went_first(tmp_path: Path) -> None:
    """Ann sends a photo, then "the left one": the text waits for the photo's download at most 30 s
    (channels/in_order.py), then goes on; the photo, handed on after it, is marked as sent before it."""
    async def main() -> list[tuple[str, str]]:
        now = int(time.time())
        fake, sink = TricklingMedia(), QueueSink()
        await fake.start()
        fake.media["M1"] = (b"\xff\xd8\xff\xe0 two flats", "image/jpeg")
        cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
        ch = WhatsAppChannel("home", cfg, access_token="EAAG-test", app_secret="app-secret", verify_token="v",
                             inbox_dir=tmp_path / "inbox", state_dir=tmp_path / "state", policy=FAST)
        try:
            await ch.start(sink)
            async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient(timeout=120) as c:
                async def post(message: dict[str, Any]) -> None:
                    body = json.dumps(webhook_body(message, name="Ann")).encode()
                    r = await c.post(base + "/hooks/whatsapp/home/", content=body, headers=sign("app-secret", body))
                    assert r.status_code == 200, r.text

                first = asyncio.create_task(post(photo(ANN, "wamid.P1", "which one?", now)))
                await fake.asked.wait()
                second = asyncio.create_task(post(at(text_message(ANN, "the left one", "wamid.T1"), now + 5)))
                await until(lambda: len(sink.published) == 1, "the text", PROC_TIMEOUT)  # after in_order's bound
                fake.go.set()
                await asyncio.gather(first, second)
                return [(m.message_id, m.text) for m in sink.published]
        finally:
            fake.go.set()
            await ch.stop()
            await fake.stop()

    (text_id, words), (photo_id, caption) = run(main, timeout=PROC_TIMEOUT * 2)
    assert (text_id, words) == ("wamid.T1", "the left one")
    assert photo_id == "wamid.P1" and caption.endswith("which one?")
    assert "it came late, after later messages" in caption


def test_a_delete_meta_delivers_more_than_a_day_late_is_still_taken(tmp_path: Path) -> None:
    """Ann deletes a message a minute after sending it while the gateway is down; Meta retries the webhook for days,
    and it comes 30 hours later. Messages older than 24 hours are dropped (they cannot be answered, a replay is
    refused): the delete was dropped with them, and the message it takes back stayed in her session."""
    from test_deletes_restart import revoke

    now = [float(int(time.time()))]

    async def main() -> list[tuple[str, str | None]]:
        fake, sink = FakeWhatsApp(), QueueSink()
        await fake.start()
        cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
        ch = WhatsAppChannel("home", cfg, access_token="EAAG-test", app_secret="app-secret", verify_token="v",
                             inbox_dir=tmp_path / "inbox", state_dir=tmp_path / "state", policy=FAST,
                             clock=lambda: now[0])
        try:
            await ch.start(sink)
            async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient(timeout=60) as c:
                async def post(message: dict[str, Any]) -> None:
                    body = json.dumps(webhook_body(message, name="Ann")).encode()
                    r = await c.post(base + "/hooks/whatsapp/home/", content=body, headers=sign("app-secret", body))
                    assert r.status_code == 200, r.text

                sent = int(now[0])
                await post(at(text_message(ANN, "my card is 4111-0001", "wamid.S1"), sent))
                now[0] += 30 * 3600  # the gateway was down; Meta's retry of the delete comes now
                await post(at(revoke(ANN, "wamid.S1"), sent + 60))
                await post(at(text_message(ANN, "an old message, replayed", "wamid.S2"), sent + 120))  # still dropped
                return [(m.message_id, m.change) for m in sink.published]
        finally:
            await ch.stop()
            await fake.stop()

    assert run(main) == [("wamid.S1", None), ("wamid.S1", "deleted")]
