"""Deletes the earlier scrub work left (agent/owner_notes.py, gateway/scrub_batch.py).

- MEMORY.md and memory/private/ have no origin blocks: a code the owner told the main session, which the answering
  turn wrote there, stayed after the owner deleted the message (every later prompt, search). Now the lines the
  turn's own write/edit calls wrote lose their copies; the owner's other lines — one a failed call named too — stay;
  a web-app save the owner began before the scrub is refused (not written over it), one holding the lock first is
  kept.
- A delete whose intake was cancelled (asyncio.run ending the loop, a channel stopping) started a scrub batch no
  stop waited for: "Task was destroyed but it is pending! … Event.wait()" at exit. Now it is started by the next
  want, turn or stop, and the state dir has it for the next start.
- A gateway starting again scrubbed what a killed one left only after the 2 s gather: at once now.

Real parts: the gateway's Bus, an AgentRuntime on a FunctionModel with the real file tools, real transcripts, the
state dir's deletes.json, the web app's MemoryConsole and a real memory index on the local model.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import fixed_clock, load_offline
from channelhelpers import until
from gatewayhelpers import RecordingChannel, allow_all, route_dm_main_group_own
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.config.schema import MemorySearchConfig
from hermit.errors import HermitError
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.deletes_store import RememberedDeletes, deletes_path
from hermit.gateway.memory_console import MemoryConsole
from hermit.gateway.protocol import MemoryGetParams, MemoryWriteParams
from hermit.gateway.scrub_batch import GATHER_QUIET
from hermit.gateway.supervisor import split_chunks
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.service import MemoryKey, MemoryService
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

CODE = "QX81TR44"
LOCKER = "4417 9920 3381"
SECRET = f"the locker code is {CODE} and the locker number {LOCKER}, at the blue harbour gym"
MINE = "- my own note: swims on Tuesdays"  # the owner's line MEMORY.md had
OWN_CODE = f"- my spare key tag {CODE} (typed by me)"  # the owner's own line; a failed edit named it too
NOTED = f"- Locker: code {CODE}, number {LOCKER}"
PRIVATE = "memory/private/gym.md"


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="u7", sender_id="u7",
                          text=text, message_id=mid, **kw)


def model(req: ModelRequest) -> Reply:
    """The turn told the code notes it in MEMORY.md (edit) and a private note (write), and tries an edit that fails
    (its old text is not in the file); then answers."""
    last = req.messages[-1].to_dict()
    if last.get("role") == "toolResult":
        return "Noted."
    if CODE in json.dumps(last.get("content"), ensure_ascii=False):
        return {"tool_calls": [
            {"name": "edit", "arguments": {"path": "MEMORY.md", "old": MINE, "new": f"{MINE}\n{NOTED}"}},
            {"name": "write", "arguments": {"path": PRIVATE, "content": f"{NOTED}\n- bring a towel\n",
                                            "append": True}},
            {"name": "edit", "arguments": {"path": "MEMORY.md", "old": "no such line", "new": OWN_CODE}}]}
    return "ok"


def bus_for(rt: AgentRuntime, deletes: RememberedDeletes | None = None) -> Bus:
    return Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
               channels={("telegram", "default"): RecordingChannel()}, chunk=split_chunks, deletes=deletes)


class Owner:
    def __init__(self, tmp: Path, memory: MemoryService | None = None, fn: Any = model) -> None:
        self.home = tmp / "home"
        agent = load_offline(self.home).agent()
        self.ws = agent.workspace
        self.ws.mkdir(parents=True, exist_ok=True)
        (self.ws / "MEMORY.md").write_text(f"# Memory\n{MINE}\n{OWN_CODE}\n")
        self.rt = AgentRuntime(agent, FunctionModel(fn), memory=memory, clock=fixed_clock, fsync=False,
                               home=self.home)
        self.bus = bus_for(self.rt)

    def memory_md(self) -> str:
        return (self.ws / "MEMORY.md").read_text()

    def told(self) -> None:
        """The owner's message is answered: the notes hold the code."""
        async def main() -> None:
            await self.bus.publish(dm(SECRET, "1"))
            assert await self.bus.drain(20)
        asyncio.run(main())
        assert self.memory_md() == f"# Memory\n{MINE}\n{NOTED}\n{OWN_CODE}\n", self.memory_md()
        assert NOTED in (self.ws / PRIVATE).read_text()

    def delete(self) -> None:
        async def main() -> None:
            await self.bus.publish(dm("", "1", change="deleted"))
            assert await self.bus.drain(20)
        asyncio.run(main())


