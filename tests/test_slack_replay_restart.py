"""A signed Slack HTTP event cannot be replayed after a gateway restart (audit D2): handled event ids are kept
on disk for longer than a signature verifies, and an event without an event_id (which could never be
recognised again) is acknowledged without being handed on. The real channel behind its webhook route on
127.0.0.1 (an ephemeral port each run), the fake Slack Web API for auth.test."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from channelhelpers import FAST, QueueSink, run, serve_asgi
from fakes.fake_slack import FakeSlack, event_body, sign
from hermit.channels.slack import SIGNATURE_WINDOW_SECONDS, SlackChannel
from hermit.channels.webhook import asgi_app
from hermit.config.schema import SlackAccountConfig

SECRET = "slack-secret"
T0 = 1_800_000_000


@asynccontextmanager
async def gateway_run(state: Path, fake: FakeSlack, clock: Callable[[], float]
                      ) -> AsyncIterator[tuple[QueueSink, str]]:
    """One gateway run's Slack channel (HTTP mode) on 127.0.0.1: a fresh instance each time, as after a
    restart, with the same state dir."""
    cfg = SlackAccountConfig(mode="http", base_url=fake.base_url + "/api")
    ch = SlackChannel("work", cfg, bot_token="xoxb-test", signing_secret=SECRET, state_dir=state, clock=clock,
                      policy=FAST)
    sink = QueueSink()
    await ch.start(sink)
    try:
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base:
            yield sink, base + "/hooks/slack/work/"
    finally:
        await ch.stop()


async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    async with httpx.AsyncClient(timeout=30) as c:
        return (await c.post(url, content=body, headers=headers)).status_code


async def settled(sink: QueueSink, marker: str) -> list[str]:
    """Everything published up to and including a fresh event sent last: a replay wrongly accepted before
    it shows up without sleeping."""
    while (await sink.next()).text != marker:
        pass
    return [m.text for m in sink.published]


def test_a_signed_event_replayed_after_a_restart_is_not_handed_on(tmp_path: Path) -> None:
    now = [float(T0)]

    async def main() -> None:
        fake = await FakeSlack().start()
        try:
            ev, eid = fake.message("transfer the files to bob", user="UOWNER", channel="DOWNER")
            body = json.dumps(event_body(ev, eid)).encode()
            # Signed with a timestamp 5 minutes ahead of the gateway's clock: still accepted, and it stays
            # valid until 10 minutes after the first delivery (what an observer or a proxy log captured).
            captured = sign(SECRET, T0 + SIGNATURE_WINDOW_SECONDS, body)
            async with gateway_run(tmp_path, fake, lambda: now[0]) as (sink, url):
                assert await post(url, body, captured) == 200
                assert await post(url, body, captured) == 200  # same run: deduped
                assert (await sink.next()).text == "transfer the files to bob"
            now[0] = T0 + 2 * SIGNATURE_WINDOW_SECONDS  # the last second the captured signature verifies
            async with gateway_run(tmp_path, fake, lambda: now[0]) as (sink, url):  # restarted
                assert await post(url, body, captured) == 200  # acknowledged (or Slack would retry it)…
                ev2, eid2 = fake.message("a new one", user="UOWNER", channel="DOWNER")
                fresh = json.dumps(event_body(ev2, eid2)).encode()
                assert await post(url, fresh, sign(SECRET, int(now[0]), fresh)) == 200
                assert await settled(sink, "a new one") == ["a new one"]  # …but not handed on again
            path = tmp_path / "channels" / "slack" / "work" / "seen-events.json"
            assert {eid, eid2} <= set(json.loads(path.read_text())["ids"])
            assert os.stat(path).st_mode & 0o777 == 0o600
        finally:
            await fake.stop()
    run(main)


def test_an_event_without_an_event_id_is_acknowledged_and_not_handed_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="hermit.channels.slack")
    now = float(T0)

    async def main() -> None:
        fake = await FakeSlack().start()
        try:
            async with gateway_run(tmp_path, fake, lambda: now) as (sink, url):
                ev, _ = fake.message("no id on me", user="UOWNER", channel="DOWNER")
                for empty in (None, "", "drop"):
                    b = event_body(ev, "")
                    if empty == "drop":
                        b.pop("event_id")
                    else:
                        b["event_id"] = empty
                    body = json.dumps(b).encode()
                    headers = sign(SECRET, T0, body)
                    assert await post(url, body, headers) == 200
                    assert await post(url, body, headers) == 200
                ev2, eid2 = fake.message("with an id", user="UOWNER", channel="DOWNER")
                fresh = json.dumps(event_body(ev2, eid2)).encode()
                assert await post(url, fresh, sign(SECRET, T0, fresh)) == 200
                assert await settled(sink, "with an id") == ["with an id"]
        finally:
            await fake.stop()
    run(main)
    refused = [r.getMessage() for r in caplog.records if "without an event_id" in r.getMessage()]
    assert len(refused) == 1  # once a run: a flood of them is not a flood of log lines
