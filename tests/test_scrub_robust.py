"""The delete/edit scrub under failure and races (gateway/scrub_batch.py, gateway/bus.py, gateway/retractions.py).

1. A failing scrub let the next turn start with the copies in its context: any exception in a batch was logged and
   the batch ended, so `settled` returned and the turn ran; and one note that could not be scrubbed failed the whole
   session's batch before the transcript was touched. Now each note is scrubbed on its own (agent/runtime.py
   `_reach`, sessions/retraction.py), a failed batch is tried once more at once, and when the transcript's own scrub
   still fails the turn is not run (its sender is told; it is tried again at the next message and the next start).
2. A turn waiting for its session's batch held one of the agent's turn slots: it settles before taking one now.
3. A kill between the `retracted` entry and deletes.json's `scrubs` left the message hidden and its copies for good:
   the scrub is wanted first now.

Real parts: the Bus, an AgentRuntime on a FunctionModel, the real file tools, real transcripts, the real deletes file
and a real SIGKILL of a process at the point in question. The failures are injected into the collaborator that fails
(the note's scrub, the transcript's rewrite), never into the batch under test.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import NOW, fixed_clock, load_offline
from channelhelpers import until
from gatewayhelpers import RecordingChannel, allow_all, route_dm_main_group_own
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.deletes_store import RememberedDeletes
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply
from prochelpers import PROC_TIMEOUT, pythonpath

CODE = "QX81TR44"
SECRET = f"the locker code is {CODE}, at the blue harbour gym"
DAY = f"memory/{NOW:%Y-%m-%d}.md"
BAD = f"memory/{NOW - timedelta(days=1):%Y-%m-%d}.md"  # yesterday's: a contact adds to recent ones


def key(peer: str) -> str:
    return f"agent:main:telegram:dm:{peer}"


def dm(text: str, mid: str, peer: str = "own-c1", **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id=peer, sender_id=peer,
                          text=text, message_id=mid, **kw)


ASKED: list[str] = []  # each request's whole context, as the model was sent it


def model(req: ModelRequest) -> Reply:
    """Takes two notes of a code it is told (two files), then answers quoting it."""
    ASKED.append(json.dumps([m.to_dict() for m in req.messages], ensure_ascii=False))
    last = req.messages[-1].to_dict()
    if last.get("role") == "toolResult":
        return f"Noted: the locker code is {CODE}." if CODE in json.dumps(req.messages[-3].to_dict()) else "Noted."
    if last.get("role") == "user" and CODE in json.dumps(last.get("content"), ensure_ascii=False):
        return {"tool_calls": [
            {"name": "write", "arguments": {"path": BAD, "content": f"- locker code {CODE}\n", "append": True}},
            {"name": "write", "arguments": {"path": DAY, "content": f"- locker code {CODE}\n", "append": True}}]}
    return "ok"


def runtime(home: Path) -> AgentRuntime:
    return AgentRuntime(load_offline(home).agent(), FunctionModel(model), clock=fixed_clock, fsync=False, home=home)


def bus_for(rt: AgentRuntime, channel: RecordingChannel, deletes: RememberedDeletes | None = None,
            turns: int = 4) -> Bus:
    return Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
               channels={(channel.name, channel.account_id): channel}, chunk=split_chunks, deletes=deletes,
               turn_limit=lambda _agent: turns)


def transcript_of(rt: AgentRuntime, peer: str = "own-c1") -> Path:
    record = rt.store.get(key(peer))
    assert record is not None
    return rt.store.transcript_path(record.session_id)


def test_a_note_that_cannot_be_scrubbed_stops_neither_the_other_notes_nor_the_transcript(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hermit.agent.deleted_copies as runtime_module  # where the turn-notes scrub calls it (eee76d9)

    home = tmp_path / "home"
    ASKED.clear()
    rt = runtime(home)
    bus = bus_for(rt, RecordingChannel())
    real = runtime_module.scrub_flush_notes

    def failing(workspace: Path, session_key: str, deleted: Any) -> Any:
        if any(args.get("path") == BAD for _, args in deleted.note_calls):
            raise RuntimeError("that note's scrub broke")  # a failure nobody foresaw, in one note
        return real(workspace, session_key, deleted)

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        monkeypatch.setattr(runtime_module, "scrub_flush_notes", failing)
        await bus.publish(dm("", "1", change="deleted"))
        await bus.publish(dm("and now?", "2"))  # its turn starts once the session's batch is done
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        workspace = load_offline(home).agent().workspace
        assert CODE in (workspace / BAD).read_text()  # the note that failed keeps it (logged)...
        assert CODE not in (workspace / DAY).read_text()  # ...the other note does not
        text = transcript_of(rt).read_text()
        assert CODE not in text and "blue harbour" not in text, text  # nor the transcript
        assert "and now?" in ASKED[-1] and CODE not in ASKED[-1]  # nor the next turn's context
    finally:
        rt.close()


def test_a_transcript_that_cannot_be_scrubbed_runs_no_turn_and_a_passing_failure_is_tried_once_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import hermit.sessions.retraction as retraction

    home = tmp_path / "home"
    ASKED.clear()
    rt = runtime(home)
    channel = RecordingChannel()
    bus = bus_for(rt, channel)
    real = retraction.scrub_transcript
    failures = [0]  # how many rewrites are still to fail

    def full(path: Path, *deleted: Any) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, *deleted)

    monkeypatch.setattr(retraction, "scrub_transcript", full)

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        asked = len(ASKED)
        failures[0] = 10**6  # a full disk, for good
        await bus.publish(dm("", "1", change="deleted"))
        await bus.publish(dm("and now?", "2"))
        assert await bus.drain(20)
        assert len(ASKED) == asked  # not run: the model would have had the copies (the reply quoting the code)
        assert "not answer this one" in channel.messages()[-1].text and CODE not in channel.messages()[-1].text
        assert "a turn was not run" in caplog.text
        assert CODE in transcript_of(rt).read_text()  # still there: a full disk
        failures[0] = 1  # freed: the next turn's batch fails once and its second try scrubs
        await bus.publish(dm("and now, again?", "3"))
        assert await bus.drain(20)
        assert len(ASKED) == asked + 1 and "and now, again?" in ASKED[-1] and CODE not in ASKED[-1]

    try:
        asyncio.run(main())
        assert CODE not in transcript_of(rt).read_text()
        assert not bus.scrubs.failed
    finally:
        rt.close()


def test_a_turn_waiting_for_its_sessions_batch_holds_no_turn_slot(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ASKED.clear()
    rt = runtime(home)
    channel = RecordingChannel()
    bus = bus_for(rt, channel, turns=1)  # one turn at a time for the agent

    async def main() -> None:
        await bus.publish(dm("hello", "1"))
        assert await bus.drain(20)
        record = rt.store.get(key("own-c1"))
        assert record is not None
        held = asyncio.Event()  # a batch of c1's session waiting for a turn of it to end (an edit's)
        bus.scrubs.want(("main", key("own-c1"), record.session_id), held)
        await bus.publish(dm("more", "2"))  # waits for that batch
        await until(lambda: bus.scrubs.parked)
        await bus.publish(dm("hi from c2", "1", peer="own-c2"))
        await until(lambda: any(m.text == "ok" for m in channel.messages("own-c2")), 10)
        assert not any("more" in a for a in ASKED)  # c1's turn still waits for its batch
        held.set()
        assert await bus.drain(20)
        assert any('"more"' in a for a in ASKED)

    try:
        asyncio.run(main())
    finally:
        rt.close()


KILLED = r"""
import asyncio, os, signal, sys
from pathlib import Path
sys.path[:0] = [sys.argv[3]]
from hermit.sessions.transcript import Transcript
from hermit.channels.base import InboundMessage
from hermit.gateway.deletes_store import RememberedDeletes
from test_scrub_robust import bus_for, runtime, dm
from gatewayhelpers import RecordingChannel

