"""Re-audit 19 (t10) of the room's merge: a pack crafted by hand (not by the wrapper's GNU tar) lands nothing outside the
room and never stops the merge half-way.

The wrapper's tar is made from a real folder, so it holds no impossible names; the unpack trusts it no more for that.
Here the real unpack and merge (room_unpack.unpack with `seen`, room_merge.apply_incoming) get names with `..`, a leading
`/`, a newline, a NUL (a PAX path may hold one), entries below a link or a file of the same pack, links out of the room
alone or through another, a hard link to /etc/passwd, a device, a FIFO — and a list of "unchanged" names the room never
had. A NUL name reached the merge and raised ValueError as it moved files in: half the pack was in the room, and the
error (not an OSError) left the exec tool with an exception instead of a note."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from hermit.tools.room_merge import apply_incoming
from hermit.tools.room_unpack import Seen, add_unchanged, new_staging, unpack
from hermit.tools.rooms import Room, SeedEntry


def _add(tar: tarfile.TarFile, name: str, kind: str = "f", link: str = "", pax: dict[str, str] | None = None) -> None:
    info = tarfile.TarInfo(name)
    if pax:
        info.pax_headers = pax
    if kind == "f":
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
        return
    info.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE, "c": tarfile.CHRTYPE,
                 "p": tarfile.FIFOTYPE}[kind]
    info.linkname = link
    tar.addfile(info)


def _crafted() -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("../up", "/abs", "a\nb", "ok", "s/../../t", "./../v"):
            _add(tar, name)
        _add(tar, "nul", pax={"path": "x\x00y"})
        _add(tar, "d", "l", link=".")
        _add(tar, "d/x")
        _add(tar, "f")
        _add(tar, "f/x")
        _add(tar, "up", "l", link="..")
        _add(tar, "b", "l", link=".")
        _add(tar, "esc", "l", link="b/..")
        _add(tar, "g", "l", link="/etc")
        _add(tar, "h", "h", link="/etc/passwd")
        _add(tar, "c", "c")
        _add(tar, "p", "p")
    data.seek(0)
    return data


def _tree(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*")}


def test_a_crafted_pack_lands_nothing_outside_and_is_merged_whole(tmp_path: Path) -> None:
    room = Room(tmp_path / "rooms", "telegram:group:9", 8 << 20)
    with room.locked():
        pass
    (tmp_path / "canary").write_text("the owner's\n")
    outside = _tree(tmp_path) - {str(p.relative_to(tmp_path)) for p in room.path.rglob("*")}
    staging, fd = new_staging(room.base)
    seen: dict[str, Seen] = {}
    try:
        with tarfile.open(fileobj=_crafted(), mode="r:") as tar:
            over = unpack(tar, fd, room.max_entries, keep={}, seen=seen, deadline=time.monotonic() + 30)
        add_unchanged(b"\0".join([b"./../../etc/passwd", b"/etc/shadow", b"../canary", b"ok2", b"", b"x\nz"]),
                      {}, seen)
        with room.locked() as room_fd:
            merge = apply_incoming(room_fd, staging, {}, room.quota_bytes, seen, time.monotonic() + 30)
    finally:
        os.close(fd)
    assert not over and "x\x00y" not in seen
    assert sorted(merge.changed) == ["a\nb", "b", "d", "f", "ok"]
    assert sorted(merge.skipped) == ["d/x", "f/x"] and merge.refused == ["esc"]
    assert _tree(room.path) == {"a\nb", "b", "d", "f", "ok"}
    assert os.readlink(room.path / "d") == "." and os.readlink(room.path / "b") == "."
    assert (tmp_path / "canary").read_text() == "the owner's\n"
    assert _tree(tmp_path) - {str(p.relative_to(tmp_path)) for p in room.path.rglob("*")} == outside
    assert not staging.exists()


def test_unchanged_names_keep_only_what_the_room_had(tmp_path: Path) -> None:
    """The pack's list of unchanged names is the command's to write: a name the seed does not hold means nothing, and
    one it holds keeps the room's own version — never content from anywhere else."""
    room = Room(tmp_path / "rooms", "telegram:group:9", 8 << 20)
    with room.locked() as fd:
        os.mkdir("d", 0o700, dir_fd=fd)
        (room.path / "d" / "k").write_text("room's\n")
        st = os.lstat(room.path / "d" / "k")
        dst = os.lstat(room.path / "d")
    seed = {"d": SeedEntry(("d", ""), (dst.st_ino, dst.st_size, dst.st_mtime_ns)),
            "d/k": SeedEntry(("f", "0" * 64), (st.st_ino, st.st_size, st.st_mtime_ns))}
    seen: dict[str, Seen] = {}
    add_unchanged(b"\0".join([b"./d", b"./d/k", b"./d/../../../etc/passwd", b"d/k/../../../x", b"/d/k"]), seed, seen)
    assert sorted(seen) == ["d", "d/k"]
    staging, sfd = new_staging(room.base)
    try:
        with room.locked() as room_fd:
            merge = apply_incoming(room_fd, staging, seed, room.quota_bytes, seen, time.monotonic() + 30)
    finally:
        os.close(sfd)
    assert not merge.changed and (room.path / "d" / "k").read_text() == "room's\n"
    assert _tree(room.path) == {"d", "d/k"}
