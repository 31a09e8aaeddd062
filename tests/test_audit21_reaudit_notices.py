"""Re-audit 21 (t10): Telegram's newer service messages are notices too.

t4 dropped Telegram's service messages by a list of their fields (channels/telegram.py `_SERVICE`); the Bot API's
newer ones (checklists, gifts, prices, suggested posts, an owner leaving) were not on it, and each ran a turn on no
words in a group that needs no mention. Real `hermit gateway run`, the real adapter, the fake Bot API and provider.
"""

from __future__ import annotations

import json
from pathlib import Path

from audit20_household import next_mid, push_raw
from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER, BEA, GROUP = "1000", "2000", "-100300"


def test_newer_service_messages_start_no_turn_either(tmp_path: Path) -> None:
    """Bot API service messages that came after the list t4 wrote (a checklist's task marked done, a gift, a paid
    message price changed, the chat's owner left…) carry no text: in a group that needs no mention each ran a turn on
    nothing and the group got its answer."""
    policies = {"fam": {"owners": [OWNER], "groups": [GROUP], "require_mention": False}}
    script = [{"match": {"contains": "NS-LAST"}, "text": "last-ok"}, {"text": "stray-answer", "repeat": True}]
    chat = {"id": int(GROUP), "type": "supergroup"}
    bea = {"id": int(BEA), "is_bot": False, "first_name": "Bea"}
    notices = [{"checklist_tasks_done": {"marked_as_done_task_ids": [1]}},
               {"checklist_tasks_added": {"tasks": [{"id": 2, "text": "milk"}]}},
               {"gift": {"gift": {"id": "g1", "star_count": 10}}},
               {"unique_gift": {"gift": {"base_name": "cap"}, "origin": "upgrade"}},
               {"paid_message_price_changed": {"paid_message_star_count": 5}},
               {"direct_message_price_changed": {"are_direct_messages_enabled": True}},
               {"suggested_post_approved": {"send_date": 1}}, {"chat_owner_left": {}}]

    async def main() -> list[str]:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "telegram", provider, policies) as (d, _gw):
                assert isinstance(d, TelegramDriver)
                fake = d.fakes["fam"]
                for fields in notices:
                    push_raw(fake, {"message_id": next_mid(fake), "date": 1, "chat": chat, "from": bea, **fields})
                fake.push_message(chat_id=int(GROUP), from_id=int(OWNER), chat_type="supergroup", text="NS-LAST hi")
                await until(lambda: "last-ok" in d.texts("fam", GROUP), "the answer to the last message")
                assert d.texts("fam", GROUP) == ["last-ok"], d.texts("fam", GROUP)
                return [json.dumps(r.body) for r in provider.requests]

    requests = run(main, timeout=PROC_TIMEOUT)
    assert len(requests) == 1 and "NS-LAST" in requests[0], requests
