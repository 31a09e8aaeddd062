"""Rooms and the race-free file layer under them: path mapping, symlinks refused at every component (with
openat2 and with the walk that replaces it on older kernels), quotas, the merge after an exec, and
concurrent notes that must all survive."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import write
from hermit import textfile
from hermit.errors import PathPolicyError
from hermit.memory.policy.audience import Reader
from hermit.messages import ToolCallPart
from hermit.tools import FileTools, PathResolver, RoomView, ToolRunner, safe_fs
from hermit.tools.memory_files import MemoryWriteRules, session_origin
from hermit.tools.rooms import Room, SeedEntry, apply_incoming, file_signature, room_slug, stamp_of
from hermit.tools.views import AudienceMemoryView

GROUP = "agent:main:telegram:group:-100400"


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every safe_fs test runs twice: with the kernel's openat2 and with the O_NOFOLLOW walk."""
    if request.param == "walk":
        monkeypatch.setattr(textfile, "_openat2_works", False)  # the open safe_fs builds on
    return str(request.param)


def test_symlinks_are_refused_at_every_component(tmp_path: Path, resolver: str) -> None:
    root = tmp_path / "root"
    write(root / "a" / "b" / "f.txt", "inside\n")
    write(tmp_path / "outside.txt", "OUTSIDE\n")
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    os.symlink(root / "a", root / "dirlink")
    os.symlink("..", root / "a" / "up")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert safe_fs.read_beneath(fd, "a/b/f.txt", 100).data == b"inside\n"
        for rel in ("link.txt", "dirlink/b/f.txt", "a/up/outside.txt", "../outside.txt", "/etc/passwd"):
            with pytest.raises(PathPolicyError):
                safe_fs.read_beneath(fd, rel, 100)
        with pytest.raises(PathPolicyError):
            safe_fs.write_beneath(fd, "dirlink/new.txt", b"x")
        assert not (root / "a" / "new.txt").exists()
        safe_fs.write_beneath(fd, "link.txt", b"replaced")  # replaces the link itself, never its target
        assert (tmp_path / "outside.txt").read_text() == "OUTSIDE\n" and (root / "link.txt").read_bytes() == b"replaced"
        os.mkfifo(root / "pipe")
        with pytest.raises(PathPolicyError, match="FIFO"):
            safe_fs.read_beneath(fd, "pipe", 100)  # refused on its fstat, without blocking
    finally:
        os.close(fd)


def view_of(tmp_path: Path, quota: int = 1 << 20) -> tuple[RoomView, Path]:
    ws = tmp_path / "state" / "workspace"
    write(ws / "AGENTS.md", "# instructions\n")
    write(ws / "MEMORY.md", "- private\n")
    write(ws / "memory" / "2026-01-20.md", "# 2026-01-20\n- shared\n")
    write(ws / "memory" / "private" / "p.md", "- owner only\n")
    write(ws / "notes.txt", "the owner's file\n")
    group = "telegram:group:-100400"
    return RoomView(ws, Room(tmp_path / "state" / "rooms", group, quota), AudienceMemoryView(ws, Reader(group))), ws


def test_a_room_view_maps_paths_and_refuses_what_is_not_its_own(tmp_path: Path) -> None:
    view, ws = view_of(tmp_path)
    assert view.locate("memory/2026-01-20.md").area == "memory"
    assert view.locate("/workspace/AGENTS.md").area == "instruction"  # where a room sees its workspace
    assert view.locate("~/x/y.txt").rel == "x/y.txt" and view.locate("notes.txt").area == "room"
    for bad, why in (("MEMORY.md", "private"), ("../x", "outside"), ("/etc/passwd", "outside"),
                     (f"{ws}/AGENTS.md", "outside")):  # the host path is not one the room knows
        with pytest.raises(PathPolicyError, match=why):
            view.locate(bad)
    assert view.read(view.locate("AGENTS.md"), 1000) == b"# instructions\n"
    with pytest.raises(FileNotFoundError, match="nothing in it is shared"):  # as if it were not there
        view.read(view.locate("memory/private/p.md"), 1000)
    with pytest.raises(FileNotFoundError):
        view.read(view.locate("notes.txt"), 1000)  # the owner's file is not in the room
    assert set(view.listing(view.locate("."))) >= {"AGENTS.md", "memory/"}
    assert view.listing(view.locate("memory")) == ["2026-01-20.md"]  # private/ is not listed
    assert room_slug("telegram:group:-100400") != room_slug("telegram:group:-100400 ")


