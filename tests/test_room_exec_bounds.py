"""How long a room's exec may hold its turn, and which names a room keeps (through the real sandbox, bubblewrap).

The host waited the command's timeout plus a flat 60 s for the wrapper, and the wrapper's listing of the room's top
entries (`set -- "$@" "$f"`, a copy of the whole list at each name) was quadratic and outside its pack's timeout: a
command leaving 20,000 empty files held its turn until the wrapper's CPU limit killed it, and lost its files. Now the
listing is linear and inside the pack's bound, and the host waits for the way in (bounded by the room's quota, which
the command cannot stretch: it runs after) and then the command's time plus ROOM_GRACE_SECONDS. The unpack refused
every name starting with `..`, so `..notes` in a room read as deleted after any exec."""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from pathlib import Path

from pytest import MonkeyPatch

import hermit.tools.room_sandbox as room_sandbox
from hermit.tools.exec import ROOM_GRACE_SECONDS, ROOM_IN_ENTRIES_PER_SECOND, ROOM_START_SECONDS
from hermit.tools.room_unpack import unpack
from hermit.tools.rooms import ENTRY_BYTES
from test_sandbox_attacks import room_tools, run


def elapsed(result: str) -> float:
    """The exec's own measure of the whole run, the room's way in and back included."""
    match = re.search(r"\(([\d.]+)s\)", result.splitlines()[0])
    assert match, result[:300]
    return float(match.group(1))


def room_in_at(monkeypatch: MonkeyPatch) -> list[float]:
    """When each exec's room was in (the feed thread's end, which sets the `fed` event the host's bound counts from:
    exec._wait), on the monotonic clock: a bound measured from there holds at any load, where one measured from the
    call also counts bubblewrap's start."""
    at: list[float] = []
    feed = room_sandbox.RoomRun._feed

    def noted(self: room_sandbox.RoomRun) -> None:
        feed(self)
        at.append(time.monotonic())

    monkeypatch.setattr(room_sandbox.RoomRun, "_feed", noted)
    return at


def test_names_that_only_start_with_dots_stay_in_the_room_across_execs(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command="echo n > ..notes; echo x > ...x; mkdir ..d; echo y > ..d/...; "
                                           "echo z > a..b", timeout=20)
    assert not err and "not kept" not in out, out
    room = view.room.path
    assert sorted(os.listdir(room)) == ["...x", "..d", "..notes", "a..b"]
    out, err = run(runner, "exec", command="cat ..notes ...x ..d/...; echo more > other", timeout=20)
    assert not err and "n\nx\ny" in out and "deleted" not in out, out
    assert sorted(os.listdir(room)) == ["...x", "..d", "..notes", "a..b", "other"]
    assert (room / "..d" / "...").read_text() == "y\n" and (room / "..notes").read_text() == "n\n"
    out, err = run(runner, "exec", command="rm ..notes", timeout=20)
    assert not err and "..notes (deleted)" in out and not (room / "..notes").exists() and (room / "...x").exists()


def test_the_unpack_still_refuses_paths_that_climb_out_or_are_absolute(tmp_path: Path) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("../x", "a/../../y", "/abs", "./..", "..", "./..ok", "sub/...z", "sub/../fine"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"v\n"))
    data.seek(0)
    target = tmp_path / "in" / "room"
    target.mkdir(parents=True)
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with tarfile.open(fileobj=data, mode="r:") as tar:
            assert unpack(tar, fd) == []
    finally:
        os.close(fd)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "in", "in/room", "in/room/..ok", "in/room/fine", "in/room/sub", "in/room/sub/...z"]


def test_twenty_thousand_top_entries_are_handed_back_within_the_time(tmp_path: Path) -> None:
    """The wrapper's listing copied its whole list at each name (21 s of CPU for 20,000 names, 86 s for 40,000)."""
    runner, view = room_tools(tmp_path, quota_mb=128)
    out, err = run(runner, "exec", command="echo keep > keep.txt", timeout=20)
    assert not err
    out, err = run(runner, "exec", command="seq 20000 | xargs touch && echo made; rm keep.txt", timeout=8)
    assert not err and "made" in out and "not kept" not in out and "keep.txt (deleted)" in out, out[:500]
    assert elapsed(out) < 8
    assert len(os.listdir(view.room.path)) == 20000


def test_a_pack_that_never_ends_holds_the_turn_no_longer_than_the_grace(tmp_path: Path,
                                                                        monkeypatch: MonkeyPatch) -> None:
    """No command can stall the pack now (it is bounded inside the wrapper); this shows the host's own bound, the one
    a wrapper that hung would meet: the command's time and ROOM_GRACE_SECONDS once the room is in, not 60 s."""
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command="echo one > one.txt", timeout=20)
    assert not err
    kill = "kill -KILL -1\n"
    assert kill in room_sandbox.WRAPPER
    monkeypatch.setattr(room_sandbox, "WRAPPER", room_sandbox.WRAPPER.replace(kill, kill + "sleep 600\n"))
    in_at = room_in_at(monkeypatch)
    out, err = run(runner, "exec", command="echo two > one.txt; echo ran", timeout=2)
    took = time.monotonic() - in_at[0]  # from when the room was in: the way in (bubblewrap's start) is not this bound
    assert 2 + ROOM_GRACE_SECONDS - 1 < took < 2 + ROOM_GRACE_SECONDS + 6  # the bound ended it; before: 2 + 60 s
    assert err and "timed out" in out and "ran" in out, out
    assert "not handed back in the command's time" in out
    assert (view.room.path / "one.txt").read_text() == "one\n"


def test_a_room_at_its_quota_goes_in_and_out(tmp_path: Path) -> None:
    quota_mb = 64
    runner, view = room_tools(tmp_path, quota_mb=quota_mb)
    entries = (quota_mb << 20) // ENTRY_BYTES - 100  # and the folders' own charge
    out, err = run(runner, "exec", command=f"mkdir d && cd d && seq {entries} | xargs touch && echo made", timeout=60)
    assert not err and "made" in out and "not kept" not in out, out[:500]
    assert view.room.usage() > (quota_mb << 20) - (1 << 20)
    out, err = run(runner, "exec", command="ls d | wc -l; echo changed > d/1; rm d/2", timeout=60)
    assert not err and f"{entries}" in out and "not kept" not in out, out[:500]
    assert elapsed(out) < ROOM_START_SECONDS + entries / ROOM_IN_ENTRIES_PER_SECOND + 60 + ROOM_GRACE_SECONDS
    assert (view.room.path / "d" / "1").read_text() == "changed\n" and not (view.room.path / "d" / "2").exists()
    assert len(os.listdir(view.room.path / "d")) == entries - 1
