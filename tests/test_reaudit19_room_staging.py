"""Re-audit 19 (t10) of the room's merge: what the host fails to stage never reads as deleted, and a merge killed
half-way leaves whole files, no staging folder after the next command, and nothing outside the room.

The merge writes a changed file's new content to its staging folder before it plans (room_unpack._record). An error
there (the host's disk full, a file-size limit) was swallowed, so the file was missing from what came back — and a file
missing from what came back is one the command deleted: the room lost the file, its old version and its new one, and
the chat was told it was deleted. Now such an error keeps nothing of the command's files, and the room is as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from prochelpers import PROC_TIMEOUT, pythonpath
from test_sandbox_attacks import need_sandbox

# Hermit's side in a process of its own, whose files may be at most 1 MB (as a full disk would refuse them).
LIMITED = """
import os, resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_sandbox_attacks import room_tools, run
runner, view = room_tools(Path(sys.argv[1]))
print(run(runner, "exec", command="echo old > f; echo keep > g; echo made")[0])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
print(run(runner, "exec", command="head -c 2000000 /dev/zero > f; echo new > h; echo wrote")[0])
"""


def test_a_file_the_host_cannot_stage_is_not_taken_as_deleted(tmp_path: Path) -> None:
    need_sandbox()
    done = subprocess.run([sys.executable, "-c", LIMITED, str(tmp_path), str(Path(__file__).parent)], text=True,
                          capture_output=True, timeout=PROC_TIMEOUT, env={**os.environ, "PYTHONPATH": pythonpath()})
    assert done.returncode == 0, done.stderr[-2000:]
    room = next(p for p in (tmp_path / "rooms").iterdir() if p.name.startswith("telegram_group_5-"))
    assert "made" in done.stdout and "wrote" in done.stdout, done.stdout
    assert "f (deleted)" not in done.stdout, done.stdout
    assert "[the command's files were not kept: the room could not be read back" in done.stdout, done.stdout
    assert (room / "f").read_text() == "old\n" and (room / "g").read_text() == "keep\n"
    assert not (room / "h").exists()


# Hermit's side killed (SIGKILL) as it moves the 40th changed file into the room.
KILLED = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import hermit.tools.room_merge as room_merge
from test_sandbox_attacks import room_tools, run
runner, view = room_tools(Path(sys.argv[1]))
print(run(runner, "exec", command="mkdir d; for i in $(seq 100); do echo old$i > d/$i; done; echo made")[0])
moved = [0]
real = os.rename
def rename(*args, **kw):
    moved[0] += 1
    if moved[0] == 40:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kw)
room_merge.os.rename = rename  # type: ignore[attr-defined]
run(runner, "exec", command="for i in $(seq 100); do echo new$i > d/$i; done; ln -s d e")
"""

AFTER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_sandbox_attacks import room_tools, run
runner, view = room_tools(Path(sys.argv[1]))
print(run(runner, "exec", command="cat d/1 d/100; echo ran")[0])
"""


def test_a_merge_killed_half_way_leaves_whole_files_and_the_next_command_cleans_up(tmp_path: Path) -> None:
    """What is left: each file the old or the new version, whole (one rename each); the merge written down in the room's
    carry folder (0700), which the room's next use finishes (s20: every file the new version, the chat told);
    nothing outside the room."""
    need_sandbox()
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    tests = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path), tests], text=True, capture_output=True,
                          timeout=PROC_TIMEOUT, env=env)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-2000:])
    rooms = tmp_path / "rooms"
    room = next(p for p in rooms.iterdir() if p.name.startswith("telegram_group_5-"))
    texts = {int(p.name): p.read_text() for p in (room / "d").iterdir()}
    assert sorted(texts) == list(range(1, 101))
    assert all(t in (f"old{i}\n", f"new{i}\n") for i, t in texts.items()), texts
    assert 0 < sum(t.startswith("new") for t in texts.values()) < 100
    left = [p for p in rooms.iterdir() if p.name.startswith((".incoming-", f".{room.name}.carry"))]
    assert left and all(p.stat().st_mode & 0o077 == 0 for p in left)
    assert sorted(p.name for p in rooms.iterdir() if not p.name.startswith(".")) == [room.name]
    done = subprocess.run([sys.executable, "-c", AFTER, str(tmp_path), tests], text=True, capture_output=True,
                          timeout=PROC_TIMEOUT, env=env)
    assert done.returncode == 0 and "ran" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert "new1\nnew100\n" in done.stdout and "that was finished now, all of it" in done.stdout, done.stdout
    assert all((room / "d" / str(i)).read_text() == f"new{i}\n" for i in range(1, 101))
    assert not [p for p in rooms.iterdir() if p.name.startswith((".incoming-", f".{room.name}.carry"))]


def teardown_module() -> None:
    """The killed process could not remove its command's cgroup (as the next Hermit process would)."""
    from hermit.tools.exec_cgroup import remove_stale_groups

    remove_stale_groups()


def test_hard_links_come_back_as_the_files_they_are(tmp_path: Path) -> None:
    """A file the command hard-linked (`ln a b`, `ln -f a b`, `cp -al`) went into the pack as a tar hard link, which the
    unpack refuses (it trusts no link between entries): `b`, a room's file the command had only re-linked, was deleted,
    and a new `d` was silently missing. The pack now stores each such name as the file it is."""
    from test_sandbox_attacks import room_tools, run

    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command="echo keep > b; echo a > a; echo made", timeout=20)
    assert not err and "made" in out, out
    out, err = run(runner, "exec", command="ln -f a b; echo big > c; ln c d; echo linked", timeout=20)
    assert not err and "linked" in out and "b (deleted)" not in out, out
    room = view.room.path
    assert {n: (room / n).read_text() for n in sorted(os.listdir(room))} == {
        "a": "a\n", "b": "a\n", "c": "big\n", "d": "big\n"}
    assert all((room / n).stat().st_nlink == 1 for n in "abcd")
    # Many names of one large file: each is charged as the file it is, so the room's quota still holds.
    out, err = run(runner, "exec", command="head -c 1000000 /dev/zero > big; for i in $(seq 30); do ln big h$i; done; "
                                           "echo many", timeout=30)
    assert not err and "many" in out and ("room is full" in out or "not kept" in out), out[-400:]
    assert view.room.usage() <= view.room.quota_bytes