def test_a_code_the_turn_put_in_memory_md_and_a_private_note_goes_with_the_deleted_message(
        tmp_path: Path, e5: Any) -> None:
    agent = load_offline(tmp_path / "home").agent()
    cfg = MemorySearchConfig.model_validate({"sync": {"dirty_check_interval_ms": 3_600_000}})
    svc = MemoryService(MemoryKey("main", agent.workspace), tmp_path / "idx.sqlite", cfg, e5)
    owner = Owner(tmp_path, svc)
    console = MemoryConsole(AgentHost({"main": owner.rt}), "main")
    try:
        owner.told()
        opened = console.get(MemoryGetParams(path="MEMORY.md"))  # the owner opens MEMORY.md in the web app
        svc.mark_dirty()
        assert any(LOCKER in r["snippet"] for r in svc.search(f"locker number {LOCKER}")["results"])
        owner.delete()
        text = owner.memory_md()
        assert text == f"# Memory\n{MINE}\n- Locker: code [deleted], [deleted]\n{OWN_CODE}\n", text
        assert (owner.ws / PRIVATE).read_text() == "- Locker: code [deleted], [deleted]\n- bring a towel\n"
        assert not any(LOCKER in r["snippet"] for r in svc.search(f"locker number {LOCKER}")["results"])
        # The owner's save begun from the text before the scrub would bring the code back: refused, not written.
        with pytest.raises(HermitError, match="changed on disk"):
            console.write(MemoryWriteParams(path="MEMORY.md", content=opened["text"] + "- new line\n",
                                            baseSha256=opened["sha256"]))
        assert owner.memory_md() == text
        history = owner.rt.agent.sessions_dir.parent / "memory-history"
        assert not any(LOCKER in p.read_text() for p in history.glob("*.md"))  # the scrub kept no old version
    finally:
        owner.rt.close()
        svc.close()


