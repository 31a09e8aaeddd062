"""Discord adapter (discord.py) against a fake Discord REST API and gateway websocket on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from channelhelpers import FAST, QueueSink, run
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL, THREAD, FakeDiscord, patch_discord, unpatch
from hermit.channels.base import OutboundMessage, Target, TurnEnd, Typing
from hermit.channels.discord import DiscordChannel
from hermit.config.schema import DiscordAccountConfig
from hermit.errors import ChannelError

TOKEN = "discord-test-token"


@asynccontextmanager
async def discord_channel(tmp: Path) -> AsyncIterator[tuple[FakeDiscord, DiscordChannel,
                                                                              QueueSink]]:
    fake = await FakeDiscord(TOKEN).start()
    old = patch_discord(fake)
    ch = DiscordChannel("default", DiscordAccountConfig(), TOKEN, state_dir=tmp, policy=FAST,
                        reconnect_max_delay=0.1)
    sink = QueueSink()
    try:
        await ch.start(sink)
        await fake.wait_for(lambda: ch.status().connected)
        yield fake, ch, sink
    finally:
        await ch.stop()
        unpatch(old)
        await fake.stop()


def test_dm_is_published_and_answered_with_typing(tmp_path: Path) -> None:
    async def main() -> None:
        async with discord_channel(tmp_path) as (fake, ch, sink):
            await fake.say("hi hermit", author="600000000000000001")
            msg = await sink.next()
            assert (msg.channel, msg.peer_kind, msg.peer_id, msg.sender_id, msg.text, msg.guild_id) == \
                ("discord", "dm", "600000000000000001", "600000000000000001", "hi hermit", None)
            target = Target.of(msg)
            await ch.send(Typing(target, True))
            await fake.wait_for(lambda: fake.done("typing"))
            await ch.send(OutboundMessage(target, "hello @everyone"))
            await ch.send(TurnEnd(target, "t", "done"))
            [sent] = fake.sent()
            assert sent["channel_id"] == "500000000000000001" and sent["content"] == "hello @everyone"
            assert sent["allowed_mentions"]["parse"] == ["users"]  # no @everyone ping from a model reply
            assert ch.status().messages_in == 1 and ch.status().messages_out == 1
    run(main)


def test_guild_channel_mentions_replies_and_threads(tmp_path: Path) -> None:
    async def main() -> None:
        async with discord_channel(tmp_path) as (fake, ch, sink):
            await fake.say("chatter", guild=True)
            plain = await sink.next()
            assert (plain.peer_kind, plain.peer_id, plain.guild_id, plain.mentioned) == \
                ("group", TEXT_CHANNEL, GUILD_ID, False)
            await fake.say("<@900000000000000001> help", guild=True, mention_bot=True)
            mention = await sink.next()
            assert mention.mentioned and mention.text == "help"
            await fake.say("and this?", guild=True, reply_to_bot=True)
            assert (await sink.next()).reply_to_bot
            await fake.say("<@900000000000000001> in thread", thread=True, mention_bot=True)
            threaded = await sink.next()
            assert (threaded.peer_id, threaded.thread_id, threaded.guild_id) == (TEXT_CHANNEL, THREAD, GUILD_ID)
            await ch.send(OutboundMessage(Target.of(mention), "to the channel"))
            await ch.send(OutboundMessage(Target.of(threaded), "to the thread"))
            assert [(s["channel_id"], s["content"]) for s in fake.sent()] == \
                [(TEXT_CHANNEL, "to the channel"), (THREAD, "to the thread")]
    run(main)


def test_a_dm_to_a_user_not_seen_since_restart_opens_the_dm_channel(tmp_path: Path) -> None:
    async def main() -> None:
        async with discord_channel(tmp_path) as (fake, ch, _sink):
            await ch.send(OutboundMessage(Target("discord", "default", "dm", "600000000000000042"), "reminder"))
            assert fake.done("dm_channel") == [{"recipient_id": 600000000000000042}]
            assert fake.sent()[0]["channel_id"] == "500000000000000042"
    run(main)


@pytest.mark.parametrize("fault", ["429", "500", "drop"])
def test_send_is_retried_and_delivered_once(tmp_path: Path, fault: str) -> None:
    async def main() -> None:
        async with discord_channel(tmp_path) as (fake, ch, _sink):
            fake.fail("create_message", fault)  # type: ignore[arg-type]
            await ch.send(OutboundMessage(Target("discord", "default", "group", TEXT_CHANNEL), "once"))
            assert [s["content"] for s in fake.sent()] == ["once"]
            assert [c.faulted for c in fake.calls if c.route == "create_message"] == [fault, None]
    run(main)


def test_a_rate_limit_discord_py_gives_up_on_is_reported_not_retried_again(tmp_path: Path) -> None:
    """discord.py retries 429s and 5xx itself; Hermit adds no second loop around it (issue 26 §1)."""
    async def main() -> None:
        async with discord_channel(tmp_path) as (fake, ch, _sink):
            fake.retry_after = 31.0  # past discord.py's smallest max_ratelimit_timeout (30 s): RateLimited
            fake.fail("create_message", "429")
            with pytest.raises(ChannelError, match="RateLimited"):
                await ch.send(OutboundMessage(Target("discord", "default", "group", TEXT_CHANNEL), "once"))
            assert [c.faulted for c in fake.calls if c.route == "create_message"] == ["429"]
            assert fake.sent() == [] and "send failed" in (ch.status().last_error or "")
    run(main)


def test_a_dropped_gateway_reconnects_and_messages_keep_coming(tmp_path: Path) -> None:
    async def main() -> None:
        async with discord_channel(tmp_path) as (fake, _ch, sink):
            await fake.drop_gateway()
            await fake.wait_for(lambda: fake.identified >= 2 or any(c.route == "resume" for c in fake.calls))
            await fake.say("after the drop")
            assert (await sink.next()).text == "after the drop"
            await asyncio.sleep(0.2)
            assert len(sink.published) == 1
    run(main, timeout=60)


def test_a_wrong_token_is_reported_in_status_without_retrying(tmp_path: Path) -> None:
    async def main() -> None:
        fake = await FakeDiscord(TOKEN).start()
        old = patch_discord(fake)
        ch = DiscordChannel("default", DiscordAccountConfig(), "wrong", policy=FAST, reconnect_max_delay=0.05)
        try:
            await ch.start(QueueSink())
            await fake.wait_for(lambda: bool(ch.status().last_error))
            await asyncio.sleep(0.3)
            assert "refused the bot token" in (ch.status().last_error or "") and not ch.status().connected
            assert [c.faulted for c in fake.calls if c.route == "me"] == ["401"]  # tried once, not looped
        finally:
            await ch.stop()
            unpatch(old)
            await fake.stop()
    run(main)
