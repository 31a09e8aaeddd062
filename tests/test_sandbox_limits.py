"""What one sandboxed command may take from the host, played through the real sandbox: the memory of all its
processes together, the inodes it leaves in its room, and the kernel keyring it shares with the uid.

CI runs as root (the command as a uid no account uses, os_sandbox.unused_uid);
`test_room_sandbox_as_an_unprivileged_user` in test_sandbox_attacks.py runs the keyring and memory probes with Hermit itself as an ordinary uid.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import pytest

from hermit.memory.policy.audience import Reader
from hermit.tools import ExecTool, FileTools, PathResolver, RoomSandbox, RoomView, ToolRunner
from hermit.tools.os_sandbox import SandboxLimits
from hermit.tools.room_sandbox import sandbox_uid
from hermit.tools.rooms import Room
from hermit.tools.views import AudienceMemoryView
from test_sandbox_attacks import need_sandbox, run


def room_runner(tmp_path: Path, audience: str = "telegram:group:7", *, quota_mb: int = 8,
                **limits: Any) -> tuple[ToolRunner, RoomView]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    view = RoomView(ws, Room(tmp_path / "rooms", audience, quota_mb << 20), AudienceMemoryView(ws, Reader(audience)))
    jail = RoomSandbox(need_sandbox(), view, SandboxLimits(tmp_mb=4, **limits), tmp_path / "scratch",
                       sandbox_uid(65534))
    paths = PathResolver(ws, True)
    return ToolRunner([*ExecTool(paths, sandbox=jail).tools(), *FileTools(paths, view=view).tools()]), view


@pytest.fixture(params=["machine", "no-cgroup"])
def bound(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each memory test runs with this machine's cgroup (when Hermit may make one) and with the fallback."""
    if request.param == "no-cgroup":
        monkeypatch.setattr("hermit.tools.room_sandbox.find_site", lambda: (None, "test"), raising=False)
    return str(request.param)


# Five processes of 150 MB each (pages written), alive together; then the resident memory of every process.
HOGS = ("for i in 1 2 3 4 5; do python3 -c \"import time; b = bytearray(b'A') * (150 << 20); time.sleep(6)\" "
        "2>/dev/null & done; sleep 4; awk '/VmRSS/{s+=$2} END{print \"rss_kb=\" s}' /proc/[0-9]*/status; wait")


def test_a_commands_processes_together_stay_within_its_memory(tmp_path: Path, bound: str) -> None:
    """RLIMIT_AS bounded each process, not the command: five processes under a 256 MB setting held 750 MB
    (128 x 1024 MB with the defaults). Now the command's total is bounded: by a cgroup of exec_memory_mb
    (plus its tmpfs copies), or without one by fewer tasks with a quarter of it each."""
    runner, _ = room_runner(tmp_path, memory_mb=256, max_processes=32)
    text, _ = run(runner, "exec", command=HOGS, timeout=30)
    rss_mb = int(text.split("rss_kb=")[-1].split()[0]) >> 10
    print(bound, "->", rss_mb, "MB resident;", text.splitlines()[-1])
    assert rss_mb < 256 + 64, text


def test_ordinary_commands_still_run_under_the_memory_bound(tmp_path: Path, bound: str) -> None:
    runner, _ = room_runner(tmp_path)  # the defaults: exec_memory_mb 1024, 128 tasks
    command = ("python3 -c 'print(6 * 7)'; printf 'b\\na\\nc\\n' | sort | head -n 1 | tr a-z A-Z; "
               "python3 -c 'import json, sqlite3, ssl, decimal; print(\"imports ok\")'; "
               "python3 -c 'from concurrent.futures import ThreadPoolExecutor as P; "
               "print(sum(P(8).map(abs, range(-50, 50))))'; "
               "if python3 -m pip --version >/dev/null 2>&1; then echo pip ok; else echo no pip; fi; tar --version | head -n 1")
    text, err = run(runner, "exec", command=command, timeout=60)
    assert not err and text.startswith("exit code 0"), text
    lines = text.splitlines()
    assert lines[1:5] == ["42", "A", "imports ok", "2500"] and lines[5] in ("pip ok", "no pip"), text


