"""A deleted message's copies in what Hermit wrote from its session afterwards are scrubbed (sessions/scrub.py).

Retracting hid the user message itself, but the assistant's reply quoting it, its tool call's arguments, a
compaction summary carrying it forward and the memory flush's note (found by memory search) kept it: the model
saw the card number on every later turn. Real parts: the Bus and an AgentRuntime on a FunctionModel with a small
context window (a real flush and compaction), real transcripts, a real memory index with the local model.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, make_bus
from hermit.agent.compaction import SUMMARY_MARKER
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryKey, MemoryService
from hermit.models.base import ModelProfile, ModelRequest
from hermit.sessions.keys import group_session_key, main_session_key
from hermit.sessions.transcript import Transcript, read_transcript
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply, request_text
from prochelpers import PROC_TIMEOUT, pythonpath
from sessionhelpers import SMALL_COMPACTION, SMALL_WINDOW, user_text

CARD = "4111 1111 1111 1111"
SECRET = f"my card number is {CARD}, keep it for the Lisbon trip"
OWNER_LINE = "- my card number is in the blue wallet, says the owner"  # shares words and a run: not Hermit's
NOTE_SECRET = f"- Card for the Lisbon trip: {CARD}"
NOTE_PLAIN = "- The user likes green tea"
MAIN = main_session_key("main")
GROUP = group_session_key("main", "telegram", "g1")
DAILY = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md")


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="u7", sender_id="u7",
                          text=text, message_id=mid, **kw)


def model_fn(requests: list[ModelRequest]) -> Any:
    """Echoes a card number it is told in a tool call and its reply, a compaction summary and a flush note."""
    def reply(req: ModelRequest) -> Reply:
        requests.append(req)
        if "You name saved conversations" in req.system:  # the slug of the file /new saves the session to
            return "trip-plans"
        if SUMMARY_MARKER in req.system:
            said = CARD if CARD in request_text(req) else "nothing"
            return f"## Identifiers\n- card {said} (for the Lisbon trip)"
        last = req.messages[-1].to_dict()
        content = last.get("content")
        text = content if isinstance(content, str) else " ".join(
            str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
        if last.get("role") == "user" and "Pre-compaction memory flush" in text:
            path = DAILY.search(text)
            assert path is not None
            return {"tool_calls": [{"name": "write", "arguments": {
                "path": path.group(0), "content": f"{NOTE_SECRET}\n{NOTE_PLAIN}\n", "append": True}}]}
        if last.get("role") == "toolResult":
            if last.get("toolName") == "write":
                return "NO_REPLY"
            return f"Got it — your card {CARD} is noted, for the Lisbon trip."
        if last.get("role") == "user" and CARD in text:
            return {"tool_calls": [{"name": "memory_search", "arguments": {"query": f"card {CARD}"}}]}
        return "ack"

    return reply


def make_runtime(home: Path, requests: list[ModelRequest], memory: MemoryService | None = None) -> AgentRuntime:
    loaded = load_offline(home, defaults={"compaction": SMALL_COMPACTION})
    model = FunctionModel(model_fn(requests), profile=ModelProfile("scripted", "small", context_window=SMALL_WINDOW))
    return AgentRuntime(loaded.agent(), model, memory=memory, clock=fixed_clock, fsync=False, home=home)


def test_a_deleted_message_leaves_no_copy_in_replies_summaries_flush_notes_or_search(tmp_path: Path, e5: Any) -> None:
    home = tmp_path / "home"
    requests: list[ModelRequest] = []
    loaded = load_offline(home)
    agent = loaded.agent()
    cfg = MemorySearchConfig.model_validate({"sync": {"dirty_check_interval_ms": 3_600_000}})  # re-synced when told
    svc = MemoryService(MemoryKey("main", agent.workspace), tmp_path / "idx.sqlite", cfg, e5)
    rt = make_runtime(home, requests, svc)
    daily: list[Path] = []
    bus = make_bus(rt, RecordingChannel())

    def found(query: str) -> str:
        return str([r["snippet"] for r in svc.search(query)["results"]])

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        await bus.publish(InboundMessage(channel="telegram", account_id="default", peer_kind="group", peer_id="g1",
                                         sender_id="u8", text=f"the test card {CARD} is public", message_id="1"))
        assert await bus.drain(20)
        for n in range(2, 16):
            await bus.publish(dm(user_text(n), str(n)))
            assert await bus.drain(20)
            record = rt.store.get(MAIN)
            if record is not None and record.compaction_count >= 1 and record.memory_flush_compaction_count >= 1:
                break
        daily.extend((rt.agent.workspace / "memory").glob("????-??-??.md"))
        assert len(daily) == 1
        daily[0].write_text(f"# Notes\n{OWNER_LINE}\n\n{daily[0].read_text()}")  # the owner's own line, first
        svc.mark_dirty()
        assert CARD in found(CARD)  # noted, and found
        await bus.publish(dm("", "1", change="deleted"))
        assert await bus.drain(20)
        await bus.publish(dm("what do you know about my trip?", "99"))
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        record = rt.store.get(MAIN)
        assert record is not None and record.compaction_count >= 1, record
        transcript = rt.agent.sessions_dir / f"{record.session_id}.jsonl"
        raw = transcript.read_text()
        # What the compaction and the flush wrote held it before, as the reply and the tool call did.
        assert '"customType":"retracted"' in raw and '"type":"compaction"' in raw and "memory_flush" in raw
        assert "[deleted]" in raw
        last = requests[-1]
        sent = request_text(last) + str([m.to_dict() for m in last.messages])
        assert "what do you know about my trip?" in sent
        assert "1111" not in sent and "Lisbon trip" not in sent, sent
        assert "1111" not in raw and "Lisbon" not in raw and "keep it for" not in raw
        assert not read_transcript(transcript).problems
        note = daily[0].read_text()
        assert CARD not in note and "Lisbon trip" not in note, note
        assert "- Card [deleted]: [deleted]" in note and NOTE_PLAIN in note  # the flush's other line kept
        assert note.startswith(f"# Notes\n{OWNER_LINE}\n")  # the owner's line, though it shares a run: untouched
        assert "1111" not in found(CARD), found(CARD)
        # Another session's copy is not this message's: the group's transcript keeps its reply.
        group = rt.store.get(GROUP)
        assert group is not None
        assert CARD in (rt.agent.sessions_dir / f"{group.session_id}.jsonl").read_text()
    finally:
        svc.close()


def test_a_delete_after_new_scrubs_the_replies_saved_with_the_session_and_its_ended_transcript(tmp_path: Path) -> None:
    """The end of a session saved at /new holds the assistant's reply quoting the message deleted after it: the
    message became the placeholder there, the reply kept the card number (and memory search found it)."""
    requests: list[ModelRequest] = []
    rt = make_runtime(tmp_path / "home", requests)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        await bus.publish(dm("/new", "2"))
        assert await bus.drain(20)
        [dump] = (rt.agent.workspace / "memory").glob("*trip-plans*.md")
        assert f"Assistant: Got it — your card {CARD}" in dump.read_text()
        await bus.publish(dm("", "1", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    [dump] = (rt.agent.workspace / "memory").glob("*trip-plans*.md")
    saved = dump.read_text()
    assert "1111" not in saved and "Lisbon" not in saved, saved
    assert "Assistant: Got it — your card [deleted] is noted, [deleted]." in saved
    record = rt.store.get(MAIN)
    assert record is not None and record.previous_session_id is not None
    ended = (rt.agent.sessions_dir / f"{record.previous_session_id}.jsonl").read_text()
    assert "1111" not in ended and '"customType":"retracted"' in ended


def test_a_reply_a_running_turn_wrote_after_the_scrub_is_scrubbed_when_the_message_is_retracted_again(
        tmp_path: Path) -> None:
    """A turn running when the delete came had the message in its context: its reply, written after the scrub,
    may quote it, and the transcript no longer holds the text to find it by. Retracted again after that turn
    (runtime.retract), its copy goes too: what the first scrub found is kept in memory for a while."""
    requests: list[ModelRequest] = []
    rt = make_runtime(tmp_path / "home", requests)
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        await bus.publish(dm("", "1", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(MAIN)
    assert record is not None
    path = rt.store.transcript_path(record.session_id)
    assert CARD not in path.read_text()
    rt.store.open_transcript(record).append_message(
        {"role": "assistant", "content": [{"type": "text", "text": f"As you said: {CARD}."}]})
    assert rt.retract(MAIN, "telegram:default:dm:u7:1")  # a main-session DM names its chat
    assert CARD not in path.read_text() and "As you said: [deleted]." in path.read_text()


KILLED_CHILD = r"""
import os, signal, sys
from pathlib import Path
import hermit.durable as durable
from hermit.sessions.retraction import retract_in
from hermit.sessions.transcript import Transcript

