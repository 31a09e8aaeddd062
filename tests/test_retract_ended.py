"""A delete that comes after its message's session ended (/new, the daily or idle reset) still retracts it (audit H8).

The bus looked for a deleted message only in the session's current transcript: once the session had ended, the
delete found nothing and the ended transcript kept the text in use — the web app's past sessions, `memory_get
sessions/<id>`, memory search with the `sessions` source on, and the end of the session the session-memory hook
saved to memory/ at /new. It now retracts it in the key's ended transcript that holds it (found by the
sessionKey in the headers, among the key's last few sessions of the last days), and in that saved file the
message as saved becomes the placeholder.

Real parts: the Slack channel against the fake Slack on 127.0.0.1 publishing into the real Bus (Router,
AccessControl), an AgentRuntime on a FunctionModel, real transcripts, a real memory index over them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agenthelpers import load_offline
from channelhelpers import run
from fakes.fake_slack import FakeSlack
from gatewayhelpers import RecordingChannel, inbound, make_bus, runtime
from hermit.agent.runtime import AgentRuntime
from hermit.config.schema import MemorySearchConfig
from hermit.gateway.history import chat_history
from hermit.memory.index.session_source import render_transcript
from hermit.memory.service import MemoryKey, MemoryService
from hermit.sessions.entries import RETRACTED_TEXT
from hermit.sessions.keys import group_session_key
from hermit.sessions.transcript import MessageEntry, read_transcript
from hermit.testing import FunctionModel
from memhelpers import HashEmbedder
from prochelpers import PROC_TIMEOUT, pythonpath
from sessionhelpers import Clock
from test_race_retraction import OWNER, ev_acked, slack_gateway, wait_for
from test_trust_deleted_messages import msg

SECRET = "my card PIN is 4711"
MAIN = "agent:main:main"


async def dm(fake: FakeSlack, text: str) -> dict[str, Any]:
    ev, eid = fake.message(text, user=OWNER, channel="D1")
    await fake.push(ev, eid)
    return ev


async def delete_dm(fake: FakeSlack, ev: dict[str, Any], event_id: str) -> None:
    prev = {"type": "message", "user": OWNER, "text": ev["text"], "ts": ev["ts"]}
    await fake.push({"type": "message", "subtype": "message_deleted", "channel": "D1", "channel_type": "im",
                     "hidden": True, "deleted_ts": ev["ts"], "event_ts": "9.1", "previous_message": prev}, event_id)


def user_texts(path: Path) -> str:
    return str([e.message for e in read_transcript(path).entries
                if isinstance(e, MessageEntry) and e.message.get("role") == "user"])


def test_slack_a_delete_after_new_retracts_the_ended_session_everywhere_and_in_search_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with slack_gateway(tmp_path) as g:
            sessions = g.rt.agent.sessions_dir
            cfg = MemorySearchConfig.model_validate({"sources": ["memory", "sessions"],
                                                     "sync": {"dirty_check_interval_ms": 0}})  # a check each search
            svc = MemoryService(MemoryKey("main", g.rt.agent.workspace), tmp_path / "idx.sqlite", cfg, HashEmbedder(),
                                sessions_dir=sessions)
            try:
                ev = await dm(g.fake, SECRET)
                await wait_for(lambda: len(g.seen) == 1)
                assert await g.bus.drain(20)
                await dm(g.fake, "/new")
                await wait_for(lambda: len(g.fake.posted()) == 2)  # the answer, then /new's
                assert await g.bus.drain(20)
                record = g.rt.store.get(MAIN)
                assert record is not None and record.previous_session_id is not None
                ended = sessions / f"{record.previous_session_id}.jsonl"
                [dump] = (g.rt.agent.workspace / "memory").glob("*.md")  # the end of the session, saved at /new
                assert "4711" in dump.read_text()
                svc.sync()
                assert "4711" in str(svc.search("card PIN 4711")["results"])  # indexed while it was said

                await delete_dm(g.fake, ev, "EvDelAfterNew")
                await wait_for(lambda: ev_acked(g.fake))  # acked: what a kill leaves from here on is on disk
                later = user_texts(ended)
                assert "4711" not in later and RETRACTED_TEXT in later, later
                assert "4711" not in ended.read_text()  # the line stays, its text scrubbed (sessions/scrub.py)
                # memory_get sessions/<id>, the web app's past session, memory search (without waiting 5 minutes)
                got = svc.get(f"sessions/{ended.name}")["text"]
                assert "4711" not in got and RETRACTED_TEXT in got, got
                shown = str(chat_history(g.rt.store, MAIN, 50, record.previous_session_id))
                assert "4711" not in shown and RETRACTED_TEXT in shown, shown
                saved = dump.read_text()  # saved before the delete came: the saved message is the placeholder now
                assert "4711" not in saved and f"User: {RETRACTED_TEXT}" in saved and "Assistant: noted" in saved, saved
                assert svc.indexer.is_dirty()
                found = str(svc.search("card PIN 4711")["results"])
                assert "4711" not in found, found
            finally:
                svc.close()

    run(main, timeout=90)


def test_the_dump_at_new_never_holds_a_message_deleted_before_it(tmp_path: Path) -> None:
    """The session-memory hook writes the end of the session to memory/ at /new: a message deleted before then is
    a placeholder there too (it reads the transcript as every reader does)."""
    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel())

    async def main() -> None:
        await bus.publish(inbound(SECRET, message_id="1"))
        await bus.publish(inbound("and remember the blue door", message_id="2"))
        assert await bus.drain(20)
        await bus.publish(replace(inbound("", message_id="1"), change="deleted"))
        await bus.publish(inbound("/new", message_id="3"))
        assert await bus.drain(20)

    asyncio.run(main())
    [dump] = (rt.agent.workspace / "memory").glob("*.md")
    text = dump.read_text()
    assert "blue door" in text and "4711" not in text and RETRACTED_TEXT in text, text


def test_a_delete_after_an_idle_reset_retracts_the_ended_session(tmp_path: Path) -> None:
    """The same after the reset policy ended the session (here idle; the daily reset ends it the same way)."""
    clock = Clock()
    loaded = load_offline(tmp_path, defaults={"session": {"reset": {"mode": "idle", "idle_minutes": 60}}})
    rt = AgentRuntime(loaded.agent(), FunctionModel(lambda _req: "noted"), clock=clock, fsync=False, home=tmp_path)
    bus = make_bus(rt, RecordingChannel())
    group = group_session_key("main", "telegram", "g1")

    async def main() -> None:
        await bus.publish(msg(SECRET, "1"))
        assert await bus.drain(20)
        clock.advance(hours=2)
        await bus.publish(msg("hello again", "2"))  # the session expired: this one starts a new session
        assert await bus.drain(20)
        await bus.publish(msg("", "1", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    record = rt.store.get(group)
    assert record is not None and record.previous_session_id is not None
    ended = rt.agent.sessions_dir / f"{record.previous_session_id}.jsonl"
    assert '"reason":"idle reset"' in ended.read_text()
    later = user_texts(ended)
    assert "4711" not in later and RETRACTED_TEXT in later, later


def test_a_late_delete_looks_only_at_the_keys_last_sessions_of_the_last_days(tmp_path: Path) -> None:
    """Bounded: a flood of deletes must not make the gateway read every transcript. The key's last 8 ended
    sessions changed in the last 30 days are looked at; another chat's sessions never are."""
    from hermit.sessions.retraction import ENDED_DAYS, ENDED_SESSIONS

    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel())
    group = group_session_key("main", "telegram", "g1")
    ids: list[str] = []

    async def main() -> None:
        for n in range(ENDED_SESSIONS + 2):
            await bus.publish(msg(f"secret number {n} is 90{n}", str(n)))
            assert await bus.drain(20)
            record = rt.store.get(group)
            assert record is not None
            ids.append(record.session_id)
            await bus.publish(msg("/new", f"new{n}"))
            assert await bus.drain(20)
        old = rt.agent.sessions_dir / f"{ids[-1]}.jsonl"
        stale = time.time() - (ENDED_DAYS + 1) * 86400
        os.utime(old, (stale, stale))  # the newest ended session, but untouched for longer than looked back
        for n in range(ENDED_SESSIONS + 2):
            await bus.publish(msg("", str(n), change="deleted"))
        assert await bus.drain(20)

    asyncio.run(main())
    rendered = [render_transcript((rt.agent.sessions_dir / f"{i}.jsonl").read_text())[0] for i in ids]
    retracted = [n for n, r in enumerate(rendered) if RETRACTED_TEXT in r]
    # The newest (too old by its time) and the two beyond the last 8 keep theirs; the others are retracted.
    assert retracted == list(range(1, ENDED_SESSIONS + 1)), retracted



