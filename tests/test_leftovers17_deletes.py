"""A delete of a message in a session that has ended (/new): what /new saved of the session loses the message and
its copies by the same rule as its transcript (sessions/verbatim.py: only what the deleted message alone brought
into the session is a copy), as an edit's scrub already did.

The delete built its rule from the saved block's user messages alone: a word the session held before the message
(the assistant's own answer, which the user then repeated and deleted) counted as a copy, so the saved file lost
the assistant's earlier answer ("Your booking reference is [deleted]") that the transcript keeps.

Real parts: the gateway's Bus, an AgentRuntime on a FunctionModel, real transcripts, the real /new dump.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.agent.session_memory import SLUG_SYSTEM
from hermit.channels.base import InboundMessage
from hermit.models.base import ModelRequest
from hermit.sessions.entries import RETRACTED_TEXT
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

CODE = "QX81TR44"
ASKED = "what is my booking reference for the Lisbon flight?"
ANSWER = f"Your booking reference is {CODE}, on the confirmation email from the airline."
REPEATED = f"thanks, I will write {CODE} on the luggage tag tonight"  # deleted later: it brought nothing new
TAG_ANSWER = "Good idea, a tag helps."
SECRET = "and my gate PIN is ZW55KD90QT for the lounge door"  # deleted later: it alone brought this


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="u7", sender_id="u7",
                          text=text, message_id=mid, **kw)


def answers(req: ModelRequest) -> Reply:
    if req.system == SLUG_SYSTEM:
        return "lisbon-booking"
    last = json.dumps(req.messages[-1].to_dict(), ensure_ascii=False)
    if "booking reference for" in last:
        return ANSWER
    if "luggage tag" in last:
        return TAG_ANSWER
    if "ZW55KD90QT" in last:
        return "Noted the lounge door PIN ZW55KD90QT."
    return "ok"


def dump_of(rt: AgentRuntime) -> str:
    [dump] = (rt.agent.workspace / "memory").glob("*.md")
    return dump.read_text()


def transcripts(rt: AgentRuntime) -> str:
    return "".join(p.read_text() for p in sorted(rt.agent.sessions_dir.glob("*.jsonl")))


def test_a_delete_after_new_keeps_what_the_session_held_before_the_message_in_the_saved_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(answers), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        for mid, text in (("1", ASKED), ("2", REPEATED), ("3", SECRET)):
            await bus.publish(dm(text, mid))
            assert await bus.drain(20)
        await bus.publish(dm("/new", "4"))
        assert await bus.drain(20)
        saved = dump_of(rt)
        assert f"Assistant: {ANSWER}" in saved and f"User: {REPEATED}" in saved, saved
        for mid in ("2", "3"):
            await bus.publish(dm("", mid, change="deleted"))
            assert await bus.drain(20)

    try:
        asyncio.run(main())
        text = dump_of(rt)
        assert REPEATED not in text and "ZW55KD90QT" not in text and "lounge door" not in text, text
        assert text.count(f"User: {RETRACTED_TEXT}") == 2, text
        assert f"Assistant: {ANSWER}" in text, text  # was "Your booking reference is [deleted], on the …"
        assert f"Assistant: {TAG_ANSWER}" in text and f"User: {ASKED}" in text, text
        assert ANSWER in transcripts(rt) and "ZW55KD90QT" not in transcripts(rt)  # the transcript: the same rule
    finally:
        rt.close()
