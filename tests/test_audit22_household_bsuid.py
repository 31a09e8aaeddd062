"""Audit 22, WhatsApp users known only by a business-scoped user id (BSUID, Meta's 2026 usernames).

Held (s19): a message with no `from` — only `from_user_id` — is dropped with one clear line per user an hour; a
text, an edit and a delete alike. New: a `from` that is no phone number (a BSUID such as `US.1349…`, which a relay or
a later payload may put there) was taken as a sender id of its own: under `dm_policy: pairing` it got a pairing code
(the owner approving it made a "contact" whose id changes with their number), under `open` it reached the model. Now
it is dropped like a missing `from`. Meta documents BSUID recipients as subject to change: not supported yet.

Real parts: WhatsAppChannel behind its signed webhook (uvicorn on 127.0.0.1), the fake Graph API, a queue as the
gateway's side.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from channelhelpers import run
from test_audit22_household_order import ANN, edit, text, whatsapp

BSUID = "US.13491208655302741918"
DROPPED = "shows a username instead of their phone number"


def test_a_message_with_only_a_bsuid_anywhere_reaches_nobody(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    now = int(time.time())
    messages: list[dict[str, Any]] = [
        {**text(ANN, "wamid.1", "SPOOF-1 in from", now), "from": BSUID},
        {**text(ANN, "wamid.2", "SPOOF-2 no from", now), "from": None, "from_user_id": "US.9911223344556677"},
        {**text(ANN, "wamid.3", "SPOOF-3 from the enterprise id", now), "from": "US.ENT.11815799212886844830"},
        {**edit(ANN, "wamid.0", "wamid.4", "SPOOF-4 an edit", now), "from": BSUID},
        {"from": BSUID, "id": "wamid.5", "timestamp": str(now), "type": "revoke",
         "revoke": {"original_message_id": "wamid.0"}},
        {**text(ANN, "wamid.6", "SPOOF-6 a number too long for one", now), "from": "1" * 16},
        text(ANN, "wamid.7", "the owner's own", now),
    ]

    async def main() -> list[str]:
        async with whatsapp(tmp_path) as (_ch, _fake, sink, post):
            for m in messages:
                await post(m)
            return [f"{m.sender_id}: {m.text}" for m in sink.published]

    with caplog.at_level(logging.WARNING, logger="hermit.channels.whatsapp"):
        published = run(main)
    assert published == [f"{ANN}: the owner's own"]
    dropped = [r.getMessage() for r in caplog.records if DROPPED in r.getMessage()]
    assert any(BSUID in line for line in dropped) and any("US.9911223344556677" in line for line in dropped)
    assert all("ask them to write on another channel" in line for line in dropped)
