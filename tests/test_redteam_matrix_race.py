"""Red-team matrix, what its race found: a room's quota walk against entries vanishing under it (see
tests/test_redteam_matrix.py for the matrix and its link-flipping race)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from hermit.errors import PathPolicyError
from hermit.tools.rooms import Room


def test_a_rooms_quota_walk_survives_entries_vanishing_under_it(tmp_path: Path) -> None:
    """The race's exec calls failed now and then with "error: FileNotFoundError: … '.flip.flip'": an exec
    counts the room's usage (its quota) without the room's lock, and an entry removed or renamed between the
    listing and its lstat (a write's temp file renamed into place, another exec's merge, a thread of the same
    group) ended the walk, so the command never ran. A walk now passes over entries (and folders) that vanish
    under it. Played on a real room: one thread renames and removes entries as fast as it can while the room's
    usage is counted."""
    room = Room(tmp_path / "rooms", "telegram:dm:42", 256 << 20)
    with room.fd():
        pass
    for i in range(40):
        (room.path / f"keep{i}.txt").write_text("x")
    stop = threading.Event()
    churned = [0]

    def churn() -> None:
        while not stop.is_set():
            for i in range(20):
                tmp, dst, sub = room.path / f".t{i}.tmp", room.path / f"moved{i}.txt", room.path / f"d{i}"
                tmp.write_text("y")
                os.replace(tmp, dst)
                dst.unlink()
                sub.mkdir()
                (sub / "f").write_text("z")
                (sub / "f").unlink()
                sub.rmdir()
                os.symlink("keep0.txt", sub)  # a folder that became a link: never followed
                sub.unlink()
            churned[0] += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    errors: list[str] = []
    try:
        while churned[0] < 60 and not errors:
            try:
                assert room.usage() >= 40 * 4096
            except OSError as e:
                errors.append(f"{type(e).__name__}: {e}")
            except PathPolicyError as e:
                errors.append(f"PathPolicyError: {e}")
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors
