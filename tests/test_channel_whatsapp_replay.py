"""A signed WhatsApp webhook cannot be replayed: message ids survive a restart (in the channel's state dir)
and messages older than 24 hours are ignored. The real channel behind its real webhook route on 127.0.0.1,
the fake Graph API for replies."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, text_message, webhook_body
from hermit.channels.dedupe import SeenIds
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import MAX_MESSAGE_AGE_SECONDS, WhatsAppChannel, seen_ids_path
from hermit.config.schema import WhatsAppAccountConfig

SECRET = "app-secret"


@asynccontextmanager
async def gateway_run(state: Path, clock: Callable[[], float] = time.time
                      ) -> AsyncIterator[tuple[WhatsAppChannel, QueueSink, str]]:
    """One gateway run's WhatsApp channel: a fresh instance each time, as after a restart."""
    fake = await FakeWhatsApp().start()
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
    ch = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token="v",
                         inbox_dir=state / "inbox", state_dir=state, clock=clock, policy=FAST)
    sink = QueueSink()
    await ch.start(sink)
    try:
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base:
            yield ch, sink, base + "/hooks/whatsapp/personal/"
    finally:
        await ch.stop()
        await fake.stop()


def signed(*messages: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(webhook_body(*messages)).encode()
    return body, sign(SECRET, body)


async def deliver(url: str, body: bytes, headers: dict[str, str]) -> int:
    async with httpx.AsyncClient() as c:
        return (await c.post(url, content=body, headers=headers)).status_code


def message_at(mid: str, text: str, sent_at: float) -> dict[str, Any]:
    m = text_message("15551234", text, mid)
    m["timestamp"] = str(int(sent_at))
    return m


def test_a_delivered_message_replayed_after_a_restart_is_ignored(tmp_path: Path) -> None:
    async def main() -> None:
        body, headers = signed(text_message("15551234", "run the deploy again", "wamid.REPLAY1"))
        async with gateway_run(tmp_path) as (_ch, sink, url):
            assert await deliver(url, body, headers) == 200
            assert (await sink.next()).text == "run the deploy again"
        path = seen_ids_path(tmp_path, PHONE_NUMBER_ID)
        assert path == tmp_path / "channels" / "whatsapp" / PHONE_NUMBER_ID / "seen-messages.json"
        assert "wamid.REPLAY1" in json.loads(path.read_text())["ids"]
        assert os.stat(path).st_mode & 0o777 == 0o600
        async with gateway_run(tmp_path) as (_ch, sink, url):  # restarted: a new process, the same state dir
            assert await deliver(url, body, headers) == 200  # 200, or Meta would keep redelivering it
            fresh_body, fresh_headers = signed(text_message("15551234", "a new one", "wamid.NEW1"))
            assert await deliver(url, fresh_body, fresh_headers) == 200
            assert (await sink.next()).text == "a new one"
            await asyncio.sleep(0.1)
            assert [m.text for m in sink.published] == ["a new one"]
    run(main)


def test_messages_older_than_a_day_are_ignored_and_reported_once_without_their_text(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="hermit.channels.whatsapp")
    now = 1_800_000_000.0

    async def main() -> None:
        async with gateway_run(tmp_path, clock=lambda: now) as (_ch, sink, url):
            for mid, text, age in [("wamid.OLD1", "secret old words", 30 * 86400),
                                   ("wamid.OLD2", "secret old words", MAX_MESSAGE_AGE_SECONDS + 60),
                                   ("wamid.LATE", "late but wanted", MAX_MESSAGE_AGE_SECONDS - 3600)]:
                assert await deliver(url, *signed(message_at(mid, text, now - age))) == 200
            assert (await sink.next()).text == "late but wanted"  # 23 h late, from Meta's retries: still taken
            await asyncio.sleep(0.1)
            assert [m.text for m in sink.published] == ["late but wanted"]
        stale = [r.getMessage() for r in caplog.records if "ignored a message sent" in r.getMessage()]
        assert len(stale) == 1 and "720 hours" in stale[0]
        assert not any("secret old words" in r.getMessage() or "15551234" in r.getMessage() for r in caplog.records)
    run(main)


@pytest.mark.parametrize("corrupt", ['{"ids": {"wamid.X": "not a time"', '{"ids": {"wamid.X": 1' + "0" * 400 + "}}",
                                     "[" * 100_000 + "]" * 100_000], ids=["torn", "huge-time", "deep"])
def test_a_corrupt_seen_ids_file_is_reported_and_replaced_not_fatal(tmp_path: Path, corrupt: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Torn JSON, a time too large for a float (OverflowError) and JSON nested too deep (RecursionError):
    the last two stopped the gateway from starting with a traceback."""
    caplog.set_level(logging.WARNING, logger="hermit.channels.dedupe")
    path = seen_ids_path(tmp_path, PHONE_NUMBER_ID)
    path.parent.mkdir(parents=True)
    path.write_text(corrupt, encoding="utf-8")

    async def main() -> None:
        async with gateway_run(tmp_path) as (_ch, sink, url):
            assert await deliver(url, *signed(text_message("15551234", "still works", "wamid.C1"))) == 200
            assert (await sink.next()).text == "still works"
    run(main)
    assert any("corrupt" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    assert list(json.loads(path.read_text())["ids"]) == ["wamid.C1"]


def test_a_seen_ids_file_that_cannot_be_written_does_not_refuse_the_message(tmp_path: Path) -> None:
    blocker = seen_ids_path(tmp_path, PHONE_NUMBER_ID).parent
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the directory should be")

    async def main() -> None:
        async with gateway_run(tmp_path) as (ch, sink, url):
            body, headers = signed(text_message("15551234", "once", "wamid.W1"))
            assert await deliver(url, body, headers) == 200  # handed on: no 500, no redelivery
            assert (await sink.next()).text == "once"
            assert await deliver(url, body, headers) == 200  # still known in memory
            await asyncio.sleep(0.1)
            assert len(sink.published) == 1
            assert "seen message ids" in (ch.status().last_error or "")
    run(main)


def test_seen_ids_are_bounded_by_age_and_count(tmp_path: Path) -> None:
    now = [1_000_000.0]
    path = tmp_path / "seen.json"
    ids = SeenIds(path, max_age=100, limit=3, clock=lambda: now[0])
    for i in range(4):
        assert not ids.seen(f"m{i}", now[0] - 10 * i)
        ids.commit(f"m{i}", now[0] - 10 * i)
    saved = json.loads(path.read_text())
    assert sorted(saved["ids"]) == ["m0", "m1", "m2"] and saved["floor"] == now[0] - 30  # the three sent last
    assert ids.seen("m3", now[0] - 30) and ids.seen("m4", now[0] - 40)  # at or before the floor: refused
    now[0] += 95  # m1 (sent 10 s before the start), m2 and the floor are now older than 100 s
    ids.commit("m5", now[0])
    reloaded = SeenIds(path, max_age=100, limit=3, clock=lambda: now[0])
    assert json.loads(path.read_text()) == {"ids": {"m0": 1_000_000.0, "m5": now[0]}}
    assert reloaded.seen("m0") and reloaded.seen("m5") and not reloaded.seen("m9", now[0])
    assert reloaded.seen("m9")  # claimed now: a concurrent redelivery is dropped …
    reloaded.forget("m9")
    assert not reloaded.seen("m9", now[0])  # … until handling fails and the claim is released
