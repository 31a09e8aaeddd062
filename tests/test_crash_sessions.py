"""kill -9 at every write step of a session reset (`/new`: the session saved to memory/, then a new session in
sessions.json and a new transcript) and of a turn that runs the pre-compaction memory flush and the compaction
rewrite of the transcript.

After each kill (tests/crashharness.py): the notes the user had are intact; a contact's words are only ever in
that contact's own files (never the owner's daily log or MEMORY.md); nothing is readable by others; no torn line
in a transcript stops the session from loading; and the next /new or turn works with no repair, saving the
conversation once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import crashharness as ch
from hermit.agent.runtime import AgentRuntime
from hermit.agent.session_memory import chat_suffix
from hermit.sessions.keys import dm_session_key, main_session_key

MAIN = main_session_key("main")
CONTACT = dm_session_key("main", "telegram", "2001")
OLD_NOTE = "# 2026-01-19\n\n- the gate code is 5150 (ibexhorn)\n"
SECRET = "my locker PIN is 8812 (tapirglow)"


uid, home = ch.uid, ch.home  # the fixtures: each test as this uid and (as root) as uid 65534


def make(home: Path) -> AgentRuntime:
    return ch.runtime(home, lambda request: "noted")


def sender(key: str) -> str | None:
    return None if key == MAIN else "Eve (2001)"


def _notes(home: Path) -> dict[str, str]:
    memory = home / "workspace" / "memory"
    return {p.name: p.read_text() for p in sorted(memory.iterdir()) if p.is_file() and not p.name.startswith(".")}


def _setup(home: Path) -> None:
    rt = make(home)
    rt.run_turn(MAIN, "the walrus migration plan for Thursday (owlbearish)")
    rt.run_turn(CONTACT, SECRET, sender=sender(CONTACT))
    (home / "workspace" / "memory" / "2026-01-19.md").write_text(OLD_NOTE)
    os.chmod(home / "workspace" / "memory" / "2026-01-19.md", 0o600)


def _new(home: Path, key: str) -> dict[str, Any]:
    result = make(home).run_turn(key, "/new", sender=sender(key))
    return {"reset": result.reset, "session": result.session_id, "reply": result.reply}


def _session_id(home: Path, key: str) -> str:
    data = json.loads((home / "agents" / "main" / "sessions" / "sessions.json").read_text())
    return str(data[key]["sessionId"])


def _contained(home: Path, what: str) -> None:
    """The contact's words are only in the contact's own files; the owner's notes are intact."""
    notes = _notes(home)
    assert notes.get("2026-01-19.md") == OLD_NOTE, what
    for name, text in notes.items():
        if "tapirglow" in text:
            assert chat_suffix(CONTACT) in name, f"{what}: the contact's words are in {name}"
    assert "tapirglow" not in (home / "workspace" / "MEMORY.md").read_text(), what
    assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"


@pytest.mark.parametrize("key", [MAIN, CONTACT], ids=["main", "contact"])
def test_new_session(home: Path, uid: int | None, key: str) -> None:
    def warm(scratch: Path) -> None:
        _setup(scratch)
        _new(scratch, key)
        _new(scratch, key)

    ch.warm(warm)
    ch.ok(lambda: _setup(home), uid=uid)
    old = _session_id(home, key)
    word = f"User: {SECRET}" if key == CONTACT else "User: the walrus migration plan"
    sweep = ch.sweep(home, lambda: _new(home, key), uid=uid)
    for k, label in sweep.each(limit=12, also="session_memory"):
        ch.kill(lambda: _new(home, key), k, label, uid=uid)
        what = ch.describe(k, label)
        _contained(home, what)
        if _session_id(home, key) == old:  # not started yet: the owner or contact sends /new again
            result = ch.ok(lambda: _new(home, key), uid=uid).result
            assert result["reset"] == "/new" and result["session"] != old, f"{what}: {result}"
        saved = [n for n, t in _notes(home).items() if word in t]
        assert len(saved) == 1 and _notes(home)[saved[0]].count(word) == 1, f"{what}: saved {saved}"
        _contained(home, what)
        # the new session answers
        ch.ok(lambda: make(home).run_turn(key, "hello again", sender=sender(key)).reply, uid=uid)
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"


