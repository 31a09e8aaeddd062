"""A whole rewrite of a `memory/private/` note keeps the note's previous version, as MEMORY.md's rewrites do, and a
delete's scrub (agent/owner_notes.py) finds it: only the lines the turn added lose the deleted text.

Before: no version of a private note was kept, so the scrub could not tell the turn's lines from the owner's in a
rewrite of a note the turn did not create, and left the note (with the copy) and said so. Now the write tool keeps
the text before each rewrite in `<state>/agents/<id>/memory-history/private/<path under memory/private/>/` (files
0600, folders 0700, outside the workspace: no room, index or sandboxed command sees it), and the scrub takes the copy
out of those kept versions too.

Through the real bus, the real runtime and its write/edit tools, with a scripted model.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from test_reaudit17b_owner_notes import CODE, MINE, NOTED, OWN, SECRET, TOWEL, Owner, dm

GYM = "memory/private/gym.md"
DEEP = "memory/private/health/gym.md"


def kept(owner: Owner, note: str) -> dict[Path, str]:
    folder = owner.rt.agent.sessions_dir.parent / "memory-history" / "private" / note.removeprefix("memory/private/")
    return {p: p.read_text() for p in sorted(folder.glob("*.md")) if p.is_file()}


def left_said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not known" in r.getMessage()]


@pytest.mark.parametrize("note", [GYM, DEEP])
def test_a_rewrite_of_a_private_note_keeps_its_version_and_the_delete_scrubs_only_the_turns_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, note: str) -> None:
    before = f"# Gym\n{MINE}\n{OWN}\n"
    owner = Owner(tmp_path, "# Memory\n", {CODE: [{"name": "write", "arguments": {"path": note,
                                                                                 "content": f"{before}{NOTED}\n"}}]})
    try:
        (owner.ws / note).parent.mkdir(parents=True, exist_ok=True)
        (owner.ws / note).write_text(before)
        owner.send(dm(SECRET, "1"))
        assert (owner.ws / note).read_text() == f"{before}{NOTED}\n"
        with caplog.at_level(logging.WARNING, logger="hermit.agent"):
            owner.send(dm("", "1", change="deleted"))
        text = (owner.ws / note).read_text()
        assert NOTED not in text and "- Locker code [deleted]" in text, text  # the turn's line
        assert OWN in text and MINE in text, text  # the owner's own, which the rewrite only kept
        assert not left_said(caplog), caplog.text
        assert list(kept(owner, note).values()) == [before]  # the text the rewrite replaced, kept
    finally:
        owner.rt.close()


def test_a_private_notes_kept_versions_lose_the_deleted_text(tmp_path: Path) -> None:
    """The turn notes the code in a private note (edit); the next turn notes something else there (the version
    holding the code is kept). The delete takes the code out of the note and of every kept version."""
    owner = Owner(tmp_path, "# Memory\n", {
        CODE: [{"name": "edit", "arguments": {"path": GYM, "old": MINE, "new": f"{MINE}\n{NOTED}"}}],
        "towel": [{"name": "edit", "arguments": {"path": GYM, "old": NOTED, "new": f"{NOTED}\n{TOWEL}"}}]})
    try:
        (owner.ws / GYM).parent.mkdir(parents=True, exist_ok=True)
        (owner.ws / GYM).write_text(f"# Gym\n{MINE}\n{OWN}\n")
        owner.send(dm(SECRET, "1"), dm("remember: bring a towel on Fridays", "2"))
        assert any(NOTED in text for text in kept(owner, GYM).values())
        owner.send(dm("", "1", change="deleted"))
        text = (owner.ws / GYM).read_text()
        assert NOTED not in text and TOWEL in text and OWN in text, text
        still = {p.name: t for p, t in kept(owner, GYM).items() if NOTED in t}
        assert still == {}, still
        assert all(OWN in t for t in kept(owner, GYM).values())  # the owner's line stays in every version
    finally:
        owner.rt.close()


def test_a_private_notes_kept_versions_are_owner_only_and_outside_the_workspace(tmp_path: Path) -> None:
    owner = Owner(tmp_path, "# Memory\n", {"swim": [{"name": "write", "arguments": {
        "path": DEEP, "content": f"# Gym\n{MINE}\n{TOWEL}\n"}}]})
    try:
        (owner.ws / DEEP).parent.mkdir(parents=True, exist_ok=True)
        (owner.ws / DEEP).write_text(f"# Gym\n{OWN}\n")
        owner.send(dm("remember: I swim on Tuesdays", "1"))
        [version] = kept(owner, DEEP)
        history = owner.rt.agent.sessions_dir.parent / "memory-history"
        assert not version.resolve().is_relative_to(owner.ws.resolve())
        assert stat.S_IMODE(version.stat().st_mode) == 0o600
        for folder in (history, history / "private", history / "private" / "health", version.parent):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        if os.geteuid() == 0:  # another local user cannot read it
            pid = os.fork()
            if pid == 0:
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    version.read_text()
                    os._exit(1)
                except PermissionError:
                    os._exit(0)
                except BaseException:  # noqa: BLE001 - the child reports by its exit status
                    os._exit(2)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        # MEMORY.md's own kept versions are not mixed with them: the web app lists only MEMORY-*.md
        assert not list(history.glob("MEMORY-*.md"))
    finally:
        owner.rt.close()
