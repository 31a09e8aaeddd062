"""kill -9 at every write step of a delete's scrub: the deleted message retracted and its copies scrubbed from the
live transcript, and, for a session already ended by /new, from its ended transcript and the note /new saved it
to (sessions/retraction.py, sessions/scrub.py, agent/session_memory.py).

After each kill (tests/crashharness.py): every transcript still loads and the session answers; the owner's other
notes are intact; nothing is readable by others; and once the delete is done again (what the gateway does at its
next start from deletes.json) the deleted words are nowhere under the state dir — not in a transcript, a note, a
sessions.json, nor a temp file a killed rewrite left.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import crashharness as ch
from hermit.agent.runtime import AgentRuntime
from hermit.models.base import ModelRequest
from hermit.sessions.keys import main_session_key

MAIN = main_session_key("main")
CARD = "4111 1111 1111 1111"
SECRET = f"my card number is {CARD}, keep it for the Lisbon trip"
REF = "telegram:default:dm:u7:1"
OLD_NOTE = "# 2026-01-19\n\n- the gate code is 5150 (ibexhorn)\n"


uid, home = ch.uid, ch.home  # the fixtures: each test as this uid and (as root) as uid 65534


def answer(request: ModelRequest) -> str:
    said = CARD if CARD in str([m.to_dict() for m in request.messages[-1:]]) else "nothing new"
    return f"Got it — your card {said} is noted."


def make(home: Path) -> AgentRuntime:
    return ch.runtime(home, answer)


def _setup(home: Path, ended: bool) -> None:
    rt = make(home)
    rt.run_turn(MAIN, "hello there")
    rt.run_turn(MAIN, SECRET, ref=REF)
    rt.run_turn(MAIN, "and the weather?")
    if ended:
        rt.run_turn(MAIN, "/new")
    note = home / "workspace" / "memory" / "2026-01-19.md"
    note.write_text(OLD_NOTE)
    os.chmod(note, 0o600)


def _retract(home: Path) -> bool:
    return make(home).retract(MAIN, REF)


def _holding(home: Path, needle: str) -> list[str]:
    """Every file under the state dir (temps included) whose bytes hold `needle`."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes())


@pytest.mark.parametrize("ended", [False, True], ids=["live", "ended"])
def test_delete_scrub(home: Path, uid: int | None, ended: bool) -> None:
    def warm(scratch: Path) -> None:
        _setup(scratch, ended)
        _retract(scratch)
        make(scratch).run_turn(MAIN, "still there?")

    ch.warm(warm)
    ch.ok(lambda: _setup(home, ended), uid=uid)
    assert _holding(home, "1111 1111")
    sweep = ch.sweep(home, lambda: _retract(home), uid=uid)
    assert _holding(home, "1111 1111") == [], _holding(home, "1111 1111")
    for k, label in sweep.each(limit=16, also="scrub"):
        ch.kill(lambda: _retract(home), k, label, uid=uid)
        what = ch.describe(k, label)
        assert (home / "workspace" / "memory" / "2026-01-19.md").read_text() == OLD_NOTE, what
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"
        # the session loads and answers, then the delete is done again (the gateway's start, from deletes.json)
        ch.ok(lambda: make(home).run_turn(MAIN, "still there?").reply, uid=uid)
        ch.ok(lambda: _retract(home), uid=uid)
        assert _holding(home, "1111 1111") == [], f"{what}: the deleted words are still in {_holding(home, '1111 1111')}"
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"
