"""Re-audit of the journal of notes other processes add while an owner's command runs (memory/policy/added_notes.py).

A watcher's marker in <workspace>/.hermit-watch/ was known alive by the pid in its name. A watcher killed mid-command
(kill -9 of `hermit chat`) left its marker, and once the kernel gave its pid to any other process (a pid is reused
within minutes on a busy machine, at once in a container) the marker counted as a live watcher for good: every
note every chat added from then on was copied into added.jsonl — contacts' words, a deleted message's copy among
them, on disk beside memory/ — which no command ever removed, until at its 8 MB cap notes were no longer recorded
and a contact's note during the owner's command became the owner's own again. A marker is now alive while its
watcher holds a lock on it (as the rest of Hermit tells a live maker: locks.hold_made), whatever its pid is now.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from hermit.memory.policy import added_notes


def _killed_watcher(ws: Path) -> None:
    """A process that announced a watch of `ws` and was killed with -9 mid-command."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: watch, say so, wait to be killed
        os.close(read)
        try:
            added_notes.watch(ws)
            os.write(write, b"1")
            signal.pause()
        finally:
            os._exit(1)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_killed_watchers_marker_under_a_reused_pid_is_no_watcher(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    folder = ws / added_notes.WATCH_DIR
    _killed_watcher(ws)
    [marker] = list(folder.iterdir())
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        # The kernel gave the dead watcher's pid to another process (here: one that never watched anything).
        marker.rename(folder / marker.name.replace(marker.name.split(".", 1)[0], str(other.pid), 1))

        # A contact's note while nobody watches: not copied anywhere.
        added_notes.added(ws / "memory" / "2026-01-20.md", "- the door code is 7741 (a contact's note)\n")
        assert not (folder / added_notes.JOURNAL).exists()

        # An owner's command after it: the dead marker is swept, and its end leaves nothing.
        window = added_notes.watch(ws)
        added_notes.unwatch(window)
        assert not folder.exists()
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(30)


def test_a_live_watcher_of_another_process_still_gets_the_notes(tmp_path: Path) -> None:
    """The other side: a watcher alive in another process (its lock held) is told of a note, and its end removes
    the journal."""
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    note = ws / "memory" / "2026-01-20.md"
    read, write = os.pipe()
    back_r, back_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # another process: watch until told, then report what it got and end its watch
        os.close(read)
        os.close(back_w)
        code = 1
        try:
            window = added_notes.watch(ws)
            os.write(write, b"1")
            os.read(back_r, 1)
            got = added_notes.additions(window, note)
            added_notes.unwatch(window)
            code = 0 if got == ["- a contact's note\n"] else 2
        finally:
            os._exit(code)
    os.close(write)
    os.close(back_r)
    assert os.read(read, 1) == b"1"
    added_notes.added(note, "- a contact's note\n")
    os.write(back_w, b"1")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not (ws / added_notes.WATCH_DIR).exists()
