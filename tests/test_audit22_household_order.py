"""Audit 22, a household's week on WhatsApp: webhooks Meta delivers at the same time, in no defined order.

Each WhatsApp message comes in a webhook of its own, and Meta sends them in parallel and retries failed ones. Ann
sends a photo of two flats and at once "the left one, not the right": the text's webhook was handed on while the
photo still downloaded, so the model read "the left one" before the photo it answers. And two edits of one message
delivered swapped ("PIN 4711" edited to "PIN 4712", then to "never mind") left the older edit's text standing.

Now a chat's messages are handed on in the order they were sent when their webhooks overlap (channels/in_order.py
`BySentTime`), another chat's message waits for nothing, and an edit older than one already taken changes nothing.

Real parts: WhatsAppChannel behind its signed webhook (uvicorn on 127.0.0.1), the fake Graph API whose media
download is held open until the test lets it go, a queue as the gateway's side.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from channelhelpers import FAST, QueueSink, run, serve_asgi, until
from fakes.fake_whatsapp import PHONE_NUMBER_ID, SlowMedia, sign, text_message, webhook_body
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig

SECRET = "app-secret"
ANN, BEA = "15550001000", "15550002000"


def photo(sender: str, mid: str, caption: str, at: int) -> dict[str, Any]:
    return {"from": sender, "id": mid, "timestamp": str(at), "type": "image",
            "image": {"caption": caption, "mime_type": "image/jpeg", "id": "M1", "sha256": "00"}}


def text(sender: str, mid: str, words: str, at: int) -> dict[str, Any]:
    return {**text_message(sender, words, mid), "timestamp": str(at)}


def edit(sender: str, original: str, eid: str, words: str, at: int) -> dict[str, Any]:
    return {"from": sender, "id": eid, "timestamp": str(at), "type": "edit",
            "edit": {"original_message_id": original, "message": {"type": "text", "text": {"body": words}}}}


Post = Callable[[dict[str, Any]], "asyncio.Task[None]"]


@asynccontextmanager
async def whatsapp(tmp: Path) -> AsyncIterator[tuple[WhatsAppChannel, SlowMedia, QueueSink, Post]]:
    fake, sink = SlowMedia(), QueueSink()
    await fake.start()
    fake.media["M1"] = (b"\xff\xd8\xff\xe0 two flats", "image/jpeg")
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
    ch = WhatsAppChannel("home", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token="v",
                         inbox_dir=tmp / "inbox", state_dir=tmp / "state", policy=FAST)
    tasks: list[asyncio.Task[None]] = []
    try:
        await ch.start(sink)
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient(timeout=60) as c:
            async def post(message: dict[str, Any]) -> None:
                body = json.dumps(webhook_body(message, name="Ann")).encode()
                r = await c.post(base + "/hooks/whatsapp/home/", content=body, headers=sign(SECRET, body))
                assert r.status_code == 200, r.text

            def start(message: dict[str, Any]) -> asyncio.Task[None]:
                tasks.append(asyncio.create_task(post(message)))
                return tasks[-1]

            yield ch, fake, sink, start
            fake.go.set()
            await asyncio.gather(*tasks)
    finally:
        fake.go.set()
        await ch.stop()
        await fake.stop()


def test_a_text_sent_after_a_photo_is_not_handed_on_before_it(tmp_path: Path) -> None:
    async def main() -> list[tuple[str, str]]:
        now = int(time.time())
        async with whatsapp(tmp_path) as (ch, fake, sink, post):
            first = post(photo(ANN, "wamid.P1", "which one?", now))
            await fake.asked.wait()  # the photo is downloading
            # Bea, in a chat of her own, waits for nothing: handed on while Ann's photo still downloads.
            await post(text(BEA, "wamid.B1", "dinner at 7", now + 1))
            await until(lambda: [m.message_id for m in sink.published] == ["wamid.B1"])
            second = post(text(ANN, "wamid.T1", "the left one, not the right", now + 1))
            await until(lambda: ch.status().messages_in == 2)  # Ann's text is read and ready to be handed on
            await asyncio.sleep(0)
            fake.go.set()
            await asyncio.gather(first, second)
            return [(m.message_id, m.text) for m in sink.published]

    published = run(main)
    assert published == [("wamid.B1", "dinner at 7"), ("wamid.P1", "which one?"),
                         ("wamid.T1", "the left one, not the right")]


def test_two_webhooks_sent_in_the_same_second_keep_their_delivery_order(tmp_path: Path) -> None:
    """Meta's timestamps are in seconds: two messages of one second are handed on in the order their webhooks
    came (here the photo's first, its text held behind its download)."""
    async def main() -> list[str]:
        now = int(time.time())
        async with whatsapp(tmp_path) as (ch, fake, sink, post):
            first = post(photo(ANN, "wamid.P1", "this one", now))
            await fake.asked.wait()
            second = post(text(ANN, "wamid.T1", "or that?", now))
            await until(lambda: ch.status().messages_in == 1)
            fake.go.set()
            await asyncio.gather(first, second)
            return [m.message_id for m in sink.published]

    assert run(main) == ["wamid.P1", "wamid.T1"]


def test_an_older_edit_delivered_after_a_newer_one_changes_nothing(tmp_path: Path) -> None:
    async def main() -> list[tuple[str, str | None]]:
        now = int(time.time())
        async with whatsapp(tmp_path) as (_ch, _fake, sink, post):
            await post(text(ANN, "wamid.T1", "door PIN 4711", now))
            await post(edit(ANN, "wamid.T1", "wamid.E2", "never mind", now + 20))  # the newer edit, first
            await post(edit(ANN, "wamid.T1", "wamid.E1", "door PIN 4712", now + 10))  # the older, retried late
            await post(edit(ANN, "wamid.T1", "wamid.E3", "never mind at all", now + 20))  # same second: taken
            return [(m.text, m.change) for m in sink.published]

    assert run(main) == [("door PIN 4711", None), ("never mind", "edited"), ("never mind at all", "edited")]


def test_an_edit_of_a_message_waiting_behind_the_photo_decides_its_text(tmp_path: Path) -> None:
    """The text waits for the photo before it; its sender edits it meanwhile: it is handed on with the new text."""
    async def main() -> list[tuple[str, str, str | None]]:
        now = int(time.time())
        async with whatsapp(tmp_path) as (ch, fake, sink, post):
            first = post(photo(ANN, "wamid.P1", "which one?", now))
            await fake.asked.wait()
            second = post(text(ANN, "wamid.T1", "the left one, door PIN 4711", now + 1))
            await until(lambda: ch.status().messages_in == 1)  # read, waiting for the photo
            await post(edit(ANN, "wamid.T1", "wamid.E1", "the left one", now + 5))
            fake.go.set()
            await asyncio.gather(first, second)
            return [(m.message_id, m.text, m.change) for m in sink.published]

    published = run(main)
    assert published[-2:] == [("wamid.P1", "which one?", None), ("wamid.T1", "the left one", None)]
    assert all("4711" not in t for _, t, change in published if change is None)
