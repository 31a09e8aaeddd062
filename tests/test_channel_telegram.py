"""Telegram adapter against the fake Bot API on 127.0.0.1: polling, offsets, one poller, replies, files."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from channelhelpers import FAST, QueueSink, run
from fakes.fake_telegram import FakeTelegram, markdown_ok
from hermit.channels.base import ChannelDeps, OutboundMessage, Target, TurnEnd, Typing
from hermit.channels.telegram import TelegramChannel, create_channel
from hermit.channels.telegram_markdown import to_telegram_markdown
from hermit.channels.telegram_state import PollState, token_dir
from hermit.config.schema import TelegramAccountConfig
from hermit.errors import ChannelError, ConfigError

TOKEN = "123:TEST"
RUNNER = Path(__file__).with_name("telegram_runner.py")


def channel(fake: FakeTelegram, tmp: Path, state: Path | None = None) -> TelegramChannel:
    cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
    return TelegramChannel("default", cfg, TOKEN, state_dir=state or tmp / "state", inbox_dir=tmp / "ws" / "inbox",
                           policy=FAST, reconnect_max_delay=0.05)


@asynccontextmanager
async def telegram(tmp: Path, outcome: str = "queued") -> AsyncIterator[tuple[FakeTelegram, TelegramChannel,
                                                                              QueueSink]]:
    fake = await FakeTelegram(TOKEN).start()
    ch = channel(fake, tmp)
    sink = QueueSink(outcome)  # type: ignore[arg-type]
    await ch.start(sink)
    try:
        yield fake, ch, sink
    finally:
        await ch.stop()
        await fake.stop()


def test_dm_is_published_and_the_reply_goes_back_with_typing(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="httpx")  # httpx logs each request URL, which holds the token

    async def main() -> None:
        async with telegram(tmp_path) as (fake, ch, sink):
            fake.push_message(chat_id=42, text="hello there", first_name="Ann")
            msg = await sink.next()
            assert (msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.sender_id) == \
                ("telegram", "default", "dm", "42", "42")
            assert msg.text == "hello there" and msg.sender_name == "Ann" and not msg.mentioned
            target = Target.of(msg)
            await ch.send(Typing(target, True))
            await fake.wait_for(lambda: fake.done("sendChatAction"))
            await ch.send(OutboundMessage(target, "**Done**: see `a_b`"))
            await ch.send(TurnEnd(target, "t1", "done"))
            [sent] = fake.sent()
            assert sent["chat_id"] == "42" and sent["parse_mode"] == "Markdown"
            assert sent["text"] == "*Done*: see `a_b`"
            assert "reply_parameters" not in sent  # a DM needs no quote
            assert fake.done("sendChatAction")[0] == {"chat_id": "42", "action": "typing"}
            assert ch.status().messages_in == 1 and ch.status().messages_out == 1 and ch.status().connected
    run(main)
    assert "/bot<token>/sendMessage" in caplog.text and TOKEN not in caplog.text


def test_markdown_telegram_rejects_is_resent_as_plain_text(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, ch, sink):
            fake.push_message(chat_id=42, text="hi")
            target = Target.of(await sink.next())
            await ch.send(OutboundMessage(target, "use snake_case names"))
            [rejected] = [c for c in fake.calls if c.route == "sendMessage" and c.faulted == "400"]
            assert rejected.payload["parse_mode"] == "Markdown"
            [sent] = fake.sent()
            assert sent["text"] == "use snake_case names" and "parse_mode" not in sent
    run(main)


def test_markdown_conversion_keeps_code_and_makes_bullets_safe() -> None:
    md = "# Title\n- one **two**\n* three *it*\n```py\nx = a_b * 2\n```"
    out = to_telegram_markdown(md)
    assert out == "*Title*\n• one *two*\n• three _it_\n```py\nx = a_b * 2\n```"
    assert markdown_ok(out)


def test_group_mentions_replies_and_forum_topics(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, ch, sink):
            fake.push_message(chat_id=-100, from_id=5, chat_type="supergroup", text="just chatting")
            plain = await sink.next()
            assert (plain.peer_kind, plain.peer_id, plain.sender_id) == ("group", "-100", "5")
            assert not plain.mentioned and not plain.reply_to_bot
            fake.push_message(chat_id=-100, from_id=5, chat_type="supergroup", text="@Hermit_Bot what time is it?")
            assert (await sink.next()).mentioned
            fake.push_message(chat_id=-100, from_id=5, chat_type="supergroup", text="and now?", reply_to_bot=True)
            replied = await sink.next()
            assert replied.reply_to_bot and not replied.mentioned
            fake.push_message(chat_id=-100, from_id=5, chat_type="supergroup", text="in a topic @hermit_bot",
                              topic_id=9)
            topic = await sink.next()
            assert topic.topic_id == "9" and topic.mentioned and not topic.reply_to_bot and topic.reply_to is None
            target = Target.of(topic)
            await ch.send(OutboundMessage(target, "part one"))
            await ch.send(OutboundMessage(target, "part two"))
            first, second = fake.sent()
            assert first["chat_id"] == "-100" and first["message_thread_id"] == 9
            assert first["reply_parameters"]["message_id"] == int(topic.message_id)
            assert "reply_parameters" not in second and second["message_thread_id"] == 9
    run(main)


def test_photos_and_documents_are_saved_under_inbox(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, _ch, sink):
            fake.push_message(chat_id=42, text="look", photo=b"\xff\xd8JPEGDATA" * 10)
            fake.push_message(chat_id=42, text="", document=("report 1.pdf", b"%PDF-1.4 data"))
            photo, doc = await sink.next(), await sink.next()
            [img] = photo.attachments
            assert img.kind == "image" and Path(img.path).read_bytes() == b"\xff\xd8JPEGDATA" * 10
            assert Path(img.path).parent == (tmp_path / "ws" / "inbox").resolve()
            assert photo.text == "look"
            [pdf] = doc.attachments
            assert pdf.kind == "document" and pdf.name == "report 1.pdf"
            assert Path(pdf.path).name.endswith("report_1.pdf") and Path(pdf.path).read_bytes() == b"%PDF-1.4 data"
    run(main)


@pytest.mark.parametrize("fault", ["429", "500", "drop"])
def test_send_retries_transient_failures_and_delivers_once(tmp_path: Path, fault: str) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, ch, sink):
            fake.push_message(chat_id=42, text="hi")
            target = Target.of(await sink.next())
            fake.fail("sendMessage", fault, fault)  # type: ignore[arg-type]
            await ch.send(OutboundMessage(target, "the answer"))
            assert [m["text"] for m in fake.sent()] == ["the answer"]
            assert sum(1 for c in fake.calls if c.route == "sendMessage" and c.faulted == fault) == 2
    run(main)


def test_send_gives_up_with_channel_error_and_status_after_retries(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, ch, sink):
            fake.push_message(chat_id=42, text="hi")
            target = Target.of(await sink.next())
            fake.fail("sendMessage", *(["500"] * 10))  # type: ignore[arg-type]
            with pytest.raises(ChannelError, match="failed after 4 attempts"):
                await ch.send(OutboundMessage(target, "lost cause"))
            assert fake.sent() == [] and "HTTP 500" in (ch.status().last_error or "")
    run(main)


def test_polling_survives_platform_errors_without_losing_or_repeating(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, _ch, sink):
            fake.fail("getUpdates", "500", "drop", "429", *(["500"] * 5))  # more than one call's retries
            fake.push_message(chat_id=42, text="one")
            fake.push_message(chat_id=42, text="two")
            got = [(await sink.next()).text, (await sink.next()).text]
            await asyncio.sleep(0.3)
            assert got == ["one", "two"] and len(sink.published) == 2
    run(main)


def test_offset_is_stored_and_refused_messages_leave_no_trace(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path, outcome="refused") as (fake, _ch, sink):
            fake.push_message(chat_id=42, text="stranger")
            await sink.next()
            await fake.wait_for(lambda: fake.confirmed == 2)  # the next poll confirmed update 1
        state = PollState(token_dir(tmp_path / "state", TOKEN) / "state.json")
        assert state.offset == 2 and state.inflight == {}
        assert TOKEN not in str(token_dir(tmp_path / "state", TOKEN))
    run(main)


def test_a_second_poller_on_the_same_token_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, _ch, _sink):
            second = channel(fake, tmp_path)
            with pytest.raises(ChannelError, match="another poller already uses this Telegram bot token"):
                await second.start(QueueSink())
    run(main)


def test_a_409_from_telegram_is_reported_not_looped(tmp_path: Path) -> None:
    async def main() -> None:
        async with telegram(tmp_path) as (fake, first, _sink):
            await fake.wait_for(lambda: len(fake.done("getUpdates")) >= 1)
            other = channel(fake, tmp_path, state=tmp_path / "other-machine")  # not our lock: Telegram decides
            await other.start(QueueSink())
            try:
                await fake.wait_for(lambda: any(c.faulted == "409" for c in fake.calls))
                # The loser reports it (waited for, not slept on: a paused process took longer than 0.5 s),
                # then a moment more in which a looping poller would have asked again.
                await fake.wait_for(lambda: any(c.status().last_error for c in (first, other)), timeout=60)
                await asyncio.sleep(0.5)
                losers = [c for c in (first, other) if c.status().last_error]
                assert len(losers) == 1
                assert "another poller uses this token" in (losers[0].status().last_error or "")
                assert sum(1 for c in fake.calls if c.faulted == "409") == 1  # reported once, never looped
            finally:
                await other.stop()
    run(main)


def test_a_wrong_token_is_reported_in_status(tmp_path: Path) -> None:
    async def main() -> None:
        fake = await FakeTelegram("999:OTHER").start()
        ch = channel(fake, tmp_path)
        try:
            await ch.start(QueueSink())
            for _ in range(100):
                if ch.status().last_error:
                    break
                await asyncio.sleep(0.02)
            assert "401" in (ch.status().last_error or "") and not ch.status().connected
        finally:
            await ch.stop()
            await fake.stop()
    run(main)


def test_factory_takes_the_token_from_the_named_variable(tmp_path: Path) -> None:
    cfg = TelegramAccountConfig(token_env="MY_TG", token=None)
    ch = create_channel(ChannelDeps(tmp_path, {"MY_TG": TOKEN}, time.time), "default", cfg)
    assert ch.account_id == "default" and ch._inbox == tmp_path / "inbox"
    assert "token_env='MY_TG'" in repr(cfg) and TOKEN not in repr(TelegramAccountConfig(token=TOKEN))
    with pytest.raises(ConfigError, match="MY_TG is not set"):
        create_channel(ChannelDeps(tmp_path, {}, time.time), "default", cfg)


async def _runner(fake: FakeTelegram, state: Path, mode: str, log: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(RUNNER), fake.base_url, str(state), mode, str(log),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_killed_between_receiving_and_answering_then_restarted_answers_exactly_once(tmp_path: Path) -> None:
    async def main() -> None:
        fake = await FakeTelegram(TOKEN).start()
        state, log = tmp_path / "state", tmp_path / "published.jsonl"
        try:
            proc = await _runner(fake, state, "hold", log)  # publishes, never answers
            fake.push_message(chat_id=42, text="are you there?")
            await fake.wait_for(lambda: log.exists() and log.read_text().strip(), timeout=20)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            assert fake.sent() == []

            proc = await _runner(fake, state, "answer", log)  # the lock died with the process
            await fake.wait_for(lambda: len(fake.sent()) >= 1, timeout=20)
            fake.push_message(chat_id=42, text="second")
            await fake.wait_for(lambda: len(fake.sent()) >= 2, timeout=20)
            await asyncio.sleep(1.0)  # would a duplicate follow?
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            assert [m["text"] for m in fake.sent()] == ["echo: are you there?", "echo: second"]
            published = [json.loads(line)["text"] for line in log.read_text().splitlines()]
            assert published == ["are you there?", "are you there?", "second"]

            proc = await _runner(fake, state, "answer", log)  # a clean restart replays nothing
            await asyncio.sleep(1.5)
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            assert len(fake.sent()) == 2
        finally:
            await fake.stop()
    run(main, timeout=90)


def test_markdown_conversion_keeps_the_blank_line_after_a_heading() -> None:
    assert to_telegram_markdown("# Title\n\nText") == "*Title*\n\nText"
    assert to_telegram_markdown("## A ##\n\nB\n# C\nD\n\n\n- e") == "*A*\n\nB\n*C*\nD\n\n\n• e"
    # A heading with nothing after it, and a bullet marker alone on its line, are left as they were.
    assert to_telegram_markdown("#\n\nx\n-\ny") == "#\n\nx\n-\ny"
