"""Slow senders cannot lock genuine webhooks out (audit D1). Bodies being read are tracked by when their last
byte came, and a newcomer evicts the reader waiting longest (408, connection closed) among those whose
reading has begun, instead of being refused: a full set of trickling connections — however fast they are
reopened — still lets a signed WhatsApp or Slack event through, and a burst of whole requests cannot evict a
genuine one whose reading has not begun (audit H); bodies held while reading have a byte budget; the cap on
handlers applies once a body is in; a decoded %0A in a path cannot start a log line.
Real uvicorn servers on 127.0.0.1 (ephemeral ports), the fake platforms for the channels' outbound calls."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes import fake_slack, fake_whatsapp
from hermit.channels import webhook
from hermit.channels.slack import SlackChannel
from hermit.channels.webhook import ASGIApp, WebhookRequest, WebhookResponse, WebhookRoute, asgi_app
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import SlackAccountConfig, WhatsAppAccountConfig

# The process-wide limits the tests fill (checked against webhook.MAX_READERS / MAX_HELD_BYTES once the
# behaviour is: on a tree without them the tests fail on what the gateway answers, not on a missing name).
READERS = 64
HELD = 32 * 1024 * 1024
WA_PATH = "/hooks/whatsapp/personal/"
SLACK_PATH = "/hooks/slack/work/"


class Watched:
    """An ASGI app wrapped so a test can wait for requests to reach it (and for the body bytes it read)
    instead of sleeping: arrival n is the n-th request the app was called with."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.received: list[int] = []
        self._changed = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        n = len(self.received)
        self.received.append(0)

        async def counted() -> dict[str, Any]:
            event = await receive()
            self.received[n] += len(event.get("body", b""))
            self._changed.set()
            return event

        self._changed.set()
        await self.app(scope, counted, send)  # runs up to its first await before the test is woken

    async def until(self, ok: Callable[[], bool], timeout: float = 20.0) -> None:
        async def loop() -> None:
            while not ok():
                self._changed.clear()
                await self._changed.wait()
        await asyncio.wait_for(loop(), timeout)


