"""A note the model took in the turn answering a message (write/edit on a memory file, not the flush) loses its
copies of that message when the message is deleted (sessions/scrub.py `note_calls`, agent/flush.py).

Only the pre-compaction flush's recorded writes were scrubbed: a contact who said a door code that the model
wrote to the daily log in the same turn, then deleted the message, left the code in the note, and memory search
found it. Real parts: the Bus, an AgentRuntime on a FunctionModel, the real file tools (the contact's note goes
through its room view into an origin block), real transcripts and a real memory index with the local model.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from agenthelpers import NOW, fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, make_bus
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryKey, MemoryService
from hermit.models.base import ModelRequest
from hermit.sessions.keys import main_session_key
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply
from prochelpers import PROC_TIMEOUT, pythonpath

CODE = "QX81TR44"
LOCKER = "4417 9920 3381"
SECRET = f"the locker code is {CODE} and the locker number {LOCKER}, at the blue harbour gym"
NOTE = f"- Locker at the blue harbour gym: code {CODE}, number {LOCKER}"
PLAIN = "- They like the morning swims"
DAY = f"memory/{NOW:%Y-%m-%d}.md"
CONTACT = "agent:main:telegram:dm:own-c1"
MAIN = main_session_key("main")
OWNER_LINE = f"- my own locker note: code {CODE}"  # the owner's own text, outside any block: never touched


def dm(text: str, mid: str, peer: str = "own-c1", **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id=peer, sender_id=peer,
                          text=text, message_id=mid, **kw)


def model(req: ModelRequest) -> Reply:
    """Takes a note of what it is told in the same turn (write with append), then answers."""
    last = req.messages[-1].to_dict()
    if last.get("role") == "toolResult":
        return "Noted."
    if last.get("role") == "user" and CODE in json.dumps(last.get("content"), ensure_ascii=False):
        return {"tool_calls": [{"name": "write", "arguments": {"path": DAY, "content": f"{NOTE}\n{PLAIN}\n",
                                                                 "append": True}}]}
    return "ok"


def runtime(home: Path, memory: MemoryService | None = None) -> AgentRuntime:
    return AgentRuntime(load_offline(home).agent(), FunctionModel(model), memory=memory, clock=fixed_clock,
                        fsync=False, home=home)


def test_a_note_the_turn_took_loses_the_deleted_messages_text_and_search_no_longer_finds_it(
        tmp_path: Path, e5: Any) -> None:
    home = tmp_path / "home"
    agent = load_offline(home).agent()
    cfg = MemorySearchConfig.model_validate({"sync": {"dirty_check_interval_ms": 3_600_000}})
    svc = MemoryService(MemoryKey("main", agent.workspace), tmp_path / "idx.sqlite", cfg, e5)
    rt = runtime(home, svc)
    bus = make_bus(rt, RecordingChannel())
    note = agent.workspace / DAY

    def found() -> str:
        return str([r["snippet"] for r in svc.search(f"locker code {CODE}")["results"]])

    async def main() -> None:
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(f"# Notes\n{OWNER_LINE}\n")
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        text = note.read_text()
        assert f'session="{CONTACT}"' in text and NOTE in text, text  # the contact's note, in its origin block
        svc.mark_dirty()
        assert LOCKER in found()
        await bus.publish(dm("", "1", change="deleted"))
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        text = note.read_text()
        assert LOCKER not in text and "blue harbour" not in text, text
        assert "- Locker [deleted]: code [deleted], [deleted]" in text, text
        assert PLAIN in text and text.startswith(f"# Notes\n{OWNER_LINE}\n")  # the rest, and the owner's line, kept
        assert LOCKER not in found(), found()
        record = rt.store.get(CONTACT)
        assert record is not None
        assert LOCKER not in rt.store.transcript_path(record.session_id).read_text()
    finally:
        svc.close()


def test_the_owners_note_of_their_own_deleted_message_goes_only_in_the_main_sessions_blocks(tmp_path: Path) -> None:
    """The owner's message (the main session): the note is in an owner block of the main session; the same line
    in a contact's block is that contact's and stays."""
    home = tmp_path / "home"
    rt = runtime(home)
    bus = make_bus(rt, RecordingChannel())
    note = rt.agent.workspace / DAY
    theirs = f'<!-- origin session="{CONTACT}" audience="telegram:dm:own-c1" -->\n{NOTE}\n<!-- /origin -->\n'

    async def main() -> None:
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(theirs)
        await bus.publish(dm(SECRET, "1", peer="u7"))  # the main session
        assert await bus.drain(20)
        assert note.read_text().count(NOTE) == 2
        await bus.publish(dm("", "1", peer="u7", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    text = note.read_text()
    assert text.startswith(theirs), text  # the contact's block: not the owner's message's copy
    assert text.count(NOTE) == 1 and f'session="{MAIN}"' in text and "- Locker [deleted]: code [deleted], [deleted]" in text, text


KILLED = r"""
import os, signal, sys
from pathlib import Path
import hermit.durable as durable
from hermit.agent.flush import scrub_flush_notes
from hermit.sessions.scrub import find_deleted

