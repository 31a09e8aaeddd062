"""What a contact's command may take of the kernel's per-user quotas. Hermit as an ordinary user runs the sandbox
as its own uid (in a user namespace), so whatever the kernel counts per user is shared with every program of
the owner; as root the sandbox's uid is shared by the rooms. Each test runs Hermit both ways through the real
sandbox: as this process (root in CI: the command as a uid no account uses) and, when the tests run as root, as
uid 65534 (the command as 65534 too).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import PROC_TIMEOUT, python_as
from test_sandbox_attacks import need_sandbox

UIDS = [None, 65534] if os.geteuid() == 0 else [None]

# Hermit's side: a room, one exec of the command in the file `command` (never an argument: test_sandbox_exposure
# looks for its text in every command line). argv[2] threads of the owner's uid (a browser, an IDE) run until the
# command has started, then end; argv[3] "fallback": no cgroup, as for an ordinary user without delegation.
AS_OWNER = r'''
import json, os, sys, threading
from pathlib import Path
import hermit.tools.room_sandbox as room_sandbox
from hermit.memory.policy.audience import Reader
from hermit.tools import ExecTool, PathResolver, RoomSandbox, RoomView
from hermit.tools.os_sandbox import SandboxLimits, detect
from hermit.tools.rooms import Room
from hermit.tools.views import AudienceMemoryView
base, threads, bound = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
command = (base / "command").read_text()
if bound == "fallback":
    room_sandbox.find_site = lambda: (None, "test")
ws = base / "state" / "workspace"
(ws / "memory").mkdir(parents=True)
view = RoomView(ws, Room(base / "state" / "rooms", "telegram:dm:42", 8 << 20),
                AudienceMemoryView(ws, Reader("telegram:dm:42")))
stop = threading.Event()
busy = [threading.Thread(target=stop.wait) for _ in range(threads)]
for t in busy:
    t.start()
started = room_sandbox.RoomRun.started
def started_then_quiet(self, proc):
    started(self, proc)
    stop.set()
room_sandbox.RoomRun.started = started_then_quiet
tool = ExecTool(PathResolver(ws, True), env={"PATH": "/usr/bin:/bin"},
                sandbox=RoomSandbox(detect(), view, SandboxLimits(tmp_mb=4), base / "scratch",
                                    room_sandbox.sandbox_uid(65534)))
out = tool.exec(command, timeout=60).text
stop.set()
print(json.dumps({"uid": os.getuid(), "out": out}))
'''


def as_owner(tmp_path: Path, uid: int | None, command: str, threads: int = 0, bound: str = "machine") -> str:
    """The tool result of `command` run in a contact's room by Hermit as `uid` (None: this process's uid)."""
    need_sandbox()
    base = Path(tempfile.mkdtemp(prefix="hermit-quota-", dir="/tmp" if uid is not None else tmp_path))
    as_user: dict[str, Any] = {}
    if uid is not None:
        os.chmod(base, 0o700)
        os.chown(base, uid, uid)
        as_user = {"user": uid, "group": uid, "extra_groups": []}
    (base / "command").write_text(command)
    if uid is not None:
        os.chown(base / "command", uid, uid)
    try:
        python = python_as(as_user) if uid is not None else sys.executable
        need(python is not None, f"a Python that can import this checkout as uid {uid}")
        assert python is not None
        done = subprocess.run([python, "-c", AS_OWNER, str(base), str(threads), bound], capture_output=True,
                              text=True, timeout=PROC_TIMEOUT, cwd="/",
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}, **as_user)
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["uid"] == (uid if uid is not None else os.getuid())
        print(f"\nHermit as uid {out['uid']}:\n{out['out']}")
        return str(out["out"])
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


# 200 inotify instances (the per-user default is 128), then one of each other kind, with the errno of each.
INOTIFY = r'''python3 - <<'PY'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fds = [libc.inotify_init() for _ in range(200)]
print("inotify_init held", sum(f >= 0 for f in fds), "errno", ctypes.get_errno())
print("inotify_init1", libc.inotify_init1(0), "errno", ctypes.get_errno())
print("fanotify_init", libc.fanotify_init(0x200, 0), "errno", ctypes.get_errno())  # FAN_REPORT_FID: unprivileged
PY
grep -E 'pending signals|msgqueue' /proc/self/limits'''


@pytest.mark.parametrize("uid", UIDS)
def test_a_command_cannot_take_the_owners_inotify_instances(tmp_path: Path, uid: int | None) -> None:
    """A contact's command opened 127 inotify instances; the kernel counts them per user (through the user
    namespace), so every program of the owner got EMFILE from inotify_init until it ended (editors, file
    managers, `tail -f`). Now inotify_init, inotify_init1 and fanotify_init fail with EPERM in a room, and the
    real-time signals and POSIX message queues it may hold (also counted per user) are kept small."""
    text = as_owner(tmp_path, uid, INOTIFY)
    assert "inotify_init held 0 errno 1" in text, text
    assert "inotify_init1 -1 errno 1" in text and "fanotify_init -1 errno 1" in text, text
    limits = {line.split()[1]: line.split()[3:5] for line in text.splitlines()
              if line.startswith(("Max pending", "Max msgqueue"))}
    assert limits == {"pending": ["64", "64"], "msgqueue": ["0", "0"]}, text


# inotify_init, inotify_init1, fanotify_init per audit arch, from the kernel's syscall tables (aarch64 has no
# inotify_init; x32 calls the x86_64 numbers with bit 30 set).
WATCHERS = {"x86_64": {0xC000003E: (253, 294, 300, 0x40000000 | 253, 0x40000000 | 294, 0x40000000 | 300),
                       0x40000003: (291, 332, 338)},
            "aarch64": {0xC00000B7: (26, 262), 0x40000028: (316, 360, 367)}}


def test_the_filter_refuses_inotify_and_fanotify_on_every_architecture() -> None:
    """The numbers differ by architecture; the filter is checked instruction by instruction on each."""
    from hermit.tools.seccomp import FILTERS, RET_ALLOW, RET_EPERM, assemble
    from test_sandbox_limits import _run_bpf

    for machine, arches in WATCHERS.items():
        program = assemble(FILTERS[machine])
        for arch, numbers in arches.items():
            assert all(_run_bpf(program, arch, nr) == RET_EPERM for nr in numbers), (machine, hex(arch))
            assert _run_bpf(program, arch, 0 if arch != 0x40000003 else 3) == RET_ALLOW  # read / i386 read


# After the owner's busy program has ended (2 s), fork up to 40 children that stay; then how many it got and how
# many processes the sandbox's pid namespace holds (bubblewrap's own init and the wrapper included).
FORKS = r'''sleep 2; python3 - <<'PY'
import os, time
forked = 0
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    forked += 1
print("forked", forked, "processes", len([p for p in os.listdir("/proc") if p.isdigit()]))
PY
grep 'Max processes' /proc/self/limits'''


@pytest.mark.parametrize("uid", UIDS)
def test_a_commands_tasks_stay_bounded_when_the_owners_programs_end(tmp_path: Path, uid: int | None) -> None:
    """Without a cgroup the task limit was the uid's task count when the command started plus 16, counted over
    every task of the uid: when the owner's programs ended 300 threads after the start (a browser closing), the
    contact's command took the freed slots — 40 processes of 256 MB each where the doctor promised 16. Linux 5.14
    and later count RLIMIT_NPROC per user namespace, so the wrapper sets it inside the sandbox's own: 15 tasks
    there whatever the owner does (bubblewrap's outer process, outside, is the 16th)."""
    from hermit.tools.exec_cgroup import FALLBACK_TASKS

    release = re.match(r"(\d+)\.(\d+)", os.uname().release)
    if release is None or (int(release[1]), int(release[2])) < (5, 14):
        return  # what the doctor says then instead: test_the_doctor_states_the_task_bound
    text = as_owner(tmp_path, uid, FORKS, threads=300, bound="fallback")
    forked = int(text.split("forked ")[1].split()[0])
    processes = int(text.split("processes ")[1].split()[0])
    assert processes <= FALLBACK_TASKS - 1 and 5 <= forked < FALLBACK_TASKS - 1, text
    assert "Max processes             15                   15" in text, text


def test_the_doctor_states_the_task_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `hermit doctor` promises without a cgroup is what the kernel keeps: 16 tasks where it counts them per
    namespace, and where it does not (before Linux 5.14) a bound relative to the uid's other tasks."""
    from hermit.cli import sandbox_check
    from hermit.tools import exec_cgroup

    by_release = exec_cgroup.nproc_per_namespace.__wrapped__  # type: ignore[attr-defined]
    assert by_release("5.14.0-427.el9") is True and by_release("6.18.44-fc") is True
    assert by_release("5.10.0-28-amd64") is False and by_release("4.18.0-553.el8") is False
    monkeypatch.setattr(exec_cgroup, "find_site", lambda: (None, "no delegation"))
    monkeypatch.setattr(exec_cgroup, "nproc_per_namespace", lambda: True)
    assert sandbox_check.memory_bound(1024, 128).endswith(
        "at most 16 tasks of 256 MB address space each, 4096 MB together plus its tmpfs copies")
    monkeypatch.setattr(exec_cgroup, "nproc_per_namespace", lambda: False)
    older = sandbox_check.memory_bound(1024, 128)
    assert "counts tasks per uid, not per sandbox" in older and "4096 MB" not in older, older