path, point = Path(sys.argv[1]), sys.argv[2]
if point == "writing":
    real = durable.write_all
    def write_all(fd, data, **kw):
        if ".tmp" not in os.readlink(f"/proc/self/fd/{fd}"):  # not the scrub's new file (its write_atomic temp)
            return real(fd, data, **kw)
        real(fd, data[: len(data) // 2], fsync=True)  # half of the new file on disk, then killed
        os.kill(os.getpid(), signal.SIGKILL)
    durable.write_all = write_all
else:
    def fsync_dir(directory):  # the new file has the name; the `retracted` entry is not written yet
        os.kill(os.getpid(), signal.SIGKILL)
    durable.fsync_dir = fsync_dir
retract_in(Transcript.open(path), "telegram:default:1", None)
print("not killed")
"""


def _transcript(path: Path) -> Transcript:
    t = Transcript.create(path, cwd=path.parent, session_key=MAIN, fsync=False)
    t.append_message({"role": "user", "content": [{"type": "text", "text": "hello"}], "ref": "telegram:default:0"})
    t.append_message({"role": "user", "content": [{"type": "text", "text": SECRET}], "ref": "telegram:default:1"})
    t.append_message({"role": "assistant", "content": [{"type": "text", "text": f"Noted: {CARD}."}]})
    t.append_message({"role": "user", "content": [{"type": "text", "text": f"and {CARD}?"}], "ref": "telegram:default:2"})
    return t


@pytest.mark.parametrize("point", ["writing", "renamed"])
def test_a_kill_mid_scrub_leaves_the_old_transcript_or_the_new_one_and_the_delete_can_finish(
        tmp_path: Path, point: str) -> None:
    path = tmp_path / "sessions" / "s1.jsonl"
    _transcript(path)
    before = path.read_bytes()
    child = subprocess.run([sys.executable, "-c", KILLED_CHILD, str(path), point], capture_output=True, text=True,
                           timeout=PROC_TIMEOUT, env={**os.environ, "PYTHONPATH": pythonpath()})
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    read = read_transcript(path)
    assert not read.problems and read.header.session_key == MAIN
    after = path.read_bytes()
    if point == "writing":
        assert after == before  # the old file, whole
        assert len(list(path.parent.iterdir())) == 2  # and the half-written temp file beside it
    else:
        assert CARD.encode() not in after.split(b"\n")[2] and b"Noted: [deleted]." in after  # the new one, whole
        assert f"and {CARD}?".encode() in after  # the user's own later words are theirs
    # The delete is done again (the event is not acked until it is): nothing half-done in its way.
    from hermit.sessions.retraction import retract_in

    t = Transcript.open(path, fsync=False)
    assert retract_in(t, "telegram:default:1", None)
    final = path.read_text()
    assert "Lisbon" not in final and "Noted: [deleted]." in final and final.count(CARD) == 1
    assert not read_transcript(path).problems
    if point == "writing":  # the killed scrub's temp file (half of the new one) is gone with the second
        assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_an_append_waiting_while_the_transcript_is_scrubbed_lands_in_the_new_file(tmp_path: Path) -> None:
    """A turn appending while a delete is scrubbed: it opened the old file, then waited for the lock the scrub
    held while it put the new file in its place. Its entry went to the old file, gone with its name."""
    import hermit.durable as durable
    import hermit.sessions.transcript as transcript_module
    from hermit.sessions.retraction import retract_in

    path = tmp_path / "sessions" / "s1.jsonl"
    _transcript(path)
    waiting = threading.Event()
    real_lock, real_write = transcript_module.lock_fd, durable.write_all
    other = Transcript.open(path, fsync=False)
    appended: list[BaseException | None] = []

    def lock_fd(fd: int, **kw: Any) -> bool:
        if threading.current_thread().name == "appender":
            waiting.set()  # opened, about to wait for the scrub's lock
        return real_lock(fd, **kw)

    def append() -> None:
        try:
            other.append_message({"role": "assistant", "content": [{"type": "text", "text": "a turn's reply"}]})
            appended.append(None)
        except BaseException as e:  # noqa: BLE001 - reported below
            appended.append(e)

    thread = threading.Thread(target=append, name="appender")

    def write_all(fd: int, data: bytes, **kw: Any) -> None:
        if threading.current_thread().name != "appender" and not thread.is_alive() and not appended:
            thread.start()  # the scrub's new file (its write_atomic): the append now waits for the scrub's lock
            assert waiting.wait(10)
        real_write(fd, data, **kw)

    transcript_module.lock_fd = lock_fd  # type: ignore[assignment]
    durable.write_all = write_all  # type: ignore[assignment]
    try:
        assert retract_in(Transcript.open(path, fsync=False), "telegram:default:1", None)
        thread.join(10)
    finally:
        transcript_module.lock_fd = real_lock
        durable.write_all = real_write
    assert appended == [None]
    read = read_transcript(path)
    texts = [str(e.message) for e in read.entries if hasattr(e, "message")]
    assert any("a turn's reply" in t for t in texts), texts
    assert not read.problems and "Lisbon" not in path.read_text()


def test_flush_notes_are_scrubbed_only_in_their_sessions_blocks_and_never_through_a_link(tmp_path: Path) -> None:
    """The flush's recorded write is the provenance: the same line in another session's block, or outside any block
    (the owner's), is left; a memory file swapped for a link to a file elsewhere is neither read nor replaced."""
    from hermit.agent.flush import scrub_flush_notes
    from hermit.sessions.scrub import deleted_in

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    mine, other = '<!-- origin session="agent:main:main" -->', '<!-- origin session="agent:main:telegram:group:g1" -->'
    text = (f"{NOTE_SECRET}\n\n{other}\n{NOTE_SECRET}\n<!-- /origin -->\n\n{mine}\n{NOTE_SECRET}\n{NOTE_PLAIN}\n"
            "<!-- /origin -->\n")
    note = ws / "memory" / "2026-01-20.md"
    note.write_text(text)
    elsewhere = tmp_path / "elsewhere.md"
    elsewhere.write_text(text)
    (ws / "memory" / "2026-01-21.md").symlink_to(elsewhere)
    write = {"role": "assistant", "content": [
        {"type": "toolCall", "id": "c", "name": "write", "arguments": {"path": f"memory/{day}.md", "content": NOTE_SECRET}}
        for day in ("2026-01-20", "2026-01-21")]}
    deleted = deleted_in([
        {"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": SECRET}], "ref": "r"}},
        {"type": "custom", "customType": "memory_flush", "data": {"message": write}}], "r")
    assert deleted is not None
    assert scrub_flush_notes(ws, MAIN, deleted) == {note.resolve(): 1}
    assert note.read_text() == text.replace(f"{mine}\n{NOTE_SECRET}", f"{mine}\n- Card [deleted]: [deleted]")
    assert elsewhere.read_text() == text and (ws / "memory" / "2026-01-21.md").is_symlink()


