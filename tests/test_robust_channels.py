"""Channel edges hold against bad input: a lone surrogate or a malformed update never stalls a Telegram
poller (skipped, logged, offset advanced), signed webhooks whose JSON is not an object get 400, and the
other channels' text is made valid before it is published."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_slack import FakeSlack, event_body
from fakes.fake_slack import sign as slack_sign
from fakes.fake_telegram import FakeTelegram
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, text_message, webhook_body
from fakes.fake_whatsapp import sign as wa_sign
from hermit.channels.slack import SlackChannel
from hermit.channels.telegram import TelegramChannel
from hermit.channels.telegram_state import PollState, token_dir
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import SlackAccountConfig, TelegramAccountConfig, WhatsAppAccountConfig

TOKEN = "123:TEST"


def _telegram(fake: FakeTelegram, tmp: Path) -> TelegramChannel:
    cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
    return TelegramChannel("default", cfg, TOKEN, state_dir=tmp / "state", inbox_dir=tmp / "inbox",
                           policy=FAST, reconnect_max_delay=0.05)


def _push_raw(fake: FakeTelegram, update: dict[str, Any]) -> None:
    """An update as a broken or hostile client could make Telegram deliver it (the fake's own push is well formed)."""
    fake.updates.append({"update_id": fake._next_update, **update})
    fake._next_update += 1
    fake._new_update.set()


def test_telegram_lone_surrogates_are_made_valid_and_the_account_keeps_answering(tmp_path: Path) -> None:
    async def main() -> None:
        fake = await FakeTelegram(TOKEN).start()
        ch = _telegram(fake, tmp_path)
        sink = QueueSink()
        await ch.start(sink)
        try:
            fake.push_message(chat_id=42, text="rent \ud800 due", first_name="An\udc80n")
            _push_raw(fake, {"message": {"message_id": 5, "from": {"id": 7}, "chat": "not an object"}})
            _push_raw(fake, {"message": [1, 2]})
            fake.push_message(chat_id=43, text="second chat", first_name="Bob")
            first = await sink.next()
            second = await sink.next()
        finally:
            await ch.stop()
            await fake.stop()
        assert first.text == "rent \ufffd due" and first.sender_name == "An\ufffdn"
        assert second.text == "second chat"
        state = PollState(token_dir(tmp_path / "state", TOKEN) / "state.json")
        assert state.offset == 5 and state.inflight.keys() <= {1, 4}  # the two bad updates were skipped
        assert ch.status().last_error and "skipped update" in ch.status().last_error
    run(main)


SLACK_SECRET = "s3cret-signing"
WA_SECRET = "app-secret"
NOT_OBJECTS = [b"[]", b'"x"', b"1", b"null", b"[" * 50_000 + b"]" * 50_000]


@pytest.mark.parametrize("body", NOT_OBJECTS, ids=["array", "string", "number", "null", "deep"])
def test_slack_signed_event_that_is_not_an_object_gets_400_with_a_reason(tmp_path: Path, body: bytes) -> None:
    async def main() -> None:
        fake = await FakeSlack().start()
        cfg = SlackAccountConfig(mode="http", base_url=fake.base_url + "/api")
        ch = SlackChannel("work", cfg, bot_token="xoxb-test", signing_secret=SLACK_SECRET, state_dir=tmp_path,
                          policy=FAST)
        sink = QueueSink()
        await ch.start(sink)
        try:
            async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient() as c:
                url = base + "/hooks/slack/work/"
                r = await c.post(url, content=body, headers=slack_sign(SLACK_SECRET, int(time.time()), body))
                assert r.status_code == 400 and ("not an object" in r.text or "nested deeper" in r.text), r.text
                # A signed event whose parts are the wrong shape is dropped (200: a retry brings the same).
                odd = json.dumps({"type": "event_callback", "event_id": "Ev1", "event": "x"}).encode()
                r = await c.post(url, content=odd, headers=slack_sign(SLACK_SECRET, int(time.time()), odd))
                assert r.status_code == 200
                ev, eid = fake.message("still \ud800 here", user="U7", channel="D7")
                good = json.dumps(event_body(ev, eid)).encode()
                r = await c.post(url, content=good, headers=slack_sign(SLACK_SECRET, int(time.time()), good))
                assert r.status_code == 200
                assert (await sink.next()).text == "still \ufffd here"
        finally:
            await ch.stop()
            await fake.stop()
    run(main)


@pytest.mark.parametrize("body", NOT_OBJECTS, ids=["array", "string", "number", "null", "deep"])
def test_whatsapp_signed_webhook_that_is_not_an_object_gets_400(tmp_path: Path, body: bytes) -> None:
    async def main() -> None:
        fake = await FakeWhatsApp().start()
        cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
        ch = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=WA_SECRET, verify_token="v",
                             inbox_dir=tmp_path / "inbox", state_dir=tmp_path, policy=FAST)
        sink = QueueSink()
        await ch.start(sink)
        try:
            async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient() as c:
                url = base + "/hooks/whatsapp/personal/"
                r = await c.post(url, content=body, headers=wa_sign(WA_SECRET, body))
                assert r.status_code == 400 and ("not an object" in r.text or "nested deeper" in r.text), r.text
                # Fields of the wrong shape are skipped, not a 500 that Meta would redeliver for days.
                odd = json.dumps({"entry": ["x", {"changes": [1, {"value": "v"}]}]}).encode()
                assert (await c.post(url, content=odd, headers=wa_sign(WA_SECRET, odd))).status_code == 200
                good = json.dumps(webhook_body(text_message("4915", "hi \udc80", "wamid.1"),
                                               name="A\ud800")).encode()
                assert (await c.post(url, content=good, headers=wa_sign(WA_SECRET, good))).status_code == 200
                msg = await sink.next()
                assert (msg.text, msg.sender_name) == ("hi \ufffd", "A\ufffd")
        finally:
            await ch.stop()
            await fake.stop()
    run(main)
