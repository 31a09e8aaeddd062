"""A member's delete takes back only what their message brought into a session (sessions/scrub.py).

The scrub replaced every copy of a deleted message's text written after it. A group member who quoted the owner
(or guessed a code the owner later said) and deleted that message took the owner's words out of every later reply
in the group — and out of the flush's notes — though the owner's own message still held them. Text another
message of the session holds, or the session held before the deleted message, is not the deleted message's copy.
Real parts: the Bus, an AgentRuntime on a FunctionModel, real transcripts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key
from hermit.sessions.scrub import Verbatim
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

GROUP = group_session_key("main", "telegram", "g1")
CODE = "A7Q9X2"
PHONE = "0176 5551 2398"
PLACE = "meet at the blue harbour cafe on friday evening"


def said(text: str, mid: str, sender: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="g1",
                          sender_id=sender, text=text, message_id=mid, mentioned=True, **kw)


def model(req: ModelRequest) -> Reply:
    last = req.messages[-1].to_dict()
    content = last.get("content")
    text = content if isinstance(content, str) else " ".join(
        str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
    if "what was the plan" in text:
        return f"The owner said: door code {CODE}, call {PHONE}, and {PLACE}."
    return "ok"


def test_a_members_delete_leaves_the_owners_words_in_later_replies(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(said(f"door code {CODE}, call {PHONE}; {PLACE}", "1", "u1"))  # the owner
        await bus.publish(said(f"so the door code is {CODE}? and {PLACE}? and {PHONE}", "2", "u8"))  # a member quotes
        await bus.publish(said("what was the plan again?", "3", "u1"))
        assert await bus.drain(20)
        await bus.publish(said("", "2", "u8", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(GROUP)
    assert record is not None
    raw = rt.store.transcript_path(record.session_id).read_text()
    assert '"customType":"retracted"' in raw and "so the door code is" not in raw  # the member's message is gone
    # The reply to the owner keeps the owner's words: the member's message was not where they came from.
    assert f"The owner said: door code {CODE}, call {PHONE}, and {PLACE}." in raw, raw


def test_words_the_session_holds_elsewhere_are_no_copy_but_the_deleted_messages_own_are() -> None:
    rule = Verbatim((f"my pin is 99887766 and {PLACE}, code {CODE}",), kept=(f"owner: {PLACE} / {CODE}",))
    text, n = rule.scrub(f"Noted 99887766; {PLACE}; {CODE}.")
    assert text == f"Noted [deleted]; {PLACE}; {CODE}.", text
    assert n == 1
    assert Verbatim((f"my pin is 99887766 and {PLACE}",)).scrub(PLACE)[0] == "[deleted]"  # nothing kept: a copy
