"""The host's merge after a room's command (through the real sandbox, bubblewrap): bounded in time, and cheap for
what the command did not change.

The merge had no time bound: a room of 65,000 empty files made every exec hold its turn 13-45 s after the command
had ended (each entry unpacked onto the host's disk, read again, hashed, and the room walked three times), so any
contact could hold the agent's turn that long per message. Now the merge has the time its room's quota allows (as
its way in: room_limits.quota_seconds); one that would pass it keeps nothing and the room stays as it was, and the
chat is told. An entry that came back as it went in costs no write, and a merge with nothing to do walks nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from pytest import MonkeyPatch

import hermit.tools.room_sandbox as room_sandbox
from ciguard import need
from hermit.tools import safe_fs
from hermit.tools.room_merge import apply_incoming
from hermit.tools.room_unpack import EMPTY, OverTime, Seen, new_staging, unpack
from hermit.tools.rooms import Room, SeedEntry, stamp_of
from prochelpers import PROC_TIMEOUT, python_as
from test_sandbox_attacks import need_sandbox, room_tools, run

NOT_KEPT = "would take longer than"


def inodes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in folder.iterdir()}


def test_a_merge_past_its_time_keeps_nothing_and_the_room_as_it_was(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    runner, view = room_tools(tmp_path, quota_mb=32)
    out, err = run(runner, "exec", command="mkdir d && cd d && seq 3000 | xargs touch && echo made", timeout=30)
    assert not err and "made" in out and "not kept" not in out, out[:300]
    room = view.room.path
    before = inodes(room / "d")
    monkeypatch.setattr(room_sandbox, "merge_seconds", lambda room: 0.0, raising=False)
    started = time.monotonic()
    out, err = run(runner, "exec", command="for f in d/*; do echo x > $f; done; rm d/1; echo new > n.txt; echo ran",
                   timeout=30)
    took = time.monotonic() - started
    assert "ran" in out and NOT_KEPT in out and "what the room held before is unchanged" in out, out[:500]
    assert "kept in this chat's room" not in out
    assert inodes(room / "d") == before and (room / "d" / "1").exists() and not (room / "n.txt").exists()
    assert all(p.stat().st_size == 0 for p in (room / "d").iterdir())
    assert not [n for n in os.listdir(view.room.base) if n.startswith(room_sandbox.STAGING_PREFIX)]
    print(f"\nmerge over its time: the call took {took:.1f} s, the command {out.splitlines()[0]}")
    # The room still works, under its real time.
    monkeypatch.undo()
    out, err = run(runner, "exec", command="echo y > d/2; rm d/3", timeout=30)
    assert not err and "d/2" in out and "d/3 (deleted)" in out and (room / "d" / "2").read_text() == "y\n"


def _seeded(tmp_path: Path, count: int) -> tuple[Room, dict[str, SeedEntry], Path]:
    room = Room(tmp_path / "rooms", "telegram:group:7", 64 << 20)
    staging = tmp_path / "rooms" / "out"
    staging.mkdir(parents=True)
    seed: dict[str, SeedEntry] = {}
    with room.locked() as fd:
        for i in range(count):
            safe_fs.write_beneath(fd, f"f{i}", b"", fsync=False)
            st = safe_fs.lstat_beneath(fd, f"f{i}")
            assert st is not None
            seed[f"f{i}"] = SeedEntry(EMPTY, stamp_of(st))
    for i in range(count):
        (staging / f"f{i}").write_text("changed")
    return room, seed, staging


def test_a_merge_whose_changes_would_pass_its_time_touches_nothing(tmp_path: Path) -> None:
    """Planned first: when what is left of its time does not cover its changes (at the rate its budget is given in),
    none is made — never half of them."""
    room, seed, staging = _seeded(tmp_path, 2000)
    with room.locked() as fd, pytest.raises(OverTime):
        apply_incoming(fd, staging, seed, 64 << 20, deadline=time.monotonic() + 0.5)  # 2,000 changes need 2 s
    assert all((room.path / f"f{i}").read_bytes() == b"" for i in range(2000))
    with room.locked() as fd, pytest.raises(OverTime):
        apply_incoming(fd, staging, seed, 64 << 20, deadline=time.monotonic() - 1)
    assert all((room.path / f"f{i}").read_bytes() == b"" for i in range(2000))


def test_reading_what_came_back_stops_at_its_time(tmp_path: Path) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for i in range(600):
            info = tarfile.TarInfo(f"f{i}")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    data.seek(0)
    staging, fd = new_staging(tmp_path)
    seen: dict[str, Seen] = {}
    try:
        with tarfile.open(fileobj=data, mode="r:") as tar, pytest.raises(OverTime):
            unpack(tar, fd, seen=seen, deadline=time.monotonic() - 1)
    finally:
        os.close(fd)
    assert not seen


def test_an_exec_that_changes_nothing_in_a_big_room_merges_with_little_work(tmp_path: Path) -> None:
    """20,000 empty files: the merge after `true` took 2.6-4 s of CPU (every entry written to a staging folder, read
    back and hashed, the room walked three times). The pack now names what did not change instead of sending it, and
    the merge writes nothing and walks nothing for it."""
    runner, view = room_tools(tmp_path, quota_mb=96)
    out, err = run(runner, "exec", command="mkdir d && cd d && seq 20000 | xargs touch && echo made", timeout=60)
    assert not err and "made" in out and "not kept" not in out, out[:300]
    room = view.room.path
    before = inodes(room / "d")
    cpu = time.thread_time()
    out, err = run(runner, "exec", command="true", timeout=60)
    cpu = time.thread_time() - cpu
    assert not err and "kept" not in out, out[:300]
    print(f"\nno-change exec in a room of 20,000 files: {cpu:.2f} s of this thread's CPU (load "
          f"{os.getloadavg()[0]:.1f})")
    assert cpu < 0.75
    assert inodes(room / "d") == before
    cpu = time.thread_time()
    out, err = run(runner, "exec", command="echo changed > d/5; rm d/6; echo new > d/new", timeout=60)
    cpu = time.thread_time() - cpu
    print(f"one change, one deletion, one new file: {cpu:.2f} s")
    assert not err and "d/5" in out and "d/6 (deleted)" in out and "d/new" in out, out[:300]
    assert (room / "d" / "5").read_text() == "changed\n" and not (room / "d" / "6").exists()
    assert (room / "d" / "new").read_text() == "new\n" and len(os.listdir(room / "d")) == 20000
    assert cpu < 1.5


def test_moved_and_swapped_folders_come_back_whole(tmp_path: Path) -> None:
    """A folder renamed keeps its files' status times: what came back must still be told by its path, its content."""
    runner, view = room_tools(tmp_path, quota_mb=16)
    out, err = run(runner, "exec", command="mkdir a b && for i in $(seq 300); do echo a$i > a/$i; echo b$i > b/$i; "
                                           "done; mkdir m && echo m > m/x && echo made", timeout=30)
    assert not err and "made" in out, out[:300]
    out, err = run(runner, "exec", command="mv a t && mv b a && mv t b && mv m n && echo moved", timeout=30)
    assert not err and "moved" in out and "not kept" not in out, out[:300]
    room = view.room.path
    assert (room / "a" / "7").read_text() == "b7\n" and (room / "b" / "7").read_text() == "a7\n"
    assert len(os.listdir(room / "a")) == len(os.listdir(room / "b")) == 300
    assert (room / "n" / "x").read_text() == "m\n" and not (room / "m").exists()  # before: `m` stayed, empty
    out, err = run(runner, "exec", command="rm -rf n", timeout=30)
    assert not err and "n (deleted)" in out and not (room / "n").exists(), out[:300]


