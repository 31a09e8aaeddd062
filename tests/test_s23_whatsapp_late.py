"""A WhatsApp message Meta delivers late: its webhook came after a later message of the chat was handed on (s23 t6).

Meta retries a failed webhook for hours. Ann writes "yes, book it" (to the 9:00 slot), that webhook fails; she then
asks "what's the weather tomorrow?", answered; the retry of "yes, book it" comes an hour later. It was handed on as if
just said, after the weather answer, and read as a reply to whatever the model had said last. Now it is marked: when
it was sent and that it came late. It is not put back before the answers given since: those stand, and the late one
runs after them (its place in the transcript is where it came). A message on time carries no mark.

Real `hermit gateway run`, the WhatsApp adapter behind its signed webhook, the fake Graph API, the fake model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from audit19_who import last_user_text
from channelhelpers import run
from fakes.fake_whatsapp import text_message
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

ANN = "15550001001"
POLICIES = {"wa": {"owners": [ANN]}}


def at(message: dict[str, object], sent: int) -> dict[str, object]:
    return {**message, "timestamp": str(sent)}


def test_a_message_delivered_after_a_later_one_is_marked_late_and_answered_after(tmp_path: Path) -> None:
    now = int(time.time())

    async def main() -> list[Any]:
        with FakeProvider([{"text": "ok", "repeat": True}]) as provider:
            async with stack(tmp_path, "whatsapp", provider, POLICIES) as (d, _gw):
                await d.deliver("wa", at(text_message(ANN, "LT-FIRST which slot is free?", "wamid.1"), now - 3700))
                await until(lambda: len(d.texts("wa", ANN)) == 1, "the first answer")
                await d.deliver("wa", at(text_message(ANN, "LT-WEATHER what's the weather tomorrow?", "wamid.3"),
                                         now - 60))
                await until(lambda: len(d.texts("wa", ANN)) == 2, "the weather answer")
                # The retry of a message sent before the weather question, an hour after it was sent.
                await d.deliver("wa", at(text_message(ANN, "LT-YES yes, book it", "wamid.2"), now - 3600))
                await until(lambda: len(d.texts("wa", ANN)) == 3, "the late message's answer")
                return [r.body for r in provider.requests]

    bodies = run(main, timeout=PROC_TIMEOUT * 2)
    first, weather, late = (last_user_text(b) for b in bodies)
    assert "late" not in first and "late" not in weather  # on time: no mark
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now - 3600))
    assert f"(sent {when}; WhatsApp delivered it late" in late and "LT-YES yes, book it" in late
    said = [m["content"] for m in bodies[2]["messages"] if m.get("role") == "user"]
    order = [next(k for k in ("LT-FIRST", "LT-WEATHER", "LT-YES") if k in json.dumps(c)) for c in said]
    assert order == ["LT-FIRST", "LT-WEATHER", "LT-YES"]  # what was answered stays before it
