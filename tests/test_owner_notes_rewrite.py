"""A whole rewrite (write, not append) of an owner's note after a deleted message: which of its lines are the turn's.

The scrub (agent/owner_notes.py) takes a copy of a deleted message out of the lines the main session's calls wrote.
A whole rewrite writes every line of the file, the owner's own among them; for MEMORY.md the version the rewrite kept
in memory-history tells which lines it added (and, since t9, the version kept of a `memory/private/` note). Where no
earlier text is known — a `memory/private/` note or MEMORY.md whose kept version is gone — every line was taken for
the turn's, so the owner's own line that held the same code before the message was scrubbed too. Now: a rewrite that created the file (its result says
"created") wrote every line; one whose earlier text is not known is left, and the log says so.

Through the real bus, the real runtime and its write tool, with a scripted model.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from test_reaudit17b_owner_notes import CODE, MINE, NOTED, OWN, SECRET, Owner, dm

GYM = "memory/private/gym.md"


def left_said(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not known" in r.getMessage() and name in r.getMessage()]


def test_a_rewrite_of_a_private_note_whose_kept_version_is_gone_leaves_the_owners_own_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """(Since t9 the rewrite keeps the note's previous version, tests/test_t9_private_note_versions.py; here the owner
    cleared it, so the earlier text is not known.)"""
    before = f"# Gym\n{MINE}\n{OWN}\n"
    owner = Owner(tmp_path, "# Memory\n", {CODE: [{"name": "write", "arguments": {"path": GYM,
                                                                                 "content": f"{before}{NOTED}\n"}}]})
    try:
        (owner.ws / "memory" / "private").mkdir(parents=True, exist_ok=True)
        (owner.ws / GYM).write_text(before)
        owner.send(dm(SECRET, "1"))
        assert (owner.ws / GYM).read_text() == f"{before}{NOTED}\n"
        shutil.rmtree(owner.rt.agent.sessions_dir.parent / "memory-history" / "private")  # the owner cleared it
        with caplog.at_level(logging.WARNING, logger="hermit.agent"):
            owner.send(dm("", "1", change="deleted"))
        text = (owner.ws / GYM).read_text()
        assert OWN in text, text  # the owner's own words, which the rewrite only kept
        assert left_said(caplog, "gym.md"), caplog.text  # and what may be left is said
    finally:
        owner.rt.close()


def test_a_private_note_the_turn_created_is_scrubbed_whole(tmp_path: Path) -> None:
    owner = Owner(tmp_path, "# Memory\n", {CODE: [{"name": "write", "arguments": {
        "path": "memory/private/locker.md", "content": f"# Locker\n{NOTED}\n"}}]})
    try:
        owner.send(dm(SECRET, "1"))
        assert NOTED in (owner.ws / "memory" / "private" / "locker.md").read_text()
        owner.send(dm("", "1", change="deleted"))
        text = (owner.ws / "memory" / "private" / "locker.md").read_text()
        assert CODE not in text and "# Locker" in text, text
    finally:
        owner.rt.close()


def test_a_rewrite_of_memory_md_whose_kept_version_is_gone_leaves_the_owners_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    before = f"# Memory\n{MINE}\n{OWN}\n"
    owner = Owner(tmp_path, before, {CODE: [{"name": "write", "arguments": {"path": "MEMORY.md",
                                                                           "content": f"{before}{NOTED}\n"}}]})
    try:
        owner.send(dm(SECRET, "1"))
        assert owner.memory_md() == f"{before}{NOTED}\n"
        shutil.rmtree(owner.rt.agent.sessions_dir.parent / "memory-history")  # the owner cleared it
        with caplog.at_level(logging.WARNING, logger="hermit.agent"):
            owner.send(dm("", "1", change="deleted"))
        assert OWN in owner.memory_md(), owner.memory_md()
        assert left_said(caplog, "MEMORY.md"), caplog.text
    finally:
        owner.rt.close()
