"""A write call the model made with a path no file can have (a NUL byte in it) no longer stops every scrub of the
session it is recorded in (reaudit16b).

The copies of a deleted message are scrubbed from the notes the session's write/edit calls after it took
(agent/flush.py `scrub_flush_notes`, 3460481), then from the transcript. The call's path was resolved as given, and
a NUL in it raised ValueError, which neither the notes' scrub nor the batch (gateway/scrub_batch.py) took for a
failure of that one note: the whole batch failed before the transcript was touched, was left for the next delete
or start, and failed again each time. So one such call — the file tool refuses it, but the model's call is in the
transcript, and anyone in a chat can ask for it — kept the copies of every message later deleted in that chat (a
PIN the reply repeated) in the transcript, the model's context and the session search for good.

Real parts: the Bus, an AgentRuntime on a FunctionModel, the real file tools, real transcripts.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

CODE = "QX81TR44"
SECRET = f"the locker code is {CODE}, at the blue harbour gym"
CONTACT = "agent:main:telegram:dm:own-c1"


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="own-c1",
                          sender_id="own-c1", text=text, message_id=mid, **kw)


ASKED: list[str] = []  # each request's whole context, as the model was sent it


def model(req: ModelRequest) -> Reply:
    ASKED.append(json.dumps([m.to_dict() for m in req.messages], ensure_ascii=False))
    last = req.messages[-1].to_dict()
    said = json.dumps(last.get("content"), ensure_ascii=False)
    if last.get("role") == "toolResult":
        return "That name cannot be saved."
    if last.get("role") == "user" and "save it as" in said:
        return {"tool_calls": [{"name": "write", "arguments": {"path": "memory/locker\x00.md",
                                                                 "content": f"- locker code {CODE}\n"}}]}
    if last.get("role") == "user" and CODE in said:
        return f"Got it: the locker code is {CODE}, at the blue harbour gym."
    return "ok"


def test_a_write_call_with_a_nul_in_its_path_does_not_stop_the_scrub(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ASKED.clear()
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        await bus.publish(dm("save it as memory/locker<NUL>.md", "2"))
        assert await bus.drain(20)
        await bus.publish(dm("", "1", change="deleted"))
        assert await bus.drain(20)
        await bus.publish(dm("and now?", "3"))  # its turn starts once the session's batch is done
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        record = rt.store.get(CONTACT)
        assert record is not None
        text = rt.store.transcript_path(record.session_id).read_text()
        assert "memory/locker\\u0000.md" in text  # the call is recorded
        assert CODE not in text and "blue harbour" not in text, text
        assert "and now?" in ASKED[-1] and CODE not in ASKED[-1]  # nor the next turn's context
    finally:
        rt.close()
