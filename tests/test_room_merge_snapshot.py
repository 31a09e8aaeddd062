"""The pack names what the command left unchanged instead of sending it (through the real sandbox, bubblewrap).

Before the command the wrapper notes every entry of the room (inode, status-change time, path) in its /tmp; after it,
only entries whose line changed go into the tar, the rest are named. That note is the command's to spoil (the same
uid): these tests spoil it every way a command can and show that only the command's own changes are lost by it, never
the room's files, and that nothing comes back that was not the room's. A change the command makes at once (in the
clock tick the room went in) or through a shared mapping is still seen."""

from __future__ import annotations

import time
from pathlib import Path

from pytest import MonkeyPatch

from hermit.tools.exec import ROOM_GRACE_SECONDS
from hermit.tools.room_wrapper import PACK_SECONDS
from test_room_exec_bounds import room_in_at
from test_sandbox_attacks import room_tools, run

SETUP = ("echo a > a.txt; echo b > b.txt; mkdir d; for i in $(seq 50); do echo $i > d/$i; done; "
         "head -c 4096 /dev/zero | tr '\\0' a > m.bin; echo made")
SNAP = "S=$(ls -d /tmp/.hermit-room-*); "


def room_files(room: Path) -> dict[str, str]:
    return {str(p.relative_to(room)): p.read_text() for p in sorted(room.rglob("*")) if p.is_file()}


def test_a_command_that_removes_the_note_has_its_room_packed_whole(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command=SETUP, timeout=20)
    assert not err and "made" in out
    out, err = run(runner, "exec", command=SNAP + "rm -rf $S; echo changed > a.txt; echo n > new.txt; rm d/7; "
                                                  "echo removed", timeout=20)
    assert not err and "removed" in out and "not kept" not in out, out
    files = room_files(view.room.path)
    assert files["a.txt"] == "changed\n" and files["new.txt"] == "n\n" and "d/7" not in files
    assert files["b.txt"] == "b\n" and len([f for f in files if f.startswith("d/")]) == 49


def test_a_command_that_fills_tmp_has_its_room_packed_whole(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command=SETUP, timeout=20)
    assert not err and "made" in out
    out, err = run(runner, "exec", command=SNAP + "rm -f $S/tick $S/mark; head -c 100000000 /dev/zero > /tmp/fill; "
                                                  "echo changed > a.txt; rm d/8; echo filled", timeout=20)
    assert "filled" in out and "not kept" not in out, out
    files = room_files(view.room.path)
    assert files["a.txt"] == "changed\n" and "d/8" not in files and files["b.txt"] == "b\n"


def test_a_forged_note_loses_only_the_commands_own_changes(tmp_path: Path) -> None:
    """The command writes its changed and new files' lines into the note, as if they had come in so: they are named
    unchanged. A named path the room had keeps the room's version; one it did not have is not created; nothing else
    of the room moves, and nothing lands outside it."""
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command=SETUP, timeout=20)
    assert not err and "made" in out
    before = room_files(view.room.path)
    forge = (SNAP + "echo changed > a.txt; echo n > new.txt; mkdir -p x/y; echo deep > x/y/z; "
             "LC_ALL=C find . -mindepth 1 \\( -path ./a.txt -o -path ./new.txt -o -path ./x -o -path ./x/y "
             "-o -path ./x/y/z \\) -printf '%i %C@ %p\\0' >> $S/before; "
             "printf '1 1.0 ./../../etc/passwd\\0' >> $S/before; "
             "LC_ALL=C sort -z -o $S/before $S/before; echo forged")
    out, err = run(runner, "exec", command=forge, timeout=20)
    assert not err and "forged" in out and "not kept" not in out, out
    assert "kept in this chat's room" not in out  # nothing the room did not have, and no change, came back
    assert room_files(view.room.path) == before
    assert [p.name for p in view.room.base.iterdir() if p.is_dir()] == [view.room.path.name]


def test_a_note_made_unreadable_or_replaced_by_a_fifo(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    """An unreadable note, or one that is a FIFO, packs the room whole; a FIFO where the pack writes its list holds the
    pack until its time is up, and then nothing of it is merged: the room stays as it was."""
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command=SETUP, timeout=20)
    assert not err and "made" in out
    out, err = run(runner, "exec", command=SNAP + "chmod 000 $S/before; echo c1 > a.txt; echo one", timeout=20)
    assert not err and "one" in out and "not kept" not in out and (view.room.path / "a.txt").read_text() == "c1\n", out
    out, err = run(runner, "exec", command=SNAP + "rm -f $S/before; mkfifo $S/before; echo c2 > a.txt; rm d/1; "
                                                  "echo two", timeout=20)
    assert not err and "two" in out and "not kept" not in out, out
    assert (view.room.path / "a.txt").read_text() == "c2\n" and not (view.room.path / "d" / "1").exists()
    # The command's time is PACK_SECONDS: the least the pack gets whatever the command used of it, so the pack waits on
    # the FIFO no longer than with a shorter time, and the command has room to run on a loaded machine.
    in_at = room_in_at(monkeypatch)
    out, err = run(runner, "exec", command=SNAP + "mkfifo $S/same; echo c3 > a.txt; rm b.txt; echo three",
                   timeout=PACK_SECONDS)
    took = time.monotonic() - in_at[-1]
    assert "three" in out and "could not be handed back within the command's time" in out, out
    # The wrapper's own bound ended the pack (it said so above), before the host's (which counts from the room's way in)
    assert took < PACK_SECONDS + ROOM_GRACE_SECONDS
    files = room_files(view.room.path)
    assert files["a.txt"] == "c2\n" and files["b.txt"] == "b\n" and len([f for f in files if f.startswith("d/")]) == 49


def test_changes_made_at_once_or_through_a_shared_mapping_are_seen(tmp_path: Path) -> None:
    """The wrapper waits for the clock to pass the note's last time before the command starts: a write in the same
    tick would otherwise leave an entry's line as it was. A write through mmap changes no size and no mtime the
    command chose, only the status-change time the kernel sets."""
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command=SETUP, timeout=20)
    assert not err and "made" in out
    for i in range(3):
        out, err = run(runner, "exec", command=f"echo {i} > a.txt", timeout=20)
        assert not err and "a.txt" in out and (view.room.path / "a.txt").read_text() == f"{i}\n", out
    mapped = ("python3 -c \"import mmap, os; fd = os.open('m.bin', os.O_RDWR); m = mmap.mmap(fd, 4096); "
              "m[0:1] = b'Z'; m.flush(); m.close()\" && touch -r b.txt -m m.bin && echo mapped")
    out, err = run(runner, "exec", command=mapped, timeout=20)
    assert not err and "mapped" in out and "m.bin" in out, out
    assert (view.room.path / "m.bin").read_bytes() == b"Z" + b"a" * 4095