home, store, kind = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[4]
real = Transcript.append_custom
def append_custom(self, custom_type, data, *a, **kw):
    out = real(self, custom_type, data, *a, **kw)
    if custom_type in ("retracted", "edited"):
        print("killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the entry is on disk, nothing after it ran
    return out
Transcript.append_custom = append_custom
bus = bus_for(runtime(home), RecordingChannel(), RememberedDeletes(store))
async def main():
    if kind == "deleted":
        await bus.publish(dm("", "1", change="deleted"))
    else:
        await bus.publish(dm("the locker is at the blue harbour gym", "1", change="edited"))
    await bus.drain(60)
asyncio.run(main())
print("not killed")
"""


@pytest.mark.parametrize("kind", ["deleted", "edited"])
def test_a_kill_right_after_the_entry_hides_the_message_leaves_its_scrub_to_the_next_start(
        tmp_path: Path, kind: str) -> None:
    home, store = tmp_path / "home", tmp_path / "state" / "deletes.json"
    rt = runtime(home)
    try:
        async def said() -> None:
            bus = bus_for(rt, RecordingChannel())
            await bus.publish(dm(SECRET, "1"))
            assert await bus.drain(20)

        asyncio.run(said())
        path = transcript_of(rt)
        assert CODE in path.read_text()
        child = subprocess.run([sys.executable, "-c", KILLED, str(home), str(store), str(Path(__file__).parent), kind],
                               capture_output=True, text=True, timeout=PROC_TIMEOUT,
                               env={**os.environ, "PYTHONPATH": pythonpath()})
        assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
        assert f'"customType":"{"retracted" if kind == "deleted" else "edited"}"' in path.read_text()
        assert CODE in path.read_text()  # killed before any scrub
        deletes = RememberedDeletes(store)  # the gateway starting again
        bus = bus_for(runtime(home), RecordingChannel(), deletes)

        async def main() -> None:
            bus.scrubs.resume()
            assert await bus.drain(60)

        asyncio.run(main())
        assert CODE not in path.read_text(), path.read_text()
        assert deletes.scrubs() == []
    finally:
        rt.close()


def test_two_owners_in_the_main_session_each_delete_and_edit_only_their_own_message_n(tmp_path: Path) -> None:
    """Telegram counts message ids per chat: owner B's delete or edit of their message 5 retracted or missed (and
    kept) owner A's message 5 in the main session (dm_scope main). A transcript written before names a DM message
    without its chat: its sender's delete still finds it."""
    from hermit.sessions.keys import main_session_key

    home = tmp_path / "home"
    ASKED.clear()
    rt = runtime(home)
    bus = bus_for(rt, RecordingChannel())
    theirs = "the boat is moored at pier 9 LW77ZK03"  # owner A's, message 5 of their chat
    main = main_session_key("main")

    def text() -> str:
        record = rt.store.get(main)
        assert record is not None
        return rt.store.transcript_path(record.session_id).read_text()

    async def main_() -> None:
        await bus.publish(dm(theirs, "5", peer="u1"))
        await bus.publish(dm(f"my PIN is {CODE}", "5", peer="u2"))  # owner B's message 5
        await bus.publish(dm("the gate code is 5521Q", "6", peer="u2"))
        assert await bus.drain(20)
        await bus.publish(dm("my PIN is (removed)", "5", peer="u2", change="edited"))
        assert await bus.drain(20)
        assert f"my PIN is {CODE}" not in text() and "(removed) (edited)" in text()  # B's edit is B's
        await bus.publish(dm("", "6", peer="u2", change="deleted"))  # B deletes their 6; A has no 6
        await bus.publish(dm("", "5", peer="u2", change="deleted"))  # and their 5
        assert await bus.drain(20)
        await bus.publish(dm("what do you know?", "7", peer="u1"))
        assert await bus.drain(20)

    try:
        asyncio.run(main_())
        assert "5521Q" not in text()
        assert theirs in ASKED[-1]  # owner A's message 5: neither edited nor hidden
        assert "(edited)" not in ASKED[-1].split(theirs)[0]
        # A transcript from before: owner A's message 7 recorded without its chat; A's delete finds it.
        record = rt.store.get(main)
        assert record is not None
        path = rt.store.transcript_path(record.session_id)
        assert '"ref":"telegram:default:dm:u1:7"' in path.read_text()
        path.write_text(path.read_text().replace('"ref":"telegram:default:dm:u1:7"', '"ref":"telegram:default:7"'))

        async def legacy() -> None:
            await bus.publish(dm("", "7", peer="u1", change="deleted"))
            assert await bus.drain(20)

        asyncio.run(legacy())
        assert '"customType":"retracted","data":{"ref":"telegram:default:7"}' in path.read_text()
        assert "what do you know?" not in path.read_text()
    finally:
        rt.close()