# Hermit in a process of its own; with "kill", killed (SIGKILL) as it writes the `retracted` entry.
CHILD = """
import asyncio, os, signal, sys
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from agenthelpers import load_offline
from gatewayhelpers import RecordingChannel, inbound, make_bus, runtime
from hermit.sessions.transcript import Transcript

home, phase = Path(sys.argv[1]), sys.argv[3]
rt = runtime(home, lambda _req: "noted")
bus = make_bus(rt, RecordingChannel())
append = Transcript.append_custom
def killed(self, custom_type, data=None):
    if custom_type == "retracted":
        os.kill(os.getpid(), signal.SIGKILL)
    return append(self, custom_type, data)
async def main():
    if phase == "say":
        await bus.publish(inbound("my card PIN is 4711", message_id="1"))
        await bus.publish(inbound("and the blue door", message_id="2"))
        await bus.publish(inbound("/new", message_id="3"))
    else:
        Transcript.append_custom = killed
        await bus.publish(replace(inbound("", message_id="1"), change="deleted"))
    assert await bus.drain(20)
asyncio.run(main())
print("done")
"""


def test_a_kill_as_the_late_retraction_is_written_leaves_no_deleted_text_in_the_saved_session(tmp_path: Path) -> None:
    """Discord and WhatsApp never send a delete again: what is on disk when Hermit is killed is what stays. The
    saved file is changed before the transcript's entry is written, as the message's files are removed."""
    def child(phase: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(Path(__file__).parent), phase],
                              text=True, capture_output=True, timeout=PROC_TIMEOUT,
                              env={**os.environ, "PYTHONPATH": pythonpath()})

    said = child("say")
    assert said.stdout.strip() == "done", said.stderr
    [dump] = list(tmp_path.glob("**/memory/*.md"))
    assert "4711" in dump.read_text()
    killed = child("kill")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    text = dump.read_text()
    assert "4711" not in text and RETRACTED_TEXT in text and "blue door" in text, text