def test_a_folder_the_command_made_unreadable_is_not_merged_and_nothing_is_lost(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command="mkdir -p s && echo keep > s/k && echo made", timeout=20)
    assert not err and "made" in out
    out, err = run(runner, "exec", command="echo other > o.txt; chmod 000 s; echo locked", timeout=20)
    assert "locked" in out and "not kept" in out, out[:300]
    assert (view.room.path / "s" / "k").read_text() == "keep\n" and not (view.room.path / "o.txt").exists()


AS_USER = r'''
import json, os, sys, time
from pathlib import Path
sys.path[:0] = sys.argv[2].split(os.pathsep)
from test_sandbox_attacks import room_tools, run
runner, view = room_tools(Path(sys.argv[1]))
outs = [run(runner, "exec", command="echo a > s.sh; chmod 755 s.sh; echo p > p.txt; chmod 600 p.txt; touch e",
            timeout=20)[0]]
outs.append(run(runner, "exec", command="echo b >> s.sh; echo q >> p.txt; echo x > e; true", timeout=20)[0])
room = view.room.path
print(json.dumps({"uid": os.geteuid(), "outs": outs, "files": {
    n: [oct(os.lstat(room / n).st_mode & 0o7777), os.lstat(room / n).st_uid, (room / n).read_text()]
    for n in sorted(os.listdir(room))}}))
'''


def test_as_an_ordinary_user_the_files_moved_in_are_its_own_with_their_modes(tmp_path: Path) -> None:
    """Hermit as uid 65534 (the tests run as root): a changed file is moved into the room from the staging folder; it
    is Hermit's, and keeps the mode the room's file had (as the file tools' writes do)."""
    need_sandbox()
    uid = 65534 if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="hermit-merge-", dir="/tmp" if uid is not None else tmp_path))
    if uid is not None:
        os.chmod(base, 0o700)
        os.chown(base, uid, uid)
    as_user: dict[str, Any] = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    try:
        python = python_as(as_user)
        need(python is not None, "a Python that can import this checkout as another uid")
        assert python is not None
        script = base / "merge.py"
        script.write_text(AS_USER)
        done = subprocess.run([python, str(script), str(base), os.pathsep.join(sys.path)], capture_output=True,
                              text=True, timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin",
                                                                   "PYTHONPATH": os.pathsep.join(sys.path)}, **as_user)
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"\nHermit as uid {got['uid']}: {got['files']}")
        assert got["uid"] == (uid if uid is not None else os.geteuid())
        assert "[kept in this chat's room: e, p.txt, s.sh]" in got["outs"][1], got["outs"]
        assert got["files"] == {"e": ["0o644", got["uid"], "x\n"], "p.txt": ["0o600", got["uid"], "p\nq\n"],
                                "s.sh": ["0o755", got["uid"], "a\nb\n"]}
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