ws, transcript, key = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
real = durable.write_all
def write_all(fd, data, **kw):
    real(fd, data[: len(data) // 2], fsync=True)  # half of the new note on disk, then killed
    os.kill(os.getpid(), signal.SIGKILL)
durable.write_all = write_all
scrub_flush_notes(ws, key, find_deleted(transcript, "telegram:default:1"))
print("not killed")
"""


def _noted(tmp_path: Path) -> tuple[AgentRuntime, Path, Path]:
    rt = runtime(tmp_path / "home")
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(CONTACT)
    assert record is not None
    return rt, rt.agent.workspace / DAY, rt.store.transcript_path(record.session_id)


def test_a_kill_mid_scrub_of_a_note_leaves_the_old_note_whole_and_the_delete_finishes_later(tmp_path: Path) -> None:
    rt, note, transcript = _noted(tmp_path)
    before = note.read_bytes()
    assert LOCKER.encode() in before
    child = subprocess.run([sys.executable, "-c", KILLED, str(rt.agent.workspace), str(transcript), CONTACT],
                           capture_output=True, text=True, timeout=PROC_TIMEOUT,
                           env={**os.environ, "PYTHONPATH": pythonpath()})
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert note.read_bytes() == before  # the old note, whole
    assert rt.retract(CONTACT, "telegram:default:1")  # the delete again: done now
    assert LOCKER not in note.read_text() and PLAIN in note.read_text()


def test_a_note_another_session_appends_while_the_scrub_runs_is_kept(tmp_path: Path) -> None:
    """The scrub reads, changes and replaces the note under the memory-write lock every writer takes: an append
    from another chat waits for it and lands in the new file (never in the old one, never lost)."""
    import hermit.agent.owner_notes as flush  # the scrub's replace (owner_notes.scrub_file, which flush.py uses)
    import hermit.memory.policy.daily_log as daily_log
    from hermit.memory.policy.daily_log import append_daily_note
    from hermit.tools.memory_files import session_origin

    rt, note, _ = _noted(tmp_path)
    waiting = threading.Event()
    real_lock, real_write = daily_log.locked_dir, flush.write_atomic
    errors: list[BaseException] = []

    def locked_dir(*args: Any, **kw: Any) -> Any:
        if threading.current_thread().name == "appender":
            waiting.set()  # about to wait for the scrub's lock
        return real_lock(*args, **kw)

    def append() -> None:
        try:
            append_daily_note(rt.agent.workspace, "- another chat's note", NOW,
                              origin=session_origin("agent:main:telegram:dm:own-c2"))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=append, name="appender")

    def write_atomic(path: Path, text: str, **kw: Any) -> None:
        thread.start()
        assert waiting.wait(PROC_TIMEOUT)
        real_write(path, text, **kw)

    daily_log.locked_dir = locked_dir  # type: ignore[assignment]
    flush.write_atomic = write_atomic  # type: ignore[assignment]
    try:
        assert rt.retract(CONTACT, "telegram:default:1")
        assert waiting.is_set(), "the note was not rewritten"
        thread.join(PROC_TIMEOUT)
    finally:
        daily_log.locked_dir = real_lock
        flush.write_atomic = real_write
    assert not errors and not thread.is_alive()
    text = note.read_text()
    assert LOCKER not in text and PLAIN in text and "- another chat's note" in text, text
