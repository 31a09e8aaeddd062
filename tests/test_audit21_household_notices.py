"""Audit 21, a family chat that needs no mention (`require_mention: false`): the platform's own notices — a member
joining or leaving, a message pinned, the group renamed — are nobody's words to the assistant and start no turn.

Discord posts "joined the server", a pin's and a new thread's notice as messages of their own (fixed in
channels/discord.py; the household walk, tests/test_audit21_household_chats.py, covers it); Telegram's service
messages come as messages with no text. Real `hermit gateway run`, the real Telegram adapter, the fake Bot API and
the fake model provider.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audit20_household import next_mid, push_raw
from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER, BEA, DAN, GROUP = "1000", "2000", "2600", "-100300"
POLICIES = {"fam": {"owners": [OWNER], "groups": [GROUP], "require_mention": False}}


def service(fake: Any, sender: str, **fields: Any) -> None:
    push_raw(fake, {"message_id": next_mid(fake), "date": 1, "chat": {"id": int(GROUP), "type": "supergroup"},
                    "from": {"id": int(sender), "is_bot": False, "first_name": "Ann"}, **fields})


def test_telegram_service_messages_start_no_turn_in_a_group_that_needs_no_mention(tmp_path: Path) -> None:
    script = [{"match": {"contains": "NT-LAST"}, "text": "last-ok"}, {"text": "stray-answer", "repeat": True}]

    async def main() -> list[str]:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "telegram", provider, POLICIES) as (d, _gw):
                assert isinstance(d, TelegramDriver)
                fake = d.fakes["fam"]
                bea = {"id": int(BEA), "is_bot": False, "first_name": "Bea"}
                service(fake, BEA, left_chat_member=bea)
                service(fake, OWNER, new_chat_members=[{"id": int(DAN), "is_bot": False, "first_name": "Dan"}])
                service(fake, OWNER, pinned_message={"message_id": 1, "date": 1, "chat": {
                    "id": int(GROUP), "type": "supergroup"}, "text": "NT-PINNED dinner at 7"})
                service(fake, OWNER, new_chat_title="The Smiths")
                service(fake, OWNER, new_chat_photo=[{"file_id": "p1", "file_unique_id": "u1", "width": 1,
                                                      "height": 1}])
                fake.push_message(chat_id=int(GROUP), from_id=int(OWNER), chat_type="supergroup", text="NT-LAST hi")
                await until(lambda: "last-ok" in d.texts("fam", GROUP), "the answer to the last message")
                assert d.texts("fam", GROUP) == ["last-ok"], d.texts("fam", GROUP)
                return [json.dumps(r.body) for r in provider.requests]

    requests = run(main, timeout=PROC_TIMEOUT)
    assert len(requests) == 1 and "NT-LAST" in requests[0]
