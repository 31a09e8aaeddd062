"""Edits the earlier scrub work left (gateway/retractions.py, sessions/scrub.py, agent/session_memory.py).

- An edit that comes while its message's own turn runs is recorded before that message's line (the turn records
  the line when it ends). A delete of the message later rewrote its line and its copies, but not that earlier
  `edited` entry: the edited text stayed in the transcript, and the scrub found it unscrubbed at every batch.
- An edit (or a delete) after the session ended (/new): what /new saved of the session to memory kept the words
  the edit took back, and the reply's copy of them.

Real parts: the gateway's Bus, an AgentRuntime on a FunctionModel, real transcripts, the real /new dump.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthelpers import NOW, fixed_clock, load_offline
from channelhelpers import until
from gatewayhelpers import HeldAdmission, RecordingChannel, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.agent.session_memory import SLUG_SYSTEM
from hermit.channels.base import InboundMessage
from hermit.models.base import ModelRequest
from hermit.sessions.keys import main_session_key
from hermit.sessions.retraction import unscrubbed, unscrubbed_edits
from hermit.sessions.scrub import read_objs
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

MAIN = main_session_key("main")
CODE, NEWCODE = "QX81TR44", "ZP93KD17"
SAID = f"my locker code is {CODE} at the blue harbour gym"
EDITED = f"my locker code is {NEWCODE} at the blue harbour gym"
REPLY = "Got it, your locker at the blue harbour gym."


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="u7", sender_id="u7",
                          text=text, message_id=mid, **kw)


def runtime(home: Path, fn: Any) -> AgentRuntime:
    return AgentRuntime(load_offline(home).agent(), FunctionModel(fn), clock=fixed_clock, fsync=False, home=home)


def transcripts(rt: AgentRuntime) -> str:
    return "".join(p.read_text() for p in sorted(rt.agent.sessions_dir.glob("*.jsonl")))


def test_a_delete_after_an_edit_made_as_the_messages_turn_started_takes_the_edited_text_too(tmp_path: Path) -> None:
    """The edit comes as the message's turn is starting (its admission check held): its `edited` entry is written
    ahead of the line the turn then records; the later delete rewrites that entry too."""
    rt = runtime(tmp_path / "home", lambda req: REPLY)
    admit = HeldAdmission(5)  # the second message's check when its turn is about to start (after the first's
    # three: published, started, its reply sent): held there
    bus = make_bus(rt, RecordingChannel(), admit=admit)

    async def main() -> None:
        try:
            await bus.publish(dm("hello", "0"))  # the session exists
            assert await bus.drain(20)
            await bus.publish(dm(SAID, "1"))
            await until(admit.checking.is_set)  # taken from the queue, not recorded yet
            await bus.publish(dm(EDITED, "1", change="edited"))
            await until(lambda: NEWCODE in transcripts(rt))  # the edit's entry, ahead of the message's line
            admit.go_on.set()
            assert await bus.drain(20)
            text = transcripts(rt)
            assert text.index('"customType":"edited"') < text.index(EDITED + " (edited)"), text
            await bus.publish(dm("", "1", change="deleted"))
            assert await bus.drain(20)
        finally:
            admit.go_on.set()

    try:
        asyncio.run(main())
        text = transcripts(rt)
        assert NEWCODE not in text and CODE not in text and "blue harbour" not in text.split(REPLY)[0], text
        record = rt.store.get(MAIN)
        assert record is not None
        objs = read_objs(rt.store.transcript_path(record.session_id))
        assert unscrubbed(objs) == [] and unscrubbed_edits(objs) == {}  # nothing left for a next batch
        assert bus.scrubs.batches <= 4, bus.scrubs.batches  # the batch ended: no endless confirm loop
    finally:
        rt.close()


def dump_of(rt: AgentRuntime) -> str:
    """What /new saved, with its file's name."""
    [dump] = (rt.agent.workspace / "memory").glob("*.md")
    return f"{dump.name}\n{dump.read_text()}"


def quoting(req: ModelRequest) -> Reply:
    """Answers quoting the code it was told; names a saved session by it (as a model may: it is no key's shape)."""
    if req.system == SLUG_SYSTEM:
        return f"locker-code-{CODE.lower()}"
    return f"Noted your locker code {CODE} at the blue harbour gym." if CODE in str(req.messages[-1].to_dict()) \
        else "ok"


def test_an_edit_after_new_takes_the_dropped_words_out_of_what_new_saved_of_the_session(tmp_path: Path) -> None:
    rt = runtime(tmp_path / "home", quoting)
    bus = make_bus(rt, RecordingChannel())
    removed = "my locker code is (removed) at the blue harbour gym"

    async def main() -> None:
        await bus.publish(dm(SAID, "1"))
        await bus.publish(dm("and the towel is blue", "2"))
        assert await bus.drain(20)
        await bus.publish(dm("/new", "3"))
        assert await bus.drain(20)
        saved = dump_of(rt)
        assert saved.count(CODE) == 2 and saved.count(CODE.lower()) == 2, saved  # message, reply; name, title
        await bus.publish(dm(removed, "1", change="edited"))
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        text = dump_of(rt)
        assert CODE not in text and CODE.lower() not in text, text
        assert text.startswith(f"{NOW:%Y-%m-%d}-locker-code-deleted.md\n"), text
        assert f"User: {removed} (edited)" in text, text  # the message as every reader now sees it
        assert "Assistant: Noted your locker code [deleted] at the blue harbour gym." in text, text
        assert "User: and the towel is blue" in text and "- Session id:" in text  # the rest as saved
        assert CODE not in transcripts(rt)
    finally:
        rt.close()


def test_a_delete_after_new_takes_the_message_and_its_copies_out_of_what_new_saved(tmp_path: Path) -> None:
    rt = runtime(tmp_path / "home", quoting)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(dm(SAID, "1"))
        await bus.publish(dm("and the towel is blue", "2"))
        assert await bus.drain(20)
        await bus.publish(dm("/new", "3"))
        assert await bus.drain(20)
        await bus.publish(dm("", "1", change="deleted"))
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        text = dump_of(rt)
        assert CODE not in text and CODE.lower() not in text and "blue harbour" not in text, text
        assert "User: and the towel is blue" in text
        assert CODE not in transcripts(rt)
    finally:
        rt.close()
