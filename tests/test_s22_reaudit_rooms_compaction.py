"""A turn keeps holding its room across a compaction in the middle of it (re-audit of session 22's room holds, t13).

t8 made a turn hold its chat's room as it was when the turn began (`Room.for_turn`): a room moved away meanwhile — a
re-aimed cron job's, retired to `rooms/retired/` — is never followed to the next room of its name. But a turn whose
request overflowed the context window is rebuilt after compaction (maintenance.recover_overflow → `prepare`), and its
pre-compaction memory flush gets tools of its own: each took a new hold, of whatever folder was under the name then.
A run in flight when its job was re-aimed therefore wrote its old audience's words into the fresh room made for the new
audience, and its flush added a note under the job's audience after the retire had made the others owner-only — both
read by the job's next run, whose replies now reach a group. Now every view a turn takes under its session's lock is
the one hold taken at its start (Confinement.turn).

Real AgentRuntime turns over real HTTP to the fake provider (an overflow, a flush, a summary), the real retire, real
files; the retire runs while the turn's first request is held by the fake provider (no sleeps).
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agenthelpers import TODAY
from conftest import write
from hermit.agent.compaction import SUMMARY_MARKER
from hermit.agent.runtime import TurnResult
from hermit.messages import ToolCallPart
from hermit.scheduler.reaim import RETIRED_ROOMS, retire_job_audience
from hermit.sessions.keys import cron_session_key
from hermit.testing import FakeProvider
from hermit.tools.rooms import room_audience, room_slug
from prochelpers import PROC_TIMEOUT
from sessionhelpers import SMALL_COMPACTION, fake_model, runtime, small_config, user_text

JOB = "locker-job"
KEY = cron_session_key(JOB, "main")
SECRET = "locker code 4821"
FLUSH_MARK = "Pre-compaction memory flush. Store durable memories now"
DAILY = f"memory/{TODAY}.md"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    write(h / "workspace" / DAILY, f"# {TODAY}\n")
    write(h / "workspace" / "MEMORY.md", "# MEMORY.md\n")
    return h


def _files(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_text(errors="replace") for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_turn_rebuilt_after_compaction_keeps_the_room_it_began_with(home: Path) -> None:
    script = [
        {"match": {"contains": FLUSH_MARK}, "tool_calls": [
            {"name": "write", "arguments": {"path": DAILY, "content": f"- flushed: {SECRET}\n", "append": True}}]},
        {"match": {"contains": FLUSH_MARK}, "text": "NO_REPLY"},
        {"match": {"contains": SUMMARY_MARKER}, "text": "## Goals\n- the job's runs.\n"},
        "ack 1", "ack 2", "ack 3",
        {"error": "context_overflow"},  # the run in flight's first request: answered once the job is re-aimed
        {"tool_calls": [{"name": "write", "arguments": {"path": "kept.txt", "content": f"{SECRET}\n"}}]},
        "done",
    ]
    with FakeProvider(script) as fake:
        loaded = small_config(home, fake, "openai", defaults={"compaction": SMALL_COMPACTION})
        rt = runtime(loaded, fake_model(loaded))
        for n in range(1, 4):
            rt.run_turn(KEY, user_text(n))
        rooms = loaded.agent().sessions_dir.parent / "rooms"
        room = rooms / room_slug(room_audience(KEY))
        assert room.is_dir(), "the job's runs have a room"
        fake.hold()
        out: list[TurnResult | BaseException] = []

        def run() -> None:
            try:
                out.append(rt.run_turn(KEY, user_text(4)))
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                out.append(e)

        t = threading.Thread(target=run)
        t.start()
        assert fake.waiting.wait(PROC_TIMEOUT), "the run's first request reached the provider"
        # The owner re-aims the job meanwhile: what its runs kept is retired (scheduler/reaim.py).
        assert retire_job_audience(loaded, "main", JOB, datetime.now(UTC))
        fake.release()
        t.join(PROC_TIMEOUT)
    assert not t.is_alive()
    result = out[0]
    assert isinstance(result, TurnResult), result
    print("reply:", result.reply, "compactions:", result.compactions, "flushes:", result.flushes)
    assert result.compactions == 1, "the overflow was recovered by compaction"
    results = [json.dumps(c.result, default=str) for c in result.tool_calls]
    print("tool results:", results)
    # Nothing of the run in flight is in the room now under the job's name (the new audience's)…
    assert SECRET not in json.dumps(_files(room)), _files(room)
    assert any("moved away" in r for r in results), results
    # …nor in a note under the job's audience: the job's next run (its replies reach a group now) does not read it.
    fresh = rt.tools_for(KEY)
    seen = fresh.run(ToolCallPart("c", "read", {"path": DAILY})).result.content
    print("next run reads:", seen)
    assert SECRET not in seen, seen
    note = (home / "workspace" / DAILY).read_text()
    assert f'audience="cron:{JOB}"' not in note, note
    assert [p.name.split(".")[0] for p in (rooms / RETIRED_ROOMS).iterdir()] == [room.name]
