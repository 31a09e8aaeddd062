"""A message with no words — a sticker, a poll, a location, a contact card — reaches the model as a short plain
description (channels/wordless.py), the same on every platform that has the kind; before, each started a turn with
empty text (Telegram, Discord) or was dropped unseen (WhatsApp's location and contacts). A Telegram dice throw is
ignored: no turn. Real `hermit gateway run`, the real adapters, the fake platforms and the fake model provider."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from audit20_household import next_mid, push_raw
from channeldrivers import DiscordDriver, TelegramDriver, WhatsAppDriver
from channelhelpers import run
from fakes.fake_discord import user
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER = "600000000000000007"
TG_OWNER = 1000
WA_OWNER = "15551234"
SCRIPT = [{"match": {"contains": "WL-LAST"}, "text": "last-ok"}, {"text": "seen", "repeat": True}]


def last_user_texts(provider: FakeProvider) -> list[str]:
    """The text of the newest user message of each model request."""
    out = []
    for r in provider.requests:
        users = [m for m in r.body["messages"] if m.get("role") == "user"]
        content = users[-1]["content"]
        out.append(content if isinstance(content, str) else
                   "".join(p.get("text", "") for p in content if isinstance(p, dict)))
    return out


def owner_dm(fake: Any, owner: int, fields: dict[str, Any]) -> dict[str, Any]:
    """A Bot API message from `owner` ("Ann") in their DM with the bot: `fields` its content (text, sticker, story…)."""
    return {"message_id": next_mid(fake), "date": int(time.time()), "chat": {"id": owner, "type": "private"},
            "from": {"id": owner, "is_bot": False, "first_name": "Ann"}, **fields}


async def telegram_one_by_one(d: TelegramDriver, owner: int, messages: list[dict[str, Any]]) -> None:
    """Each of `messages` (`owner_dm` fields) sent to account "tg" once the one before was answered."""
    fake = d.fakes["tg"]
    for n, fields in enumerate(messages, 1):
        push_raw(fake, owner_dm(fake, owner, fields))
        await until(lambda n=n: len(d.texts("tg", str(owner))) == n, f"the answer to message {n}")


def said_in_words(main: Callable[[], Awaitable[list[str]]], want: list[str]) -> list[str]:
    """Run `main` (messages with no words, then "WL-LAST"; returns the newest user text of each model request) and
    check one request per message and one for the last, each ending with its message's description in `want`."""
    said = run(main, timeout=PROC_TIMEOUT)
    assert len(said) == len(want) + 1
    for text, description in zip(said, want, strict=False):
        assert text.endswith(description), (text, description)
    return said


def test_telegram_stickers_polls_locations_contacts_in_words_dice_ignored(tmp_path: Path) -> None:
    kinds: list[dict[str, Any]] = [
        {"sticker": {"file_id": "s1", "file_unique_id": "u1", "width": 512, "height": 512, "is_animated": False,
                     "is_video": False, "type": "regular", "emoji": "😀"}},
        {"poll": {"id": "p1", "question": "Dinner on Friday?", "options": [
            {"text": "pizza", "voter_count": 0}, {"text": "sushi", "voter_count": 0}], "total_voter_count": 0,
            "is_closed": False, "is_anonymous": True, "type": "regular", "allows_multiple_answers": False}},
        {"location": {"latitude": 52.52, "longitude": 13.405}},
        {"location": {"latitude": 48.8584, "longitude": 2.2945},
         "venue": {"location": {"latitude": 48.8584, "longitude": 2.2945}, "title": "Eiffel Tower",
                   "address": "Champ de Mars"}},
        {"contact": {"phone_number": "+49 170 1234567", "first_name": "Dan", "last_name": "Smith"}},
        {"voice": {"file_id": "v1", "file_unique_id": "uv", "duration": 3}},
    ]
    want = ["(sticker 😀)", "(poll: Dinner on Friday? — pizza / sushi)", "(location: 52.52, 13.405)",
            "(location: Eiffel Tower, Champ de Mars: 48.8584, 2.2945)", "(contact card: Dan Smith, +49 170 1234567)",
            "(voice message, which Hermit cannot open)"]

    async def main() -> list[str]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "telegram", provider, {"tg": {"owners": [str(TG_OWNER)]}}) as (d, _gw):
                assert isinstance(d, TelegramDriver)
                fake = d.fakes["tg"]
                await telegram_one_by_one(d, TG_OWNER, kinds)
                push_raw(fake, owner_dm(fake, TG_OWNER, {"dice": {"emoji": "🎲", "value": 4}}))
                fake.push_message(chat_id=TG_OWNER, text="WL-LAST hi")
                await until(lambda: "last-ok" in d.texts("tg", str(TG_OWNER)), "the answer to the last message")
                return last_user_texts(provider)

    said = said_in_words(main, want)
    assert "WL-LAST" in said[-1]  # the dice ran no turn: the last request is the last message's


