"""Slack adapter against a fake Slack on 127.0.0.1: Socket Mode, signed HTTP events, chat.postMessage."""

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
from fakes.fake_slack import BOT_USER, TEAM, FakeSlack, event_body, sign
from hermit.channels.base import ChannelDeps, OutboundMessage, Target
from hermit.channels.slack import SlackChannel, create_channel, to_mrkdwn, verify_signature
from hermit.channels.webhook import asgi_app
from hermit.config.schema import SlackAccountConfig
from hermit.errors import ConfigError

SECRET = "s3cret-signing"


@asynccontextmanager
async def socket_mode(tmp: Path) -> AsyncIterator[tuple[FakeSlack, SlackChannel, QueueSink]]:
    fake = await FakeSlack().start()
    cfg = SlackAccountConfig(mode="socket", base_url=fake.base_url + "/api")
    ch = SlackChannel("work", cfg, bot_token="xoxb-test", app_token="xapp-test", state_dir=tmp,
                      policy=FAST, reconnect_max_delay=0.05)
    sink = QueueSink()
    await ch.start(sink)
    try:
        yield fake, ch, sink
    finally:
        await ch.stop()
        await fake.stop()


def test_socket_mode_dm_is_published_acked_and_answered(tmp_path: Path) -> None:
    async def main() -> None:
        async with socket_mode(tmp_path) as (fake, ch, sink):
            ev, eid = fake.message("hello from slack", user="U1", channel="D9")
            env = await fake.push(ev, eid)
            msg = await sink.next()
            assert (msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.sender_id, msg.team_id) == \
                ("slack", "work", "dm", "U1", "U1", TEAM)
            await fake.wait_for(lambda: env in fake.acks)
            await ch.send(OutboundMessage(Target.of(msg), "**yes** see [docs](https://example.org)"))
            [posted] = fake.posted()
            assert posted == {"channel": "D9", "text": "*yes* see <https://example.org|docs>"}
            assert ch.status().connected and ch.status().messages_in == 1 and ch.status().messages_out == 1
    run(main)


def test_app_mentions_threads_and_unmentioned_channel_messages(tmp_path: Path) -> None:
    async def main() -> None:
        async with socket_mode(tmp_path) as (fake, ch, sink):
            ev, eid = fake.message("just talking", user="U2", channel="C1", channel_type="channel")
            await fake.push(ev, eid)
            plain = await sink.next()
            assert (plain.peer_kind, plain.peer_id, plain.mentioned) == ("group", "C1", False)
            # A mention arrives twice (message + app_mention): it is published once, as the mention.
            ev, eid = fake.message(f"<@{BOT_USER}> summarise", user="U2", channel="C1", channel_type="channel",
                                   thread_ts="1700000000.000100")
            await fake.push(ev, eid)
            ev2, eid2 = fake.message(f"<@{BOT_USER}> summarise", user="U2", channel="C1", kind="app_mention",
                                     thread_ts="1700000000.000100")
            await fake.push(ev2, eid2)
            mention = await sink.next()
            assert mention.mentioned and mention.text == "summarise"
            assert mention.thread_id == "1700000000.000100" and mention.peer_id == "C1"
            await asyncio.sleep(0.2)
            assert len(sink.published) == 2
            await ch.send(OutboundMessage(Target.of(mention), "in the thread"))
            assert fake.posted() == [{"channel": "C1", "text": "in the thread", "thread_ts": "1700000000.000100"}]
    run(main)


def test_a_dropped_socket_is_reconnected_and_the_event_handled_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with socket_mode(tmp_path) as (fake, _ch, sink):
            ev, eid = fake.message("survive the drop")
            await fake.push(ev, eid, drop_after_send=True)  # redelivered on the next connection
            await sink.next()
            await fake.wait_for(lambda: fake.connections >= 2 and not fake.unacked)
            await asyncio.sleep(0.2)
            assert [m.text for m in sink.published] == ["survive the drop"]
    run(main)


@pytest.mark.parametrize("fault", ["429", "500", "drop"])
def test_post_message_retries_and_delivers_once(tmp_path: Path, fault: str) -> None:
    async def main() -> None:
        async with socket_mode(tmp_path) as (fake, ch, _sink):
            fake.fail("chat.postMessage", fault, fault)  # type: ignore[arg-type]
            target = Target("slack", "work", "group", "C1")
            await ch.send(OutboundMessage(target, "once"))
            assert [p["text"] for p in fake.posted()] == ["once"]
    run(main)


def test_connections_open_failing_is_retried_and_reported(tmp_path: Path) -> None:
    async def main() -> None:
        fake = await FakeSlack(app_token="xapp-other").start()
        cfg = SlackAccountConfig(mode="socket", base_url=fake.base_url + "/api")
        ch = SlackChannel("work", cfg, bot_token="xoxb-test", app_token="xapp-test", policy=FAST,
                          reconnect_max_delay=0.05)
        await ch.start(QueueSink())
        try:
            await fake.wait_for(lambda: len([c for c in fake.calls if c.faulted == "invalid_auth"]) >= 2)
            assert "invalid_auth" in (ch.status().last_error or "") and not ch.status().connected
        finally:
            await ch.stop()
            await fake.stop()
    run(main)


