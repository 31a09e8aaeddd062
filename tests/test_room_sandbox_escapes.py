"""Audit J, through the real sandbox (bubblewrap): a folder nested 200 deep no longer crashes the merge with a
host traceback; links that leave the room through the room's other links are removed after a merge; the
command can no longer ptrace, read or write another process's memory, or copy a descriptor out of the wrapper
shell that holds the way back."""

from __future__ import annotations

import errno
import os
import platform
from pathlib import Path

import pytest

import hermit.tools.room_sandbox as room_sandbox
from ciguard import need
from hermit.tools.room_sandbox import MAX_DEPTH
from hermit.tools.rooms import links_leaving
from test_sandbox_attacks import room_tools, run

DEEP = ("d=.; for i in $(seq 200); do d=$d/" + "a" * 46 + "; done; mkdir -p $d && echo deep-made; "
        "echo kept > kept.txt; mkdir -p ok/sub && echo fine > ok/sub/f.txt")


def test_a_folder_nested_200_deep_is_left_out_with_a_note_not_a_traceback(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    out, err = run(runner, "exec", command=DEEP, timeout=60)
    print(out[-600:])
    assert "deep-made" in out and "Traceback" not in out and str(tmp_path) not in out
    assert "not kept, nested too deep" in out
    room = view.room.path
    assert (room / "kept.txt").read_text() == "kept\n" and (room / "ok" / "sub" / "f.txt").read_text() == "fine\n"
    depth = 0
    p = room
    while (p / ("a" * 46)).is_dir():
        p, depth = p / ("a" * 46), depth + 1
    assert 0 < depth <= MAX_DEPTH  # what fits is kept; nothing deeper
    # The room still works: the next command sees it and the file tools read it.
    out, err = run(runner, "exec", command="cat kept.txt; ls ok/sub")
    assert not err and "kept" in out and "f.txt" in out
    assert run(runner, "read", path="kept.txt")[0].strip().endswith("kept")


def test_a_merge_that_fails_gives_a_note_without_host_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, view = room_tools(tmp_path)
    run(runner, "exec", command="echo before > a.txt")
    secret_path = str(view.room.path / ("x" * 300))

    def failing(room_fd: int, extracted: Path, *a: object, **k: object) -> object:
        raise OSError(errno.ENAMETOOLONG, "File name too long", secret_path)

    monkeypatch.setattr(room_sandbox, "apply_incoming", failing)
    out, _ = run(runner, "exec", command="echo after > a.txt; echo new > b.txt")
    print(out)
    assert "Traceback" not in out and str(tmp_path) not in out
    assert "files were not kept" in out and "File name too long" in out
    assert (view.room.path / "a.txt").read_text() == "before\n" and not (view.room.path / "b.txt").exists()


LINKS = ("ln -s . b; ln -s b/.. esc; ln -s b/b/b/.. esc2; mkdir -p node_modules/x/bin node_modules/.bin a/b/c; "
         "echo js > node_modules/x/bin/cli.js; ln -s ../x/bin/cli.js node_modules/.bin/x; "
         "ln -s a/b/c d; ln -s d/.. top; ln -s d/../../../x up; ln -s loop loop; echo done")


def test_links_that_leave_the_room_through_other_links_are_removed(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    other = view.room.base / "telegram_dm_777-other"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("other room secret")
    out, _ = run(runner, "exec", command=LINKS)
    print(out)
    room = view.room.path
    assert "links removed" in out and "esc" in out
    for gone in ("esc", "esc2", "up", "loop"):
        assert not os.path.lexists(room / gone), gone
    assert not (room / "esc" / "telegram_dm_777-other" / "secret.txt").exists()
    # Ordinary links stay and work on the host.
    assert os.readlink(room / "b") == "." and os.readlink(room / "d") == "a/b/c"
    assert (room / "node_modules" / ".bin" / "x").read_text() == "js\n"
    assert os.path.realpath(room / "top") == os.path.realpath(room / "a" / "b")
    # A later command building on a link the room already holds is checked as well.
    out, _ = run(runner, "exec", command="ln -s b/.. later; echo ok")
    assert "links removed: later" in out and not os.path.lexists(room / "later")
    for link in room.rglob("*"):
        if link.is_symlink():
            assert os.path.realpath(link).startswith(os.path.realpath(room)), link


def test_links_leaving_follows_chains() -> None:
    links = {"b": ".", "esc": "b/..", "node_modules/.bin/x": "../x/bin/cli.js", "d": "a/b/c", "top": "d/../../..",
             "up": "d/../../../..", "p": "q", "q": "p", "abs": "/etc", "deep/l": "../../x"}
    assert links_leaving(links) == ["abs", "deep/l", "esc", "p", "q", "up"]
    # b removed would leave `x -> b/..` pointing out; checked again without the removed ones, until none leaves
    assert links_leaving({"b": "c/../..", "x": "b/.."}) == ["b", "x"]


PROBE = r'''python3 - <<'X'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def ppid(p): return int(open(f"/proc/{p}/stat").read().rsplit(")",1)[1].split()[1])
chain = [os.getpid()]
while chain[-1] > 1: chain.append(ppid(chain[-1]))
def holds_socket(p):
    out = []
    for n in os.listdir(f"/proc/{p}/fd"):
        try: out.append(os.readlink(f"/proc/{p}/fd/{n}"))
        except OSError: pass
    return any(v.startswith("socket:") for v in out)
wrap = next(p for p in chain[1:] if holds_socket(p) and p != 1)
r = libc.ptrace(16, wrap, 0, 0); print("PTRACE_ATTACH", r, ctypes.get_errno())
pidfd = libc.syscall(434, wrap, 0)
print("pidfd_getfd", libc.syscall(438, pidfd, 11, 0), ctypes.get_errno())
class iov(ctypes.Structure): _fields_ = [("b", ctypes.c_void_p), ("n", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8); l = iov(ctypes.addressof(buf), 8); rm = iov(0x400000, 8)
print("process_vm_readv", libc.process_vm_readv(wrap, ctypes.byref(l), 1, ctypes.byref(rm), 1, 0), ctypes.get_errno())
print("process_vm_writev", libc.process_vm_writev(wrap, ctypes.byref(l), 1, ctypes.byref(rm), 1, 0), ctypes.get_errno())
X
'''


def test_the_command_cannot_reach_into_the_wrapper(tmp_path: Path) -> None:
    need(platform.machine() in ("x86_64", "aarch64"), "an x86_64 or aarch64 machine (the probe's syscall numbers)")
    runner, _ = room_tools(tmp_path)
    out, _ = run(runner, "exec", command=PROBE, timeout=30)
    print(out)
    for call in ("PTRACE_ATTACH", "pidfd_getfd", "process_vm_readv", "process_vm_writev"):
        assert f"{call} -1 1" in out, call  # EPERM from the seccomp filter


def test_common_tools_still_work_in_a_room(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path)
    cmd = ("python3 -c 'import subprocess,sys; print(subprocess.run([sys.executable, \"-c\", \"print(6*7)\"], "
           "capture_output=True, text=True).stdout.strip())'; seq 1 100 | sort -rn | head -1 | tr 0 o; "
           "mkdir -p t && echo x > t/f && tar -cf t.tar t && tar -tf t.tar | wc -l; "
           "if command -v git >/dev/null; then git init -q r && cd r && echo a > a && git add a && "
           "git -c user.name=n -c user.email=e@x commit -qm m && git log --oneline | wc -l; else echo 1; fi")
    out, err = run(runner, "exec", command=cmd, timeout=60)
    print(out)
    lines = out.splitlines()
    assert not err and "42" in lines and "1oo" in lines and lines.count("2") >= 1 and "1" in lines


def test_the_rooms_copies_of_notes_and_instructions_say_nothing_of_when_they_were_written(tmp_path: Path) -> None:
    """The copies of memory files and instruction files in the sandbox carried a time: a fixed one now, so a
    chat cannot watch for when the owner writes (audit Q)."""
    runner, _ = room_tools(tmp_path)
    ws = tmp_path / "ws"
    (ws / "AGENTS.md").write_text("# Agents\n- be brief\n", encoding="utf-8")
    (ws / "memory" / "2026-01-20.md").write_text("# 2026-01-20\n- lunch at noon\n", encoding="utf-8")
    out, err = run(runner, "exec", command="stat -c '%Y %n' AGENTS.md memory/2026-01-20.md", timeout=30)
    assert not err and out.splitlines()[-2:] == ["0 AGENTS.md", "0 memory/2026-01-20.md"], out