def test_the_owners_save_holding_the_lock_as_the_scrub_comes_is_kept_and_scrubbed_after(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    try:
        owner.told()
        memory_md = owner.ws / "MEMORY.md"

        async def main() -> None:
            with memory_writes_locked(owner.ws, memory_md):  # as the web app's save holds it
                await owner.bus.publish(dm("", "1", change="deleted"))
                owner.bus.scrubs.hurry()
                await until(lambda: owner.bus.scrubs.batches > 0)  # the batch runs: it waits for the lock
                assert CODE in memory_md.read_text()
                memory_md.write_text(owner.memory_md() + "- the owner's new line\n")  # the owner's save
            assert await owner.bus.drain(20)

        asyncio.run(main())
        text = owner.memory_md()
        assert text == (f"# Memory\n{MINE}\n- Locker: code [deleted], [deleted]\n{OWN_CODE}\n"
                        "- the owner's new line\n"), text
    finally:
        owner.rt.close()


def test_a_delete_whose_intake_is_cancelled_leaves_no_batch_pending_and_the_next_start_scrubs_it(
        tmp_path: Path) -> None:
    """The loop ends (asyncio.run cancels what is left) as a delete is being written: its scrub was wanted in the
    state dir, and the intake's `finally` started a batch no one would run or wait for."""
    owner = Owner(tmp_path)
    store = deletes_path(tmp_path / "state")
    owner.bus = bus_for(owner.rt, RememberedDeletes(store))
    inside, go = threading.Event(), threading.Event()
    real = owner.rt.store.open_transcript
    try:
        owner.told()

        def held(record: Any, **kw: Any) -> Any:  # the delete's retraction, after its scrub is wanted
            inside.set()
            go.wait(20)
            return real(record, **kw)

        async def main() -> None:
            owner.rt.store.open_transcript = held  # type: ignore[method-assign]
            task = asyncio.create_task(owner.bus.publish(dm("", "1", change="deleted")))
            task.add_done_callback(lambda _: go.set())  # cancelled: the thread goes on
            await until(inside.is_set)

        asyncio.run(main())  # returns as the delete is written: asyncio.run cancels its intake
        del owner.rt.store.open_transcript
        assert [t for t in owner.bus.scrubs.tasks() if not t.done()] == []
        assert json.loads(store.read_text())["scrubs"]  # left for the next start
        transcript = "".join(p.read_text() for p in owner.rt.agent.sessions_dir.glob("*.jsonl"))
        assert '"customType":"retracted"' in transcript and CODE in transcript  # hidden, not scrubbed yet
        bus = bus_for(owner.rt, RememberedDeletes(store))  # the next start

        async def restart() -> None:
            bus.scrubs.resume()
            assert await bus.drain(20)

        asyncio.run(restart())
        transcript = "".join(p.read_text() for p in owner.rt.agent.sessions_dir.glob("*.jsonl"))
        assert CODE not in transcript and json.loads(store.read_text()).get("scrubs", []) == []
    finally:
        go.set()
        owner.rt.close()


def test_a_gateway_starting_again_scrubs_what_a_killed_one_left_at_once(tmp_path: Path) -> None:
    """No delete is coming for what the store holds at a start: the batch starts without the GATHER_QUIET wait."""
    owner = Owner(tmp_path)
    store = deletes_path(tmp_path / "state")
    owner.bus = bus_for(owner.rt, RememberedDeletes(store))
    try:
        owner.told()

        async def killed() -> None:  # the delete is written; its batch (gathering) never runs
            await owner.bus.publish(dm("", "1", change="deleted"))
            assert owner.bus.scrubs.batches == 0
            for task in owner.bus.scrubs.tasks():
                task.cancel()

        asyncio.run(killed())
        assert json.loads(store.read_text())["scrubs"]
        deletes = RememberedDeletes(store)
        bus = bus_for(owner.rt, deletes)
        took: list[float] = []

        async def restart() -> None:
            loop = asyncio.get_running_loop()
            start = loop.time()
            bus.scrubs.resume()
            await until(lambda: deletes.scrubs() == [])  # not drain: it hurries every batch
            took.append(loop.time() - start)

        asyncio.run(restart())
        assert took[0] < GATHER_QUIET, took
        assert CODE not in "".join(p.read_text() for p in owner.rt.agent.sessions_dir.glob("*.jsonl"))
    finally:
        owner.rt.close()


KILLED = r"""
import os, signal, sys
from pathlib import Path
import hermit.durable as durable
from hermit.agent.owner_notes import scrub_owner_notes
from hermit.sessions.scrub import find_deleted

ws, transcript, key = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
real = durable.write_all
def write_all(fd, data, **kw):
    real(fd, data[: len(data) // 2], fsync=True)  # half of the new MEMORY.md on disk, then killed
    os.kill(os.getpid(), signal.SIGKILL)
durable.write_all = write_all
scrub_owner_notes(ws, key, find_deleted(transcript, "telegram:default:dm:u7:1"))
print("not killed")
"""


def test_a_kill_mid_scrub_of_memory_md_leaves_it_whole_and_the_delete_finishes_later(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from hermit.sessions.keys import main_session_key
    from prochelpers import PROC_TIMEOUT, pythonpath

    owner = Owner(tmp_path)
    try:
        owner.told()
        key = main_session_key("main")
        record = owner.rt.store.get(key)
        assert record is not None
        before = (owner.ws / "MEMORY.md").read_bytes()
        child = subprocess.run([sys.executable, "-c", KILLED, str(owner.ws),
                                str(owner.rt.store.transcript_path(record.session_id)), key],
                               capture_output=True, text=True, timeout=PROC_TIMEOUT,
                               env={**os.environ, "PYTHONPATH": pythonpath()})
        assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
        assert (owner.ws / "MEMORY.md").read_bytes() == before  # the owner's file, whole
        owner.delete()  # the delete: done now
        assert owner.memory_md() == f"# Memory\n{MINE}\n- Locker: code [deleted], [deleted]\n{OWN_CODE}\n"
    finally:
        owner.rt.close()


def test_a_hard_linked_or_another_users_owner_note_is_left_and_the_rest_is_scrubbed(tmp_path: Path) -> None:
    """Never through a second name, never another user's file (root: MEMORY.md handed to uid 65534, as a file
    planted in a folder they could write): left and logged; the transcript and the other note are scrubbed."""
    import os

    owner = Owner(tmp_path)
    try:
        owner.told()
        note, memory_md = owner.ws / PRIVATE, owner.ws / "MEMORY.md"
        os.link(note, tmp_path / "second-name.md")
        root = os.geteuid() == 0
        if root:
            os.chown(memory_md, 65534, 65534)
        owner.delete()
        assert NOTED in note.read_text() and (tmp_path / "second-name.md").read_text() == note.read_text()
        assert (NOTED in owner.memory_md()) is root, owner.memory_md()
        assert CODE not in "".join(p.read_text() for p in owner.rt.agent.sessions_dir.glob("*.jsonl"))
    finally:
        owner.rt.close()


def test_memory_md_s_kept_versions_lose_the_copy_and_a_whole_rewrite_keeps_the_owners_earlier_line(
        tmp_path: Path) -> None:
    """The turn rewrites MEMORY.md whole (write, not append) with the code's line added: the owner's own line with
    the same code, which the file had before, is the owner's, not the turn's. A later turn's edit keeps the version
    holding the code in memory-history (the web app offers it back): the delete takes the copy out of it too."""
    def tidy(req: ModelRequest) -> Reply:
        last = req.messages[-1].to_dict()
        said = json.dumps(last.get("content"), ensure_ascii=False)
        if last.get("role") == "toolResult":
            return "Noted."
        if CODE in said:
            return {"tool_calls": [{"name": "write", "arguments": {
                "path": "MEMORY.md", "content": f"# Memory\n{MINE}\n{OWN_CODE}\n{NOTED}\n"}}]}
        if "towel" in said:
            return {"tool_calls": [{"name": "edit", "arguments": {
                "path": "MEMORY.md", "old": NOTED, "new": f"{NOTED}\n- bring a towel"}}]}
        return "ok"

    owner = Owner(tmp_path, fn=tidy)
    history = owner.rt.agent.sessions_dir.parent / "memory-history"
    try:
        async def told() -> None:
            await owner.bus.publish(dm(SECRET, "1"))
            await owner.bus.publish(dm("remember the towel", "2"))
            assert await owner.bus.drain(20)
        asyncio.run(told())
        assert owner.memory_md() == f"# Memory\n{MINE}\n{OWN_CODE}\n{NOTED}\n- bring a towel\n"
        assert any(NOTED in p.read_text() for p in history.glob("MEMORY-*.md"))
        owner.delete()
        assert owner.memory_md() == \
            f"# Memory\n{MINE}\n{OWN_CODE}\n- Locker: code [deleted], [deleted]\n- bring a towel\n", owner.memory_md()
        versions = [p.read_text() for p in history.glob("MEMORY-*.md")]
        assert len(versions) == 2 and not any(LOCKER in v for v in versions), versions
        assert all(OWN_CODE in v for v in versions)  # the owner's own line, in every version as typed
    finally:
        owner.rt.close()
