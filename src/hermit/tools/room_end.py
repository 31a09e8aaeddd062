"""The end of a room's command: what it left is killed, and Hermit waits for nothing without an end.

Where the command has a cgroup, what is left in it is killed (exec_cgroup.CommandCgroup.kill). Everywhere, and
alone where there is none (Hermit as an ordinary user without delegation), bubblewrap's pid 1 in the sandbox is
killed (`SandboxInit`), which ends every process of the sandbox's pid namespace.

A command can outlive itself: its processes may keep the output pipe, or bubblewrap's pid 1 may keep the sockets
the room goes in and out on, long after the command's time. So every wait here has an end: the threads that
carry the room are joined while they make progress, and at most END_SECONDS without; then their sockets are shut
down (which wakes a blocked send or recv: closing a socket another thread waits on does not) and what they got
is what came back (the merge trusts none of it anyway).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# After the command (killed or not): how long its output, its processes' ends and the room's way back are
# waited for without progress.
END_SECONDS = 5.0


def join_while_busy(threads: Iterable[threading.Thread], progress: Callable[[], int], cut: Callable[[], None]) -> None:
    """Join `threads` while `progress()` keeps changing, at most END_SECONDS at a time without a change; then
    `cut()` and join each a last second."""
    for t in threads:
        seen = None
        while t.is_alive() and progress() != seen:
            seen = progress()
            t.join(timeout=END_SECONDS)
    if any(t.is_alive() for t in threads):
        cut()
        for t in threads:
            t.join(timeout=1)


# How long bubblewrap may take to say which process is the sandbox's pid 1 (--info-fd).
START_SECONDS = 30.0


@dataclass
class SandboxInit:
    """bubblewrap's pid 1 in the sandbox, held by a pidfd: killing it ends the command for good.

    When a pid namespace's init dies, the kernel kills every process in the namespace, whatever they did to
    themselves (`--die-with-parent` is a prctl inside pid 1, which the command, the same uid in the same
    namespace, can undo through /proc/1/mem). bubblewrap says its pid (`--info-fd`: JSON with "child-pid", as
    the host sees it); it is opened as a pidfd at once and checked to be bubblewrap's child, so a pid the
    kernel handed to another process meanwhile is never signalled."""

    pidfd: int = -1

    @classmethod
    def read(cls, info_fd: int, bwrap_pid: int) -> SandboxInit:
        """From bubblewrap's info pipe (read end; its write end already closed here). A pipe that ends empty:
        bubblewrap stopped before making the sandbox, there is nothing to kill. Raises OSError when it says
        nothing in time, or names something other than its own live child."""
        text = _read_all(info_fd, START_SECONDS)
        if not text.strip():
            return cls()
        try:
            pid = json.loads(text)["child-pid"]
        except (ValueError, KeyError, TypeError) as e:
            raise OSError(f"bubblewrap's info is not what it writes: {e}") from e
        if not isinstance(pid, int) or pid <= 1:
            raise OSError(f"bubblewrap's info names no child: {pid!r}")
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return cls()  # gone already (and reaped): with it, everything in its namespace
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            # Still alive after the read: the pid was this process's all along, and it is bubblewrap's child.
            signal.pidfd_send_signal(pidfd, 0)
        except (OSError, ValueError, IndexError):
            os.close(pidfd)
            return cls()  # it ended meanwhile: so did its namespace
        if parent != bwrap_pid:
            os.close(pidfd)
            if not _running(bwrap_pid):
                # A short command: its sandbox ended, bubblewrap with it, and the finished child went to a
                # reaper before this look. Nothing is left to kill (and nothing is signalled).
                return cls()
            raise OSError(f"pid {pid} is not bubblewrap's child")
        return cls(pidfd)

    def kill(self) -> None:
        if self.pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


def _running(pid: int) -> bool:
    """`pid` (a child of this process) has not ended: neither gone nor a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _read_all(fd: int, seconds: float) -> str:
    """All a pipe holds until its writer closes it, waiting at most `seconds` in all."""
    deadline = time.monotonic() + seconds
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = b""
    while len(data) < 4096:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(int(left * 1000) + 1):
            raise OSError("bubblewrap did not say which process is the sandbox")
        block = os.read(fd, 4096)
        if not block:
            break
        data += block
    return data.decode("utf-8", "replace")