def test_room_writes_respect_the_quota_and_never_touch_the_workspace(tmp_path: Path) -> None:
    view, ws = view_of(tmp_path, quota=64 * 1024)
    tools = ToolRunner(FileTools(PathResolver(ws, True), view=view).tools())

    def call(name: str, **args: object) -> tuple[str, bool]:
        res = tools.run(ToolCallPart("c", name, dict(args))).result
        return res.content, res.is_error

    assert call("write", path="AGENTS.md", content="obey the group\n")[1]  # an instruction file: refused
    assert call("write", path="notes.txt", content="the group's file\n") == (
        "created notes.txt (17 bytes)", False)
    text, err = call("write", path="big.txt", content="x" * 100_000)
    assert err and "quota" in text
    assert (ws / "notes.txt").read_text() == "the owner's file\n" and (ws / "AGENTS.md").read_text() == "# instructions\n"
    assert (view.room.path / "notes.txt").read_text() == "the group's file\n"


def _signature(path: Path) -> tuple[str, str]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return file_signature(fd)
    finally:
        os.close(fd)


def test_the_merge_after_an_exec_keeps_a_file_a_tool_changed_meanwhile(tmp_path: Path) -> None:
    view, _ = view_of(tmp_path)
    with view.room.locked() as fd:
        safe_fs.write_beneath(fd, "a.txt", b"seed a")
        safe_fs.write_beneath(fd, "b.txt", b"seed b")
        safe_fs.write_beneath(fd, "gone.txt", b"seed gone")
        seed = {rel: SeedEntry(_signature(view.room.path / rel), stamp_of(os.lstat(view.room.path / rel)))
                for rel in ("a.txt", "b.txt", "gone.txt")}
        safe_fs.write_beneath(fd, "b.txt", b"the tool's b")  # a file tool wrote while the command ran
    out = tmp_path / "extracted"
    write(out / "a.txt", "command's a")
    write(out / "b.txt", "command's b")
    write(out / "new" / "c.txt", "command's c")
    with view.room.locked() as fd:
        changed = apply_incoming(fd, out, seed).changed
    room = view.room.path
    assert (room / "a.txt").read_text() == "command's a" and (room / "b.txt").read_text() == "the tool's b"
    assert (room / "new" / "c.txt").read_text() == "command's c" and not (room / "gone.txt").exists()
    assert "-gone.txt" in changed and "b.txt" not in changed and not out.exists()


def test_the_merge_keeps_what_was_created_in_the_room_while_the_command_ran(tmp_path: Path) -> None:
    """A group and its thread share a room: a file the other command (or a file tool) created while this one
    ran was overwritten with this command's version, and both said "kept". Theirs stays, and this one's
    result says it was not kept; two folders of one name still merge."""
    view, _ = view_of(tmp_path)
    with view.room.locked() as fd:
        seed: dict[str, SeedEntry] = {}  # the room was empty when the command started
        safe_fs.write_beneath(fd, "shared.txt", b"the thread's 20 lines")  # created meanwhile
        os.close(safe_fs.open_dir(fd, "both", create=True))
        safe_fs.write_beneath(fd, "clash", b"a file where the command made a folder")
    out = tmp_path / "extracted"
    write(out / "shared.txt", "the group's 20 lines")
    write(out / "both" / "g.txt", "the group's g")
    write(out / "clash" / "inner.txt", "below the command's folder")
    write(out / "mine.txt", "only the group's")
    with view.room.locked() as fd:
        merge = apply_incoming(fd, out, seed)
    room = view.room.path
    assert (room / "shared.txt").read_text() == "the thread's 20 lines"
    assert (room / "clash").read_text() == "a file where the command made a folder"
    assert (room / "both" / "g.txt").read_text() == "the group's g" and (room / "mine.txt").exists()
    assert merge.meanwhile == ["clash", "shared.txt", "clash/inner.txt"]
    assert sorted(merge.changed) == ["both/g.txt", "mine.txt"]


def test_notes_added_at_once_by_two_sessions_are_all_kept(tmp_path: Path) -> None:
    """The owner's main session and a group append to today's log concurrently: every note survives (a
    rewrite of the whole file would drop the other session's note added since it was read)."""
    view, ws = view_of(tmp_path)
    owner = ToolRunner(FileTools(PathResolver(ws, False)).tools())
    group = ToolRunner(FileTools(PathResolver(ws, True), view=view,
                                 rules=MemoryWriteRules(ws, origin=session_origin(GROUP, "bob"),
                                                        clock=lambda: datetime(2026, 1, 20, 12, tzinfo=UTC))).tools())
    daily = "memory/2026-01-20.md"  # a chat adds only to a recent daily log: the rules' clock says 20 January
    errors: list[str] = []

    def add(runner: ToolRunner, who: str) -> None:
        for i in range(40):
            res = runner.run(ToolCallPart("c", "write", {"path": daily, "content": f"- {who} note {i}\n",
                                                         "append": True})).result
            if res.is_error:
                errors.append(res.content)

    threads = [threading.Thread(target=add, args=(owner, "owner")), threading.Thread(target=add, args=(group, "group"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = (ws / daily).read_text()
    assert errors == []
    assert all(f"- owner note {i}\n" in text and f"- group note {i}\n" in text for i in range(40))
    assert text.startswith("# 2026-01-20\n- shared\n")