class Slow:
    """A connection that sent headers and part of a body, then stays silent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, path: str, declared: int = 100, sent: bytes = b"ab") -> Slow:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {declared}\r\n\r\n".encode() + sent)
        await writer.drain()
        return cls(reader, writer)

    async def answer(self, timeout: float = 3.0) -> tuple[int, bytes]:
        """The status and headers the gateway answered; raises TimeoutError when it did not, and fails when
        it left the connection open after answering."""
        raw = await asyncio.wait_for(self.reader.read(), timeout)  # to EOF: the gateway closed it
        head = raw.split(b"\r\n\r\n", 1)[0]
        return int(head.split()[1]), head.lower()

    def close(self) -> None:
        self.writer.close()


@asynccontextmanager
async def opened() -> AsyncIterator[list[Slow]]:
    """The slow connections a test opens, closed before the server it is nested in stops (uvicorn waits for
    its connections on shutdown)."""
    slow: list[Slow] = []
    try:
        yield slow
    finally:
        for s in slow:
            s.close()


async def flood(watched: Watched, port: int, path: str, n: int) -> list[Slow]:
    """`n` slow connections, each one known to be inside the app before the next opens (so the first is the
    oldest reader)."""
    out = []
    for _ in range(n):
        before = len(watched.received)
        out.append(await Slow.open(port, path))
        await watched.until(lambda before=before: len(watched.received) > before)  # type: ignore[misc]
    return out


def port_of(base: str) -> int:
    """The port of a serve_asgi base URL (an ephemeral one: a fixed port collides with another run)."""
    return int(base.rsplit(":", 1)[1])


class Clock:
    """The readers' clock, moved by the test: how long a slow connection has waited is what it says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_slow_connections_filling_every_slot_do_not_lock_out_signed_webhooks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(webhook, "READERS", webhook.BodyReaders(webhook.MAX_READERS, webhook.MAX_HELD_BYTES,
                                                                clock=clock))

    async def main() -> None:
        wa_fake = await fake_whatsapp.FakeWhatsApp().start()
        slack_fake = await fake_slack.FakeSlack().start()
        wa = WhatsAppChannel("personal", WhatsAppAccountConfig(phone_number_id=fake_whatsapp.PHONE_NUMBER_ID,
                                                               base_url=wa_fake.base_url),
                             access_token="EAAG-test", app_secret="app-secret", verify_token="v",
                             inbox_dir=tmp_path / "inbox", state_dir=tmp_path, policy=FAST)
        slack = SlackChannel("work", SlackAccountConfig(mode="http", base_url=slack_fake.base_url + "/api"),
                             bot_token="xoxb-test", signing_secret="slack-secret", state_dir=tmp_path, policy=FAST)
        wa_sink, slack_sink = QueueSink(), QueueSink()
        await wa.start(wa_sink)
        await slack.start(slack_sink)
        wa_app, slack_app = Watched(asgi_app(wa.webhook_routes())), Watched(asgi_app(slack.webhook_routes()))
        try:
            async with serve_asgi(wa_app) as wa_base, serve_asgi(slack_app) as slack_base, \
                    httpx.AsyncClient(timeout=10) as c, opened() as slow:
                # Every reader slot taken by unauthenticated connections that never finish their body.
                wa_port = port_of(wa_base)
                slow += await flood(wa_app, wa_port, WA_PATH, READERS)
                # (the clock stays still: connections as fresh as the attacker likes are evicted all the same)
                body = json.dumps(fake_whatsapp.webhook_body(
                    fake_whatsapp.text_message("15550001111", "hello from the owner", "wamid.D1"))).encode()
                r = await c.post(wa_base + WA_PATH, content=body, headers=fake_whatsapp.sign("app-secret", body))
                assert r.status_code == 200, (r.status_code, r.text)
                assert (await wa_sink.next()).text == "hello from the owner"
                # It evicted the oldest slow reader: answered 408, connection closed.
                status, head = await slow[0].answer()
                assert status == 408 and b"connection: close" in head
                # The attacker takes the freed slot again; the limit is the process's, and a Slack event to
                # another app still gets in, evicting the next oldest.
                slow += await flood(wa_app, wa_port, WA_PATH, 1)
                ev, eid = slack_fake.message("hello over slack", user="U7", channel="D7")
                body = json.dumps(fake_slack.event_body(ev, eid)).encode()
                r = await c.post(slack_base + SLACK_PATH, content=body,
                                 headers=fake_slack.sign("slack-secret", int(time.time()), body))
                assert r.status_code == 200, (r.status_code, r.text)
                assert (await slack_sink.next()).text == "hello over slack"
                assert (await slow[1].answer())[0] == 408
                # The attacker reopening its connections only evicts its own older ones.
                slow += await flood(wa_app, wa_port, WA_PATH, READERS)
                assert all(status == 408 for status, _ in await asyncio.gather(
                    *(s.answer() for s in slow[2:READERS + 1])))
                assert len(webhook.READERS) == webhook.MAX_READERS == READERS
        finally:
            await wa.stop()
            await slack.stop()
            await wa_fake.stop()
            await slack_fake.stop()
        assert len(webhook.READERS) == 0 and webhook.READERS.held == 0 and webhook.HANDLING.now == 0
    run(main, timeout=90)
    assert webhook.BODY_DEADLINE_SECONDS <= 5  # Slack waits 3 s for the whole answer


def test_a_burst_of_new_readers_cannot_evict_one_whose_reading_has_not_begun() -> None:
    """A genuine request is admitted, then more in the same turn of the event loop, before its reading task first
    ran (its body already buffered): it used to be evicted as the oldest (audit H). Only a reader whose reading
    has begun — a whole request is read in the step that begins it — may be evicted for a newcomer; with none,
    the newcomer is refused (the app answers 503 + Retry-After)."""
    clock = Clock()
    pool = webhook.BodyReaders(4, HELD, clock=clock)
    genuine = webhook.Reader()
    assert pool.admit(genuine)
    burst = [webhook.Reader() for _ in range(8)]
    assert [pool.admit(r) for r in burst] == [True, True, True, False, False, False, False, False]
    assert not genuine.evicted and pool.evicted == 0 and len(pool) == 4
    for r in burst[:3]:  # their tasks ran and wait for bytes that do not come: slow senders
        r.begun = True
    clock.now = 0.5
    pool.grow(burst[1], 10)
    late = webhook.Reader()
    assert pool.admit(late)  # the begun reader waiting longest for a byte made room, never the genuine one
    assert burst[0].evicted and not genuine.evicted and pool.evicted == 1


