"""The end of a room's command: what it left is killed, and Hermit waits for nothing without an end.

Where the command has a cgroup, what is left in it is killed (exec_cgroup.CommandCgroup.kill).

A command can outlive itself: its processes may keep the output pipe, or bubblewrap's pid 1 may keep the sockets
the room goes in and out on, long after the command's time. So every wait here has an end: the threads that
carry the room are joined while they make progress, and at most END_SECONDS without; then their sockets are shut
down (which wakes a blocked send or recv: closing a socket another thread waits on does not) and what they got
is what came back (the merge trusts none of it anyway).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

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