@asynccontextmanager
async def http_mode(tmp: Path, clock: float | None = None) -> AsyncIterator[tuple[FakeSlack, SlackChannel,
                                                                                  QueueSink, str]]:
    fake = await FakeSlack().start()
    cfg = SlackAccountConfig(mode="http", base_url=fake.base_url + "/api")
    ch = SlackChannel("work", cfg, bot_token="xoxb-test", signing_secret=SECRET, state_dir=tmp, policy=FAST,
                      clock=(lambda: clock) if clock else time.time)
    sink = QueueSink()
    await ch.start(sink)
    try:
        async with serve_asgi(asgi_app(ch.webhook_routes())) as base:
            yield fake, ch, sink, base + "/hooks/slack/work/"
    finally:
        await ch.stop()
        await fake.stop()


def test_http_events_url_verification_signed_event_and_retry_dedupe(tmp_path: Path) -> None:
    async def main() -> None:
        async with http_mode(tmp_path) as (fake, _ch, sink, url), httpx.AsyncClient() as c:
            body = json.dumps({"type": "url_verification", "challenge": "chal-123"}).encode()
            r = await c.post(url, content=body, headers=sign(SECRET, int(time.time()), body))
            assert r.status_code == 200 and r.text == "chal-123"
            ev, eid = fake.message("over http", user="U7", channel="D7")
            body = json.dumps(event_body(ev, eid)).encode()
            r = await c.post(url, content=body, headers=sign(SECRET, int(time.time()), body))
            assert r.status_code == 200
            retry = {**sign(SECRET, int(time.time()), body), "X-Slack-Retry-Num": "1",
                     "X-Slack-Retry-Reason": "http_timeout"}
            assert (await c.post(url, content=body, headers=retry)).status_code == 200
            msg = await sink.next()
            assert (msg.peer_id, msg.text, msg.team_id) == ("U7", "over http", TEAM)
            await asyncio.sleep(0.1)
            assert len(sink.published) == 1
    run(main)


@pytest.mark.parametrize("forgery", ["wrong-secret", "stale", "missing", "tampered", "not-ascii"])
def test_http_events_with_a_bad_signature_get_401_and_nothing_is_dispatched(tmp_path: Path, forgery: str) -> None:
    async def main() -> None:
        async with http_mode(tmp_path) as (fake, _ch, sink, url), httpx.AsyncClient() as c:
            ev, eid = fake.message("forged")
            body = json.dumps(event_body(ev, eid)).encode()
            now = int(time.time())
            headers = {
                "wrong-secret": sign("not-the-secret", now, body),
                "stale": sign(SECRET, now - 301, body),
                "missing": {"Content-Type": "application/json"},
                "tampered": sign(SECRET, now, body.replace(b"forged", b"FORGED")),
                # a header is whatever the sender wrote: compared as bytes, it is a 401, not a 500
                "not-ascii": {**sign(SECRET, now, body), "X-Slack-Signature": "v0=é…".encode()},
            }[forgery]
            r = await c.post(url, content=body, headers=headers)
            assert r.status_code == 401
            await asyncio.sleep(0.1)
            assert sink.published == []
    run(main)


def test_signature_window_is_five_minutes_both_ways() -> None:
    body = b'{"a":1}'
    h = sign(SECRET, 1_000_000, body)
    ok = [verify_signature(SECRET, h["X-Slack-Request-Timestamp"], body, h["X-Slack-Signature"], now)
          for now in (1_000_000 - 300, 1_000_000 + 300, 1_000_000 + 301, 1_000_000 - 301)]
    assert ok == [True, True, False, False]
    assert not verify_signature(SECRET, "not-a-number", body, h["X-Slack-Signature"], 1_000_000)


def test_mrkdwn_leaves_code_alone() -> None:
    assert to_mrkdwn("**a** `**b**`\n```\n**c**\n```") == "*a* `**b**`\n```\n**c**\n```"


def test_factory_needs_the_tokens_of_its_mode() -> None:
    def deps(env: dict[str, str]) -> ChannelDeps:
        return ChannelDeps(Path("/nonexistent"), env, time.time)

    sock = SlackAccountConfig(mode="socket")
    ch = create_channel(deps({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}), "work", sock)
    assert ch.webhook_routes() == [] and ch.http_routes() == []
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN"):
        create_channel(deps({"SLACK_BOT_TOKEN": "xoxb-1"}), "work", sock)
    http = SlackAccountConfig(mode="http", signing_secret_env="MY_SECRET")
    ch = create_channel(deps({"SLACK_BOT_TOKEN": "xoxb-1", "MY_SECRET": "x"}), "work", http)
    assert [r.path for r in ch.webhook_routes()] == ["/hooks/slack/work/"] and len(ch.http_routes()) == 1