def test_bodies_held_while_reading_have_a_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook, "BODY_DEADLINE_SECONDS", 60.0)  # only the budget can answer them here

    async def handler(req: WebhookRequest) -> WebhookResponse:
        return WebhookResponse(200, b"ok")

    async def main() -> None:
        app = Watched(asgi_app([WebhookRoute("/hooks/x/a", ("POST",), handler)]))
        size = webhook.MAX_BODY - 1  # each one under the size limit, never finished
        n = HELD // size + 8
        assert n < READERS  # so the count of readers alone evicts none of them
        async with serve_asgi(app) as base, opened() as slow:
            for k in range(n):
                slow.append(await Slow.open(port_of(base), "/hooks/x/a", declared=webhook.MAX_BODY, sent=b"x" * size))
                await app.until(lambda k=k: len(app.received) > k and app.received[k] == size)  # type: ignore[misc]
            for s in slow[:8]:  # the oldest ones made room for the newer ones' bytes
                status, head = await s.answer()
                assert status == 408 and b"connection: close" in head
            assert webhook.READERS.held <= webhook.MAX_HELD_BYTES == HELD
    run(main, timeout=90)


def test_the_cap_on_handlers_applies_once_a_body_is_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook, "HANDLING", webhook.InFlight(1))
    release = asyncio.Event()
    entered = asyncio.Event()

    async def handler(req: WebhookRequest) -> WebhookResponse:
        entered.set()
        await release.wait()
        return WebhookResponse(200, b"ok")

    async def main() -> None:
        app = Watched(asgi_app([WebhookRoute("/hooks/x/a", ("POST",), handler)]))
        async with serve_asgi(app) as base, httpx.AsyncClient(timeout=10) as c, opened() as slow:
            slow += await flood(app, port_of(base), "/hooks/x/a", 3)
            first = asyncio.create_task(c.post(base + "/hooks/x/a", content=b"{}"))
            await asyncio.wait_for(entered.wait(), 10)
            busy = await c.post(base + "/hooks/x/a", content=b"{}")
            assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
            assert busy.headers["connection"] == "close"
            release.set()
            assert (await first).status_code == 200
            assert webhook.HANDLING.now == 0
    run(main)


def test_a_path_is_logged_quoted_and_cut_short(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A route path as the server decodes it: %0A is a newline, which must not start a forged log line."""
    monkeypatch.setattr(webhook, "BODY_DEADLINE_SECONDS", 0.3)
    caplog.set_level(logging.WARNING, logger="hermit.channels.webhook")
    newline = "/hooks/x/a\nWARNING forged line"
    long = "/hooks/x/" + "p" * 5000

    async def handler(req: WebhookRequest) -> WebhookResponse:
        return WebhookResponse(200, b"ok")

    async def main() -> None:
        app = asgi_app([WebhookRoute(newline, ("POST",), handler), WebhookRoute(long, ("POST",), handler)])
        async with serve_asgi(app) as base:
            for target in ("/hooks/x/a%0AWARNING%20forged%20line", long):
                s = await Slow.open(port_of(base), target)
                try:
                    assert (await s.answer())[0] == 408
                finally:
                    s.close()
    run(main)
    lines = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert len(lines) == 2
    assert all("\n" not in line and len(line) < webhook.LOG_PATH_CHARS + 100 for line in lines), lines
    assert "'/hooks/x/a\\nWARNING forged line'" in lines[0]


def test_unsigned_webhooks_cannot_flood_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every unsigned POST to a Slack or WhatsApp webhook logged a warning: ~2,400 lines a second from anyone who
    knows the public URL rotated the gateway log's history out in about a minute (audit H). Each kind logs its
    first lines of a minute, the rest are counted."""
    caplog.set_level(logging.WARNING)
    wa = WhatsAppChannel("personal", WhatsAppAccountConfig(phone_number_id="1", base_url="http://127.0.0.1:9"),
                         access_token="EAAG-test", app_secret="app-secret", verify_token="v",
                         inbox_dir=tmp_path / "inbox", state_dir=tmp_path, policy=FAST)
    slack = SlackChannel("work", SlackAccountConfig(mode="http", base_url="http://127.0.0.1:9/api"),
                         bot_token="xoxb-test", signing_secret="slack-secret", state_dir=tmp_path, policy=FAST)

    async def main() -> None:
        for _ in range(300):
            assert (await wa.handle_http(WebhookRequest("POST", WA_PATH, b"{}"))).status == 401
            assert (await slack.handle_http(WebhookRequest("POST", SLACK_PATH, b"{}"))).status == 401
    run(main)
    lines = [r.getMessage() for r in caplog.records]
    assert 1 <= sum("whatsapp personal: refused a webhook" in m for m in lines) <= 10
    assert 1 <= sum("slack work: refused a webhook" in m for m in lines) <= 10