@pytest.mark.parametrize(("said", "copy", "kept"), [
    ("my password is correcthorse battery", "Your password correcthorse battery is safe", None),
    ("the code is hunter22 ok", "I will remember HUNTER22.", None),
    ("call me on +49 171 2345678", "Calling 49-171-2345678 now", None),
    ("can you tell me the weather in 2026?", "Sure, can you tell me more? It is 2026.", True),
    ("my PIN is 4711", "Your PIN 4711 and the year 2026 noted", None),  # named a secret (test_scrub_left_pin.py)
    ("we met in 2019, 4711 of us", "4711 of you in 2019, and the year 2026", True),
])
def test_what_counts_as_a_copy(said: str, copy: str, kept: bool | None) -> None:
    """Runs of 12+ characters with an uncommon word, and secret-looking words or numbers of 6+ digits (4+ when the
    message names them a PIN, code, password …); never a run of common words, a year, a short number on its own."""
    from hermit.sessions.scrub import Verbatim

    out, n = Verbatim((said,)).scrub(copy)
    if kept:
        assert (out, n) == (copy, 0)
    else:
        assert n >= 1 and "[deleted]" in out and not any(
            w in out.lower() for w in ("correcthorse", "hunter22", "2345678")), out


def test_a_reply_a_turn_running_at_the_delete_writes_is_scrubbed_once_that_turn_is_over(tmp_path: Path) -> None:
    """Through the bus: the second message's turn is running (its model call held) when the first message is
    deleted; its reply quotes the card from its context. The bus retracts again once that turn is over."""
    requests: list[ModelRequest] = []
    called, release = threading.Event(), threading.Event()

    def reply(req: ModelRequest) -> Reply:
        requests.append(req)
        if "hold this turn" in request_text(req) and not release.is_set():
            called.set()
            assert release.wait(PROC_TIMEOUT)
            return f"Noted again: your card {CARD}."
        return "ack"

    loaded = load_offline(tmp_path / "home")
    model = FunctionModel(reply, profile=ModelProfile("scripted", "big"))
    rt = AgentRuntime(loaded.agent(), model, clock=fixed_clock, fsync=False, home=tmp_path / "home")
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(dm(SECRET, "1"))
        assert await bus.drain(20)
        await bus.publish(dm("hold this turn", "2"))
        assert await asyncio.to_thread(called.wait, PROC_TIMEOUT)
        await bus.publish(dm("", "1", change="deleted"))  # retracted now; the running turn still writes
        release.set()
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(MAIN)
    assert record is not None
    raw = rt.store.transcript_path(record.session_id).read_text()
    assert "Noted again: your card [deleted]." in raw, raw
    assert CARD not in raw
