"""What a contact's command leaves running after it ends, played through the real sandbox with Hermit as this
process (root in CI: a cgroup holds the command) and, when the tests run as root, as uid 65534 without a cgroup
(an ordinary user without delegation, where nothing but the sandbox's own pid 1 holds the command together).

The command patches the memory of bubblewrap's pid 1 (through /proc/1/mem: same uid, same namespace) so that it
clears its parent-death signal and never exits, and the wrapper's so that it skips its `kill -KILL -1`; then it
leaves a process behind that keeps the output pipe open.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import python_as
from test_sandbox_attacks import need_sandbox

CASES = [(None, "machine"), (65534, "fallback")] if os.geteuid() == 0 else [(None, "machine"), (None, "fallback")]
LIMIT, GRACE = 3.0, 2.0  # the command's timeout, and the time Hermit gives the wrapper to pack the room
RETURNS_WITHIN = LIMIT + GRACE + 10  # the exec tool's promise: its timeout and grace, plus a small margin
HERMIT_WAIT = 60  # this test's own bound on Hermit's process: a hang fails here

# Hermit's side: one exec of the command in the file `command`; argv[2] "fallback": no cgroup.
AS_OWNER = r'''
import json, os, sys, time
from pathlib import Path
import hermit.tools.exec as exec_tool
import hermit.tools.room_sandbox as room_sandbox
from hermit.memory.policy.audience import Reader
from hermit.tools import ExecTool, PathResolver, RoomSandbox, RoomView
from hermit.tools.os_sandbox import SandboxLimits, detect
from hermit.tools.rooms import Room
from hermit.tools.views import AudienceMemoryView
base, bound, limit, grace = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
if bound == "fallback":
    room_sandbox.find_site = lambda: (None, "test")
exec_tool.ROOM_GRACE_SECONDS = grace
ws = base / "state" / "workspace"
(ws / "memory").mkdir(parents=True)
view = RoomView(ws, Room(base / "state" / "rooms", "telegram:dm:42", 8 << 20),
                AudienceMemoryView(ws, Reader("telegram:dm:42")))
tool = ExecTool(PathResolver(ws, True), env={"PATH": "/usr/bin:/bin"},
                sandbox=RoomSandbox(detect(), view, SandboxLimits(tmp_mb=4), base / "scratch",
                                    room_sandbox.sandbox_uid(65534)))
started = time.monotonic()
out = tool.exec((base / "command").read_text(), timeout=limit).text
print(json.dumps({"uid": os.getuid(), "elapsed": time.monotonic() - started, "out": out}))
'''

# pid 1 (bubblewrap's init, asleep in a syscall): code at its program counter that clears its parent-death signal
# (prctl(PR_SET_PDEATHSIG, 0)) and pauses forever; the wrapper (pid 2): its `kill -KILL -1` becomes an echo.
# Then a process that outlives the command and keeps the output pipe open.
PERSIST = r'''python3 - <<'PY'
import os, re
f = open('/proc/1/syscall').read().split(); pc = int(f[-1], 16)
code = bytes.fromhex('b89d000000' 'bf01000000' '31f6' '0f05' 'b822000000' '0f05' 'ebf7')
fd = os.open('/proc/1/mem', os.O_RDWR); os.pwrite(fd, code, pc); os.close(fd)
fd = os.open('/proc/2/mem', os.O_RDWR)
for line in open('/proc/2/maps'):
    rng = line.split()[0]; lo, hi = (int(x, 16) for x in rng.split('-'))
    if lo > 1 << 62: continue
    try: data = os.pread(fd, hi - lo, lo)
    except OSError: continue
    for m in re.finditer(re.escape(b'kill -KILL -1\n'), data): os.pwrite(fd, b'echo HIJACKED\n', lo + m.start())
print('patched')
PY
python3 -c 'import time; time.sleep(300)' MARKER &
echo left-behind'''


def _marked(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (the leftover, and bubblewrap's, whose holds the base path)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def _kill_marked(*markers: str) -> None:
    for marker in markers:
        for pid in _marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue


def leave_behind(uid: int | None, bound: str) -> tuple[dict[str, Any], list[int]]:
    """Run PERSIST in a contact's room by Hermit as `uid` (None: this process); (its result, the leftover's pids
    just after the exec returned). Whatever is left is killed afterwards."""
    need_sandbox()
    need(platform.machine() == "x86_64", "an x86_64 machine (the command patches pid 1 with x86_64 code)")
    base = Path(tempfile.mkdtemp(prefix="hermit-leftover-", dir="/tmp"))
    marker = f"hermit-leftover-{secrets.token_hex(6)}"
    as_user: dict[str, Any] = {}
    (base / "command").write_text(PERSIST.replace("MARKER", marker))
    if uid is not None:
        as_user = {"user": uid, "group": uid, "extra_groups": []}
        for p in (base, base / "command"):
            os.chown(p, uid, uid)
    os.chmod(base, 0o700)
    try:
        python = python_as(as_user) if uid is not None else sys.executable
        need(python is not None, f"a Python that can import this checkout as uid {uid}")
        assert python is not None
        try:
            done = subprocess.run([python, "-c", AS_OWNER, str(base), bound, str(LIMIT), str(GRACE)],
                                  capture_output=True, text=True, timeout=HERMIT_WAIT, cwd="/",
                                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}, **as_user)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the exec tool did not return within {HERMIT_WAIT}s (its timeout was {LIMIT:g}s)")
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["uid"] == (uid if uid is not None else os.getuid())
        print(f"\nHermit as uid {out['uid']} ({bound}), {out['elapsed']:.1f}s:\n{out['out']}")
        deadline = time.monotonic() + 2  # the kernel ends a pid namespace's processes right after its init
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        return out, _marked(marker)
    finally:
        _kill_marked(marker, str(base))
        subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.mark.parametrize(("uid", "bound"), CASES)
def test_the_exec_tool_returns_when_a_leftover_holds_its_output(uid: int | None, bound: str) -> None:
    """The exec call never returned: a process the command left (kept alive by a patched pid 1) held the output
    pipe, and closing Hermit's buffered reader waited for the read that held its lock. Now the reader polls the
    raw descriptor and is stopped, and the call returns by its timeout plus the room's grace and a margin."""
    out, _ = leave_behind(uid, bound)
    assert out["elapsed"] < RETURNS_WITHIN, out
    assert "left-behind" in out["out"], out


@pytest.mark.parametrize(("uid", "bound"), CASES)
def test_nothing_the_command_left_survives_it(uid: int | None, bound: str) -> None:
    """Without a cgroup nothing killed what the command left: Hermit killed bubblewrap's outer process only, and
    the sandbox's pid 1, its parent-death signal cleared, kept the leftover (and its namespace) alive. Now Hermit
    kills that pid 1 (its pid from bubblewrap's --info-fd, held by a pidfd) whenever the command ends, and the
    kernel ends every process of the namespace with it."""
    out, left = leave_behind(uid, bound)
    assert left == [], out
    assert out["elapsed"] < RETURNS_WITHIN, out
