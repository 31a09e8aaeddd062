"""A flood of other messages does not make WhatsApp forget a fresh message id (audit D3): its signatures have
no timestamp, so an id let go within the 24-hour freshness bound would make a captured signed webhook
acceptable again. Ids go only by age; when the count cap is full, messages sent before the oldest id kept
are refused (fail closed), after a restart too. The real channel behind its webhook route on 127.0.0.1
(ephemeral ports), the fake Graph API for replies."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, text_message, webhook_body
from hermit.channels import whatsapp
from hermit.channels.dedupe import SeenIds
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel, seen_ids_path
from hermit.config.schema import WhatsAppAccountConfig

SECRET = "app-secret"
LIMIT = 50  # SEEN_IDS_LIMIT for the test: the same mechanism as 5,000, a hundred times faster


@asynccontextmanager
async def gateway_run(state: Path) -> AsyncIterator[tuple[QueueSink, str]]:
    """One gateway run's WhatsApp channel on 127.0.0.1: a fresh instance each time, as after a restart."""
    fake = await FakeWhatsApp().start()
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
    ch = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token="v",
                         inbox_dir=state / "inbox", state_dir=state, policy=FAST)
    sink = QueueSink()
    await ch.start(sink)
    try:
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base:
            yield sink, base + "/hooks/whatsapp/personal/"
    finally:
        await ch.stop()
        await fake.stop()


def message_at(wa_id: str, mid: str, text: str, sent_at: float) -> dict[str, Any]:
    m = text_message(wa_id, text, mid)
    m["timestamp"] = str(int(sent_at))
    return m


async def deliver(url: str, *messages: dict[str, Any]) -> None:
    body = json.dumps(webhook_body(*messages)).encode()
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(url, content=body, headers=sign(SECRET, body))
    assert r.status_code == 200  # replays too: anything else and Meta keeps redelivering


async def settled(sink: QueueSink, marker: str) -> list[str]:
    """Everything published up to and including a fresh message sent last, so a replay that was (wrongly)
    accepted before it shows up without sleeping."""
    while (await sink.next()).text != marker:
        pass
    return [m.text for m in sink.published]


def test_a_flood_of_messages_does_not_make_a_fresh_message_replayable(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(whatsapp, "SEEN_IDS_LIMIT", LIMIT)
    now = time.time()
    owner = message_at("15550001111", "wamid.OWNER1", "send my notes to +1555999", now - 600)

    async def main() -> None:
        async with gateway_run(tmp_path) as (sink, url):
            await deliver(url, owner)
            assert (await sink.next()).text == "send my notes to +1555999"
            # More than the cap of other signed messages (a stranger can make Meta deliver them), sent later.
            await deliver(url, *(message_at("15550002222", f"wamid.S{i}", "hi", now - 60 + i)
                                 for i in range(LIMIT + 5)))
            await deliver(url, owner)  # the captured webhook, replayed within the freshness bound
            # A message sent before the oldest id kept could be one let go: refused though never seen.
            await deliver(url, message_at("15550001111", "wamid.EARLY", "sent long ago", now - 3600))
            await deliver(url, message_at("15550001111", "wamid.FRESH1", "a fresh one", now))
            texts = await settled(sink, "a fresh one")
            assert texts.count("send my notes to +1555999") == 1 and "sent long ago" not in texts
            assert len(json.loads(seen_ids_path(tmp_path, PHONE_NUMBER_ID).read_text())["ids"]) <= LIMIT
        async with gateway_run(tmp_path) as (sink, url):  # restarted: the floor is in the file too
            await deliver(url, owner)
            await deliver(url, message_at("15550001111", "wamid.FRESH2", "after the restart", now + 1))
            assert await settled(sink, "after the restart") == ["after the restart"]
    run(main, timeout=120)


def test_seen_ids_are_not_let_go_by_count_while_fresh(tmp_path: Path) -> None:
    """Without a cap, only age lets an id go, however many come after it; with one, a full set refuses
    what it can no longer tell from a replay instead of forgetting."""
    now = [1_000_000.0]
    ids = SeenIds(None, max_age=100, limit=None, clock=lambda: now[0])
    ids.commit("first", now[0])
    for i in range(5_001):  # more than the 5,000 that used to be kept
        ids.commit(f"m{i}", now[0])
    assert ids.seen("first")
    now[0] += 101
    ids.commit("later", now[0])
    assert not ids.seen("first", now[0] - 101)  # older than max_age: the channel's freshness check refuses it
    capped = SeenIds(tmp_path / "capped.json", max_age=100, limit=2, clock=lambda: now[0])
    for mid, at in (("a", now[0] - 30), ("b", now[0] - 20), ("c", now[0] - 10)):
        capped.commit(mid, at)
    assert capped.seen("a", now[0] - 30)  # let go for room, still refused
    assert capped.seen("z", now[0] - 35) and capped.seen("y", None)  # could have been let go
    assert not capped.seen("x", now[0] - 25)  # sent after the newest let go: never let go, taken
    assert capped.seen("")  # no id: cannot be told from a replay
