"""The limits a room's command runs under, set in the child before bubblewrap starts (room_sandbox.py).

Everything inside the sandbox inherits them: CPU seconds, the size of any one file, address space per process,
the tasks (where the wrapper does not set that inside the sandbox's namespace), no core files, and the
per-user kernel counts kept small — queued signals, POSIX message queues, descriptors in flight on unix
sockets (bounded by RLIMIT_NOFILE) — so that a command of the owner's uid
(Hermit as an ordinary user) or of the rooms' shared uid (Hermit as root) cannot take them from the others.
Also how long a room's way in and its merge back may take (`quota_seconds`).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable

from hermit.tools.exec_cgroup import CommandCgroup, join
from hermit.tools.os_sandbox import SandboxLimits

# How long a room may take to go in, and to be merged back after its command, at rates far below what this machine
# does (a 256 MB room at its quota, 65,000 entries, went in in 5.5-8.5 s at load 3-6; 228 MB in 8 MB files in 1 s):
# ROOM_START_SECONDS, plus what its quota may hold at ROOM_IN_BYTES_PER_SECOND and ROOM_IN_ENTRIES_PER_SECOND. The
# way in (tools/exec.py) is counted before the command starts, the merge (room_merge.py) after the wrapper ended:
# the command can stretch neither past what its room's quota allows.
ROOM_START_SECONDS = 10.0
ROOM_IN_BYTES_PER_SECOND = 16 << 20
ROOM_IN_ENTRIES_PER_SECOND = 1000
QUEUED_SIGNALS = 64  # RLIMIT_SIGPENDING: real-time and sigqueue()d signals a command may have pending
OPEN_FILES = 256  # RLIMIT_NOFILE of each process


def tasks_of(uid: int) -> int:
    """Tasks (threads count: RLIMIT_NPROC counts them) that `uid` runs now."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read(4096)
        except OSError:
            continue
        uid_line = next((ln for ln in status.split(b"\n") if ln.startswith(b"Uid:")), b"")
        if uid_line.split()[1:2] != [str(uid).encode()]:
            continue
        threads = next((ln for ln in status.split(b"\n") if ln.startswith(b"Threads:")), b"Threads: 1")
        total += int(threads.split()[1])
    return total


def child_limits(lim: SandboxLimits, tasks: int | None, address_space: int, group: CommandCgroup | None,
                  uid: int | None) -> Callable[[], None]:
    """Run in the child before bubblewrap starts; everything inside inherits it: join the command's
    cgroup (as root: moving into it needs that), set the limits (`tasks` None: the wrapper sets it), then
    drop to `uid`."""
    cpu = max(1, int(lim.cpu_seconds))
    fsize = lim.max_file_mb << 20
    procs = group.procs_files() if group is not None else ()

    def setup() -> None:
        join(procs)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if tasks is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Counted per user (up through the user namespaces): kept small, so that a command of the owner's uid
        # cannot take the owner's queued signals or POSIX message queues (seccomp.py refuses inotify).
        resource.setrlimit(resource.RLIMIT_SIGPENDING, (QUEUED_SIGNALS, QUEUED_SIGNALS))
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
        # The descriptors a process may hold: the kernel also bounds the descriptors a user has in flight over
        # unix sockets (SCM_RIGHTS) by the sender's limit, so a room at 20,000 left the owner's programs, at
        # 1,024, with ETOOMANYREFS until it ended.
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    return setup


def quota_seconds(quota_bytes: int, entries: int) -> float:
    """The time a room of `quota_bytes` holding up to `entries` entries may take to go in, or to be merged back."""
    return ROOM_START_SECONDS + max(quota_bytes, 0) / ROOM_IN_BYTES_PER_SECOND + entries / ROOM_IN_ENTRIES_PER_SECOND