def test_empty_files_count_against_the_rooms_quota(tmp_path: Path) -> None:
    """The quota counted bytes: 3,000 empty files (host inodes) in a 1 MB room were all kept and the write
    tool still accepted more. Now every entry costs at least 4 KiB: the merge keeps what fits, says so, and
    loses nothing the room held."""
    runner, view = room_runner(tmp_path, quota_mb=1)
    assert run(runner, "write", path="keep.txt", content="the room's own file\n")[1] is False
    text, _ = run(runner, "exec", command="mkdir d && cd d && seq 1 3000 | xargs touch && ls | wc -l", timeout=60)
    entries = sum(len(d) + len(f) for _, d, f in os.walk(view.room.path))
    print("entries kept:", entries, "|", text.splitlines()[-1][:300])
    assert "3000" in text and entries <= (1 << 20) // 4096
    assert "not kept, this chat's room is full" in text
    assert (view.room.path / "keep.txt").read_text() == "the room's own file\n"
    reply, err = run(runner, "write", path="more.txt", content="x")
    assert err and "quota" in reply


KEYRING_NR = {"x86_64": (248, 250), "aarch64": (217, 219)}  # add_key, keyctl
DROP = r'''python3 - <<'PY'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
data = b"message from room A"
kid = libc.syscall({add_key}, b"user", b"room-a-drop", data, len(data), -4)  # KEY_SPEC_USER_KEYRING
print("add_key", kid, "errno", ctypes.get_errno())
try:
    print("proc-keys", [l.split()[-2] for l in open("/proc/keys")])
except OSError as e:
    print("proc-keys refused", e.errno)
PY'''
FIND = r'''python3 - <<'PY'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
kid = libc.syscall({keyctl}, 10, -4, b"user", b"room-a-drop", 0)  # KEYCTL_SEARCH the user keyring
buf = ctypes.create_string_buffer(64)
n = libc.syscall({keyctl}, 11, kid, buf, 64) if kid > 0 else -1  # KEYCTL_READ
print("search", kid, "errno", ctypes.get_errno(), "read", buf.raw[:max(n, 0)])
PY'''


def test_rooms_do_not_share_the_kernel_keyring(tmp_path: Path) -> None:
    """Every sandboxed command ran as the same uid with the same kernel keyring: room A left a key there that
    room B's later command found and read, and /proc/keys listed the host's keys. Now add_key, keyctl and
    request_key fail with EPERM (a seccomp filter) and /proc/keys is hidden."""
    nr = KEYRING_NR.get(platform.machine())
    if nr is None:
        pytest.skip(f"no keyring syscall numbers for {platform.machine()} in this test")
    a, _ = room_runner(tmp_path / "a", "telegram:group:1")
    b, _ = room_runner(tmp_path / "b", "telegram:group:2")
    dropped, _ = run(a, "exec", command=DROP.format(add_key=nr[0]), timeout=30)
    found, _ = run(b, "exec", command=FIND.format(keyctl=nr[1]), timeout=30)
    print("A:", dropped.splitlines()[1:], "B:", found.splitlines()[1:])
    assert "add_key -1 errno 1" in dropped and "proc-keys refused" in dropped, dropped
    assert "search -1 errno 1 read b''" in found, found


def _run_bpf(program: list[tuple[int, int, int, int]], arch: int, nr: int) -> int:
    """A classic-BPF interpreter for the few opcodes seccomp.assemble uses."""
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:
            acc = nr if k == 0 else arch
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += jt if hit else jf
        elif code == 0x06:
            return k
        pc += 1


def test_the_keyring_filter_for_each_architecture() -> None:
    """The filter is assembled by hand: checked instruction by instruction for both machines (the real
    sandbox test above runs it on this one)."""
    from hermit.tools.seccomp import FILTERS, RET_ALLOW, RET_EPERM, RET_KILL_PROCESS, assemble, filter_program

    for machine, table in FILTERS.items():
        program = assemble(table)
        for arch, ranges in table.items():
            refused = {nr for lo, hi in ranges for nr in range(lo, hi + 1)}
            for nr in range(0, 1200):
                assert _run_bpf(program, arch, nr) == (RET_EPERM if nr in refused else RET_ALLOW), (machine, nr)
            for nr in refused:
                assert _run_bpf(program, arch, nr) == RET_EPERM
        assert _run_bpf(program, 0x12345678, 39) == RET_KILL_PROCESS  # an architecture not listed
        assert filter_program(machine) is not None
    assert filter_program("riscv64") is None


def test_no_filter_no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the keyring cannot be kept out (no filter for the machine), the sandbox is not used at all."""
    from hermit.tools import os_sandbox

    monkeypatch.setattr(os_sandbox, "filter_program", lambda: None)
    backend = os_sandbox.detect.__wrapped__("linux", 65534)  # type: ignore[attr-defined]
    assert not backend.available and "seccomp" in backend.detail
