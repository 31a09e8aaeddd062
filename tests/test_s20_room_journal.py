"""A room's merge is whole across a crash (s20, t2; closing19 "Left").

Hermit killed (SIGKILL) while it carried a command's changes into the room left the room half-merged, and the chat was
never told. The merge is now written down before the room is touched (room_journal.commit: the plan and the staged
files flushed, the staging folder renamed to the room's carry folder); the room's next use finishes it and the next
exec says so. Killed before that point, nothing was touched, and the next exec says the files were not kept.

Each case really kills a child Hermit at a chosen step (room_merge.STEP_HOOK, or the journal's own calls) and then
checks, through the next exec, that the room is exactly the old set or exactly the new set — as root and as uid 65534.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import PROC_TIMEOUT, python_as
from test_sandbox_attacks import need_sandbox

# $1 the test's folder, $2 the import path, $3 where to stop: "none", "commit" (before the plan is written down),
# "step:N" (before step N is carried out), "done" (every step carried out, the carry folder not yet removed).
KILLED = r'''
import json, os, signal, sys
from pathlib import Path
sys.path[:0] = sys.argv[2].split(os.pathsep)
import hermit.tools.room_journal as room_journal
import hermit.tools.room_merge as room_merge
from test_sandbox_attacks import room_tools, run
from test_s20_room_journal import snapshot
runner, view = room_tools(Path(sys.argv[1]))
out = run(runner, "exec", command=(
    "mkdir -p d sub/deep; for i in $(seq 30); do echo old$i > d/$i; done; for i in 1 2 3 4 5; do echo x > x$i; done; "
    "echo file > y; echo keep > sub/deep/k; ln -s d l; echo made"), timeout=30)[0]
assert "made" in out, out
print(json.dumps(snapshot(view.room.path)), flush=True)
def kill(*args, **kw):
    os.kill(os.getpid(), signal.SIGKILL)
where = sys.argv[3]
if where == "commit":
    room_journal.commit = kill
elif where == "done":
    room_journal.done = kill
elif where.startswith("step:"):
    at = int(where.split(":")[1])
    room_merge.STEP_HOOK[0] = lambda i: kill() if i == at else None
out = run(runner, "exec", command=(
    "for i in $(seq 30); do echo new$i > d/$i; done; rm x1 x2 x3 x4 x5; rm y; mkdir -p y/z; echo in > y/z/f; "
    "rm -r sub; mkdir n; for i in $(seq 10); do echo n$i > n/$i; done; chmod 700 n/3; rm l; ln -s n l; touch e"),
    timeout=30)[0]
print(json.dumps(snapshot(view.room.path)), flush=True)
print(json.dumps(out), flush=True)
'''

AFTER = r'''
import json, os, sys
from pathlib import Path
sys.path[:0] = sys.argv[2].split(os.pathsep)
from test_sandbox_attacks import room_tools, run
from test_s20_room_journal import snapshot
runner, view = room_tools(Path(sys.argv[1]))
out = run(runner, "exec", command="echo ran", timeout=30)[0]
print(json.dumps(snapshot(view.room.path)), flush=True)
print(json.dumps(out), flush=True)
out = run(runner, "exec", command="echo again", timeout=30)[0]
print(json.dumps(out), flush=True)
'''


def snapshot(room: Path) -> dict[str, list[Any]]:
    """Every entry of the room: a file's content and mode, a folder, a link's text."""
    out: dict[str, list[Any]] = {}
    for path in sorted(room.rglob("*")):
        rel = str(path.relative_to(room))
        if path.is_symlink():
            out[rel] = ["l", os.readlink(path)]
        elif path.is_dir():
            out[rel] = ["d"]
        else:
            out[rel] = ["f", path.read_text(), oct(path.stat().st_mode & 0o777)]
    return out


def _child(script: str, base: Path, where: str, as_user: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    python = python_as(as_user) if as_user else sys.executable
    need(python is not None, "a Python that can import this checkout as another uid")
    assert python is not None
    tests = str(Path(__file__).parent)
    path = os.pathsep.join([tests, *sys.path])
    return subprocess.run([python, "-c", script, str(base), path, where], capture_output=True, text=True,
                          timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path}, **as_user)


def _base(tmp_path: Path, uid: int | None) -> Path:
    if uid is None:
        return tmp_path
    base = Path(tempfile.mkdtemp(prefix="hermit-journal-", dir="/tmp"))
    os.chmod(base, 0o700)
    os.chown(base, uid, uid)
    return base


def _crash_and_recover(tmp_path: Path, where: str, uid: int | None) -> tuple[dict[str, Any], ...]:
    """(the room before the killed exec, the room as the kill left it, the room after the next exec, what that exec
    said, what the exec after it said)."""
    need_sandbox()
    as_user: dict[str, Any] = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    base = _base(tmp_path, uid)
    try:
        done = _child(KILLED, base, where, as_user)
        assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
        old = json.loads(done.stdout.splitlines()[0])
        room = next(p for p in (base / "rooms").iterdir() if p.name.startswith("telegram_group_5-"))
        left = snapshot(room)
        after = _child(AFTER, base, where, as_user)
        assert after.returncode == 0, after.stderr[-2000:]
        lines = after.stdout.splitlines()
        assert not [p for p in (base / "rooms").iterdir() if p.name.startswith((".incoming-", f".{room.name}.carry"))]
        return old, left, json.loads(lines[0]), {"said": json.loads(lines[1]), "then": json.loads(lines[2])}
    finally:
        if uid is not None:
            subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.fixture(scope="module")
def new_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The room after the second exec, not killed: the new set."""
    need_sandbox()
    done = _child(KILLED, tmp_path_factory.mktemp("reference"), "none", {})
    assert done.returncode == 0, done.stderr[-2000:]
    new: dict[str, Any] = json.loads(done.stdout.splitlines()[1])
    assert new["d/1"] == ["f", "new1\n", "0o644"] and new["y/z/f"][1] == "in\n" and new["l"] == ["l", "n"]
    assert "x1" not in new and "sub" not in new and new["n/3"][2] == "0o700"
    return new


