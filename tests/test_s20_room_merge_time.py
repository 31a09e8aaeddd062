"""The merge after a room's command, in time (s20, t2; closing19 "Left"), through the real sandbox (bubblewrap).

- An exec that changes nothing in a room holding many links judged every link again (60,000 links of ~240 parts:
  ~5 s of CPU per exec). Only a merge changes a room's links, and each one that does judges them: one with nothing
  to do now costs close to nothing.
- An exec whose merge waited for another merge of the same room had that wait counted against its own time, and could
  find it gone (its files not kept). Its time now counts from when it has the room.
- A merge refused for time (a full rewrite of 65,000 files on a loaded disk can pass its 91.5 s) says how to get the
  work done, not only that nothing was kept.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pytest import MonkeyPatch

import hermit.tools.room_sandbox as room_sandbox
from hermit.tools.rooms import room_slug
from test_sandbox_attacks import room_tools, run

LINK = "/".join(["x"] * 120 + [".."] * 120)  # 240 parts, 479 bytes: leads back to the room's top (stays inside)


def test_an_exec_that_changes_nothing_does_not_judge_the_rooms_links_again(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path, quota_mb=128)
    out, err = run(runner, "exec", command="mkdir -p L && echo made", timeout=30)
    assert not err and "made" in out
    room = view.room.path
    for i in range(20_000):  # as a command's earlier merges left them (each judged then)
        os.symlink(LINK, room / "L" / f"k{i}")
    cpu = time.thread_time()
    out, err = run(runner, "exec", command="echo nothing", timeout=60)
    cpu = time.thread_time() - cpu
    print(f"\nan exec changing nothing in a room of 20,000 links: {cpu:.2f} s of this thread's CPU "
          f"(load {os.getloadavg()[0]:.1f})")
    assert not err and "nothing" in out and "removed" not in out and "kept" not in out, out[-300:]
    assert len(os.listdir(room / "L")) == 20_000
    assert cpu < 0.8  # 1.9 s before (each of the 20,000 links read and judged)
    # A command that does change a link still has them judged: one leading out through another is removed, the
    # chat told.
    out, err = run(runner, "exec", command="ln -s . L/b; ln -s b/../.. L/esc; echo made", timeout=60)
    assert "made" in out and "[links removed: L/esc" in out, out[-300:]
    assert not os.path.lexists(room / "L" / "esc") and os.readlink(room / "L" / "b") == "."


def _waiting_on(lock: Path) -> bool:
    """Some process waits for the flock on `lock` (a blocked entry in /proc/locks: `N: -> FLOCK …`)."""
    ino = os.stat(lock).st_ino
    with open("/proc/locks") as f:
        return any("->" in line and line.split()[-3].endswith(f":{ino}") for line in f)


def test_an_exec_waiting_for_another_merge_of_its_room_keeps_its_own_time(
        tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    runner, view = room_tools(tmp_path)
    seconds = 2.0
    monkeypatch.setattr(room_sandbox, "merge_seconds", lambda room: seconds)
    lock = view.room.base / f".{room_slug(view.room.audience)}.lock"
    result: list[str] = []
    with view.room.locked():  # another merge of this room (or a file tool) holds it
        worker = threading.Thread(target=lambda: result.append(
            run(runner, "exec", command="echo kept > k.txt; echo ran", timeout=30)[0]))
        worker.start()
        blocked = threading.Event()
        while not blocked.wait(0.05):
            if _waiting_on(lock):
                blocked.set()
        since = time.monotonic()
        while time.monotonic() - since < seconds + 0.5:  # the scenario: the other merge takes all of that time
            threading.Event().wait(0.1)
    worker.join(timeout=60)
    assert result and "ran" in result[0], result
    assert "[kept in this chat's room: k.txt]" in result[0] and "longer than" not in result[0], result[0]
    assert (view.room.path / "k.txt").read_text() == "kept\n"


def test_a_merge_refused_for_time_says_how_to_get_the_work_done(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command="mkdir d && for i in 1 2 3; do echo $i > d/$i; done; echo made", timeout=30)
    assert not err and "made" in out
    monkeypatch.setattr(room_sandbox, "merge_seconds", lambda room: 0.0)
    out, err = run(runner, "exec", command="for i in 1 2 3; do echo x > d/$i; done; echo ran", timeout=30)
    assert "ran" in out and "would take longer than" in out and "what the room held before is unchanged" in out, out
    assert "change fewer files per command" in out and "Run the command again" in out, out
    assert all((view.room.path / "d" / str(i)).read_text() == f"{i}\n" for i in (1, 2, 3))
