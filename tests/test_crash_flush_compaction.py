"""Hermit killed (SIGKILL) between the steps of a pre-compaction memory flush and the compaction after it: the
restarted process must run the next cycle's flush, and must not run one that already wrote its notes again.

The steps, in order: the flush's write lands in memory/YYYY-MM-DD.md, the flush is bookkept in sessions.json
(memoryFlushCompactionCount), the compaction entry is appended to the JSONL transcript, sessions.json counts it
(compactionCount). Killed after the compaction entry, sessions.json still said "flushed in this cycle", so the
flush of the cycle the compaction had started was skipped: the turns the next compaction summarised were never
flushed to memory, and compactionCount stayed one behind for good. Killed right after the flush's write,
before its bookkeeping, the restarted process flushed the same cycle again and appended the notes twice. Both
are now derived from the transcript (maintenance.py, flush.py).

Each case runs turns in a real Python process that SIGKILLs itself at the chosen step, then a restarted
runtime on the same state dir carries the session on until its next compaction.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write
from prochelpers import PROC_TIMEOUT, pythonpath
from sessionhelpers import SMALL_COMPACTION, runtime, small_config, user_text
from test_memory_flush import DAILY, FACT, MAIN, _writing_model

# The first Hermit process: turns until it SIGKILLs itself at the step named by argv[2]; prints each turn done.
CHILD = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
import hermit.agent.flush as flushing
import hermit.agent.maintenance as maintenance
from hermit.sessions.transcript import Transcript
from sessionhelpers import SMALL_COMPACTION, runtime, small_config, user_text
from test_memory_flush import MAIN, _writing_model

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

point = sys.argv[2]
if point == "flush-wrote":  # the note landed in the daily log; nothing recorded it yet
    run_flush_turn = flushing.run_flush_turn
    flushing.run_flush_turn = lambda *a, **k: run_flush_turn(*a, **{**k, "on_wrote": die})
elif point == "flush-bookkept":  # sessions.json says flushed; the compaction has not started
    maintenance.compact_transcript = die
elif point == "compaction-entry":  # the compaction entry is in the transcript; sessions.json not updated
    append = Transcript.append_compaction
    def append_then_die(self, **kwargs):
        append(self, **kwargs)
        die()
    Transcript.append_compaction = append_then_die
rt = runtime(small_config(Path(sys.argv[1]), defaults={"compaction": SMALL_COMPACTION}), _writing_model([], None))
for n in range(1, 30):
    rt.run_turn(MAIN, user_text(n))
    print(n, flush=True)
"""


def _compactions(home: Path) -> tuple[int, dict[str, object]]:
    """(compaction entries in the main session's transcript, its sessions.json entry)."""
    sessions = home / "agents" / "main" / "sessions"
    record = json.loads((sessions / "sessions.json").read_text())[MAIN]
    lines = (sessions / f"{record['sessionId']}.jsonl").read_text().splitlines()
    return sum(json.loads(line).get("type") == "compaction" for line in lines), record


def _killed_at(home: Path, point: str) -> int:
    """Runs the first process until it kills itself at `point`; the turn it was in."""
    write(home / "workspace" / DAILY, "# today\n- first note\n")
    done = subprocess.run([sys.executable, "-c", CHILD, str(home), point, str(Path(__file__).parent)], text=True,
                          capture_output=True, timeout=PROC_TIMEOUT, env={**os.environ, "PYTHONPATH": pythonpath()})
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)
    assert (home / "workspace" / DAILY).read_text().count(FACT) == 1  # the cycle's flush wrote before the kill
    return len(done.stdout.split()) + 1


def _until_compaction(home: Path, first: int) -> list[str]:
    """A restarted runtime carries the session on until its next compaction; what the model was asked for."""
    after: list[str] = []
    rt = runtime(small_config(home, defaults={"compaction": SMALL_COMPACTION}), _writing_model(after, None))
    for n in range(first, first + 20):
        rt.run_turn(MAIN, user_text(n))
        if "summary" in after:
            break
    return [e for e in after if e != "turn"]


@pytest.mark.parametrize("point", ["flush-wrote", "flush-bookkept", "compaction-entry"])
def test_a_kill_between_the_flush_and_the_compaction_neither_skips_nor_repeats_a_flush(
        tmp_path: Path, point: str) -> None:
    home = tmp_path / "home"
    killed_at = _killed_at(home, point)
    daily = home / "workspace" / DAILY
    entries_before, _ = _compactions(home)
    assert entries_before == (1 if point == "compaction-entry" else 0)
    events = _until_compaction(home, killed_at)
    if point == "compaction-entry":
        # Compaction 1 started cycle 1: its flush runs before compaction 2 summarises that cycle's turns.
        assert events == ["flush", "flush-followup", "summary"], events
    else:
        # Cycle 0 was flushed (its note is on disk): the compaction comes without a second flush.
        assert events == ["summary"], events
    entries, record = _compactions(home)
    assert entries == entries_before + 1
    assert daily.read_text().count(FACT) == entries  # one note per cycle, none twice
    assert record["compactionCount"] == entries
    assert record["memoryFlushCompactionCount"] == entries - 1


def test_a_flushed_cycle_stays_flushed_when_sessions_json_is_rebuilt(tmp_path: Path) -> None:
    """sessions.json lost after the kill is rebuilt from the transcripts: the flush's recorded write still says
    this cycle was flushed (the rebuilt entry had no memoryFlushCompactionCount, so it flushed again)."""
    home = tmp_path / "home"
    killed_at = _killed_at(home, "flush-bookkept")
    (home / "agents" / "main" / "sessions" / "sessions.json").unlink()
    assert _until_compaction(home, killed_at) == ["summary"]
    assert (home / "workspace" / DAILY).read_text().count(FACT) == 1