def _compaction_rt(home: Path, log: list[str]) -> AgentRuntime:
    from sessionhelpers import SMALL_COMPACTION, runtime, small_config
    from test_memory_flush import _writing_model

    return runtime(small_config(home, defaults={"compaction": SMALL_COMPACTION}), _writing_model(log, None))


def _turns(home: Path, first: int, last: int) -> list[str]:
    """Turns first..last in a fresh runtime (a process start); what the model was asked for."""
    from sessionhelpers import user_text

    log: list[str] = []
    rt = _compaction_rt(home, log)
    for n in range(first, last + 1):
        rt.run_turn(MAIN, user_text(n))
    return log


def _until_compaction(home: Path, first: int) -> list[str]:
    from sessionhelpers import user_text

    log: list[str] = []
    rt = _compaction_rt(home, log)
    for n in range(first, first + 20):
        rt.run_turn(MAIN, user_text(n))
        if "summary" in log:
            return log
    raise AssertionError("no compaction in 20 turns")


def _compactions(home: Path) -> tuple[int, dict[str, Any], list[str]]:
    sessions = home / "agents" / "main" / "sessions"
    record = json.loads((sessions / "sessions.json").read_text())[MAIN]
    lines = (sessions / f"{record['sessionId']}.jsonl").read_text().splitlines()
    return sum(json.loads(line).get("type") == "compaction" for line in lines), record, lines


def test_flush_and_compaction(home: Path, uid: int | None) -> None:
    """The turn that runs the pre-compaction flush (a note into today's log) and the turn that compacts, killed at
    each step; the restarted process carries on until its compaction: one note per cycle, one compaction."""
    from sessionhelpers import user_text
    from test_memory_flush import DAILY, FACT

    turns: dict[str, int] = {}

    def probe(scratch: Path) -> None:  # in this process (also warms it): which turns flush and compact
        log: list[str] = []
        rt = _compaction_rt(scratch, log)
        for n in range(1, 21):
            rt.run_turn(MAIN, user_text(n))
            turns.setdefault("flush", n) if "flush" in log else None
            if "summary" in log:
                turns["summary"] = n
                return

    ch.warm(probe)
    flush_turn, summary_turn = turns["flush"], turns["summary"]
    assert 1 < flush_turn <= summary_turn
    daily = home / "workspace" / DAILY

    def setup() -> None:
        _turns(home, 1, flush_turn - 1)
        daily.write_text("# today\n- first note (gnuwhistle)\n")
        os.chmod(daily, 0o600)

    ch.ok(setup, uid=uid)
    sweep = ch.sweep(home, lambda: _turns(home, flush_turn, summary_turn), uid=uid)
    assert _compactions(home)[0] == 1 and daily.read_text().count(FACT) == 1
    for k, label in sweep.each(limit=14, also="compaction.py"):
        ch.kill(lambda: _turns(home, flush_turn, summary_turn), k, label, uid=uid)
        what = ch.describe(k, label)
        assert daily.read_text().startswith("# today\n- first note (gnuwhistle)\n"), what
        assert daily.read_text().count(FACT) <= 1, what
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"
        done, _, _ = _compactions(home)
        if done == 0:  # the restarted process: turns go on (the killed one sent again) until the compaction
            ch.ok(lambda: _until_compaction(home, flush_turn), uid=uid)
        else:  # killed after the compaction entry: the next turn (the killed one sent again) settles the count
            ch.ok(lambda: _turns(home, summary_turn, summary_turn), uid=uid)
        # sessions.json may lag its transcript after a kill between the two; the next flush check (or compaction)
        # brings it in line from the transcript before it decides anything: do what it does
        ch.ok(lambda: bool(_compaction_rt(home, [])._maintenance.reconciled(MAIN)), uid=uid)
        entries, record, lines = _compactions(home)
        assert entries == 1 and record["compactionCount"] == 1, f"{what}: {entries} {record}"
        assert record["memoryFlushCompactionCount"] in (0, None), f"{what}: {record}"
        assert daily.read_text().count(FACT) == 1, f"{what}: the cycle's note {daily.read_text().count(FACT)} times"
        assert all(json.loads(line) for line in lines), what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"