def test_discord_stickers_and_polls_in_words(tmp_path: Path) -> None:
    want = ['(sticker "Wave")', "(poll: Dinner on Friday? — pizza / sushi)", 'see you then\n(sticker "Thumbs")']  # its words, then the sticker

    async def main() -> list[str]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "discord", provider, {"dc": {"owners": [OWNER]}}) as (d, _gw):
                assert isinstance(d, DiscordDriver)
                fake, token = d.fake, d.tokens["dc"]
                await fake.wait_for(lambda: token in fake._socket_token.values())
                now = datetime.now(UTC)

                def message(content: str, **extra: Any) -> dict[str, Any]:
                    return {"id": fake._snowflake(), "channel_id": f"5{OWNER[1:]}", "author": user(OWNER, "ann"),
                            "content": content, "timestamp": now.isoformat(), "edited_timestamp": None, "tts": False,
                            "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [],
                            "embeds": [], "pinned": False, "type": 0, **extra}

                sent = [message("", sticker_items=[{"id": "11", "name": "Wave", "format_type": 1}]),
                        message("", poll={"question": {"text": "Dinner on Friday?"}, "answers": [
                            {"answer_id": 1, "poll_media": {"text": "pizza"}},
                            {"answer_id": 2, "poll_media": {"text": "sushi"}}],
                            "expiry": (now + timedelta(hours=24)).isoformat(), "allow_multiselect": False,
                            "layout_type": 1}),
                        message("see you then", sticker_items=[{"id": "12", "name": "Thumbs", "format_type": 1}])]
                for n, msg in enumerate(sent, 1):
                    await fake._dispatch("MESSAGE_CREATE", msg, token)
                    await until(lambda n=n: len(d.texts("dc", OWNER)) == n, f"the answer to message {n}")
                await fake.say("WL-LAST hi", author=OWNER, bot_token=token)
                await until(lambda: "last-ok" in d.texts("dc", OWNER), "the answer to the last message")
                return last_user_texts(provider)

    said_in_words(main, want)


def test_whatsapp_locations_and_contact_cards_in_words(tmp_path: Path) -> None:
    stamp = str(int(time.time()))
    messages = [
        {"from": WA_OWNER, "id": "wamid.loc", "timestamp": stamp, "type": "location",
         "location": {"latitude": 52.52, "longitude": 13.405, "name": "Alexanderplatz", "address": "Berlin"}},
        {"from": WA_OWNER, "id": "wamid.card", "timestamp": stamp, "type": "contacts",
         "contacts": [{"name": {"formatted_name": "Dan Smith", "first_name": "Dan"},
                       "phones": [{"phone": "+49 170 1234567", "type": "CELL"}]}]},
    ]
    want = ["(location: Alexanderplatz, Berlin: 52.52, 13.405)", "(contact card: Dan Smith, +49 170 1234567)"]

    async def main() -> list[str]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "whatsapp", provider, {"wa": {"owners": [WA_OWNER]}}) as (d, _gw):
                assert isinstance(d, WhatsAppDriver)
                for n, m in enumerate(messages, 1):
                    await d.deliver("wa", m)
                    await until(lambda n=n: len(d.texts("wa", WA_OWNER)) == n, f"the answer to message {n}")
                await d.dm("wa", WA_OWNER, "WL-LAST hi")
                await until(lambda: "last-ok" in d.texts("wa", WA_OWNER), "the answer to the last message")
                return last_user_texts(provider)

    said_in_words(main, want)
