"""What a reply brings along (audit: chats, as a non-owner): only the replier's own words reach a session.

A Telegram message that replies to another carries the replied-to message whole (`reply_to_message`: its text,
caption, sender), a quoted part of it (`quote`), or a message of another chat (`external_reply`: a post of a
channel, a message of a chat the bot is not in). A group member replying to the owner's message, or quoting a
message of a chat only the owner is in, must not bring that text into the group's session — it would be
recorded as the member's, saved by /new and the flush, and quoted back to the group. Hermit takes the reply's
id and whether it answers the bot (for require_mention), never its text. Guards that against a later
"helpful" reply context. Real parts: the Telegram adapter polling the fake Bot API on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

from channelhelpers import FAST, QueueSink, run
from fakes.fake_telegram import FakeTelegram
from hermit.channels.telegram import TelegramChannel
from hermit.config.schema import TelegramAccountConfig

TOKEN = "123:TEST"
OWNER = 1001
PRIVATE = "OWNERDM my PIN is 5512"


def test_a_reply_brings_only_the_repliers_words(tmp_path: Path) -> None:
    async def main() -> None:
        fake = await FakeTelegram(TOKEN).start()
        try:
            fake.push_message(chat_id=-100, from_id=5, chat_type="supergroup", text="@hermit_bot what did he say?")
            msg = fake.updates[-1]["message"]  # the channel is not polling yet: the update is still ours to shape
            msg["reply_to_message"] = {"message_id": 7, "from": {"id": OWNER, "is_bot": False, "first_name": "Ann"},
                                       "chat": msg["chat"], "text": PRIVATE, "caption": PRIVATE}
            msg["quote"] = {"text": PRIVATE, "position": 0}
            msg["external_reply"] = {"origin": {"type": "user", "sender_user": {"id": OWNER, "is_bot": False,
                                                                                 "first_name": "Ann"}},
                                     "chat": {"id": OWNER, "type": "private"}, "message_id": 3,
                                     "text": PRIVATE}
            cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
            ch = TelegramChannel("default", cfg, TOKEN, state_dir=tmp_path / "state", inbox_dir=tmp_path / "inbox",
                                 policy=FAST, reconnect_max_delay=0.05)
            sink = QueueSink("queued")
            await ch.start(sink)
            try:
                got = await sink.next()
            finally:
                await ch.stop()
        finally:
            await fake.stop()
        assert got.text == "@hermit_bot what did he say?" and got.sender_id == "5"
        assert got.reply_to == "7" and not got.reply_to_bot
        assert "OWNERDM" not in repr(got)  # not in its text, name, meta or anything else it carries

    run(main)
