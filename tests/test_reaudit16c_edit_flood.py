"""reaudit-3: an edit flood is bounded. An edit after the answer runs no turn (no queue bound, no turn's cost) and
each one wrote an `edited` line holding its whole text: a group member editing their answered message back and
forth grew the group's transcript — every member's, read whole at each turn — without end. A message edited
MAX_EDITS times is taken back whole by its next edit, as a delete: hidden, its copies scrubbed, later edits add
nothing (sessions/retraction.py `edit_in`).

Real parts: the Bus, an AgentRuntime on a FunctionModel, real transcripts and the real scrub batch.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, allow_all, route_dm_main_group_own
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions import retraction
from hermit.sessions.entries import RETRACTED_TEXT
from hermit.sessions.keys import group_session_key
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

MAX_EDITS: int = getattr(retraction, "MAX_EDITS", 24)  # (the tree before had no bound)
ASKED: list[str] = []
PAD = " ".join(f"word{n}" for n in range(400))  # a long message: each edit line holds all of it


def model(req: ModelRequest) -> Reply:
    ASKED.append(json.dumps([m.to_dict() for m in req.messages], ensure_ascii=False))
    return "ok"


def said(text: str, mid: str, sender: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="g1", sender_id=sender,
                          text=text, message_id=mid, mentioned=True, **kw)


def test_a_member_editing_one_message_over_and_over_grows_the_groups_transcript_only_so_far(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ASKED.clear()
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    channel = RecordingChannel()
    bus = Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
              channels={(channel.name, channel.account_id): channel}, chunk=split_chunks, turn_limit=lambda _a: 4)
    key = group_session_key("main", "telegram", "g1")

    def path() -> Path:
        record = rt.store.get(key)
        assert record is not None
        return rt.store.transcript_path(record.session_id)

    sizes: list[int] = []

    async def main() -> None:
        await bus.publish(said(f"hello {PAD}", "1", "m1"))
        await bus.publish(said("the gate code is 5521Q, keep it", "2", "m2"))  # another member's
        assert await bus.drain(20)
        for n in range(4 * MAX_EDITS):  # back and forth: a word dropped, a word added
            await bus.publish(said(f"hello {PAD}" + (" again" if n % 2 else ""), "1", "m1", change="edited"))
            assert await bus.drain(20)
            sizes.append(path().stat().st_size)
        await bus.publish(said("what was said?", "3", "m2"))
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        text = path().read_text()
        assert text.count('"customType":"edited"') <= MAX_EDITS
        assert sizes[-1] == sizes[MAX_EDITS + 1]  # the edits after the bound's wrote nothing
        assert "word399" not in ASKED[-1] and RETRACTED_TEXT in ASKED[-1]  # taken back whole, as a delete
        assert "word399" not in text
        assert "5521Q" in ASKED[-1]  # the other member's words are theirs
    finally:
        rt.close()