# Steps: 5 deletions of x*, sub/deep/k, sub/deep, sub, y, l (deepest first), then d's 30 files, the folders and the
# rest: 3 is among the deletions, 20 among d's files, 52 near the end.
@pytest.mark.parametrize("where", ["step:0", "step:3", "step:20", "step:52", "done"])
def test_a_merge_killed_part_way_is_finished_by_the_next_use_and_the_chat_told(
        tmp_path: Path, new_set: dict[str, Any], where: str) -> None:
    old, left, after, said = _crash_and_recover(tmp_path, where, None)
    assert old != new_set
    # As the kill left it, every file is whole: the old version or the new one.
    for rel, entry in left.items():
        assert entry in (old.get(rel), new_set.get(rel)), (rel, entry)
    assert after == new_set, {k: (after.get(k), new_set.get(k)) for k in set(after) | set(new_set)
                              if after.get(k) != new_set.get(k)}
    assert "ran" in said["said"] and "that was finished now, all of it: " in said["said"], said
    assert "x1 (deleted)" in said["said"] and "sub (deleted)" in said["said"], said
    assert "kept in this chat's room" not in said["said"]  # `echo ran` changed nothing
    assert "finished now" not in said["then"] and "again" in said["then"]  # told once


def test_a_merge_killed_before_it_is_written_down_keeps_nothing_and_says_so(tmp_path: Path) -> None:
    old, left, after, said = _crash_and_recover(tmp_path, "commit", None)
    assert left == old and after == old
    assert "an earlier command's files were not kept: Hermit stopped before they were merged" in said["said"], said
    assert "not kept" not in said["then"]


def test_as_an_ordinary_user_a_killed_merge_is_finished_too(tmp_path: Path, new_set: dict[str, Any]) -> None:
    """Hermit as uid 65534 (the tests run as root): the carry folder is its own, and is finished the same way."""
    uid = 65534 if os.geteuid() == 0 else None
    old, left, after, said = _crash_and_recover(tmp_path, "step:20", uid)
    for rel, entry in left.items():
        assert entry in (old.get(rel), new_set.get(rel)), (rel, entry)
    assert after == new_set
    assert "that was finished now, all of it" in said["said"], said
    old, left, after, said = _crash_and_recover(tmp_path, "commit", uid)
    assert after == old and "not kept: Hermit stopped before" in said["said"], said


def test_a_journal_that_does_not_read_never_locks_the_room_out(tmp_path: Path) -> None:
    """A carry folder whose plan does not parse (it cannot happen through Hermit: the plan is flushed before the folder
    gets its name) is given up with a note; the room stays usable."""
    from hermit.tools import room_journal
    from hermit.tools.rooms import Room

    room = Room(tmp_path / "rooms", "telegram:group:9", 1 << 20)
    with room.fd():
        pass
    (room.path / "a.txt").write_text("a\n")
    carry = room_journal.carry_path(room.base, room.path.name)
    carry.mkdir(mode=0o700)
    (carry / room_journal.JOURNAL).write_text('{"ops": [["f", "a.txt"')
    assert room.pending()
    with room.fd() as fd:
        assert os.fstat(fd).st_ino == room.path.stat().st_ino
    assert not carry.exists() and not room.pending() and (room.path / "a.txt").read_text() == "a\n"
    told = room_journal.heard(room.base, room.path.name)
    assert len(told) == 1 and "the rest could not be kept (JSONDecodeError)" in told[0], told
