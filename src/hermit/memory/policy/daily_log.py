"""Appending a note to today's daily log (memory/YYYY-MM-DD.md): append only, never a rewrite (SPEC §2, §14.16).

Used by tools that add to memory from outside an agent turn (the MCP server's memory_append). The file
goes through memory_get's path rules (no symlinks, nothing outside the workspace), is opened with
O_APPEND under an exclusive lock so two writers at once keep both notes, and is fsync'd. Every writer of
memory files in Hermit (this, and the file tools in every session) holds `memory_writes_locked` around its
read-modify-write, so a note added while another writer creates or rewrites the same file is never
replaced (a new file is written by a rename, which would drop an append made to the file it replaces).
That lock covers the workspace and the folder the file really is in: a folder named in the
`memory_search.extra_paths` of two agents (or one agent's memory/ named by another) is written by both.
A note with an `origin` (every writer but the owner) is escaped and wrapped in an origin block (memory/policy/provenance.py),
so its writer cannot forge a marker; a log that ends inside an unclosed block is closed first.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hermit.durable import append_whole
from hermit.errors import HermitError, PathPolicyError
from hermit.locks import lock_fd, locked_dir
from hermit.memory.policy import added_notes
from hermit.memory.policy.paths import RULES, resolve_memory_path
from hermit.memory.policy.provenance import Origin, neutralize, seal, wrap

MAX_NOTE_CHARS = 20_000

# A memory write holds the lock for milliseconds; a writer still waiting after this gives up with an error.
MEMORY_LOCK_SECONDS = 30.0


_held = threading.local()  # the folders whose memory lock this thread holds


def lock_folder(target: Path) -> str:
    """The folder whose lock covers writes to `target`: the real folder it is in (`target` itself when it is
    a folder), or the nearest one above it that exists (a note in a folder not made yet)."""
    real = os.path.realpath(target)
    folder = real if os.path.isdir(real) else os.path.dirname(real)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


@contextlib.contextmanager
def memory_writes_locked(workspace: Path, *targets: Path) -> Iterator[None]:
    """The lock every writer of memory files holds while it reads, decides and writes, across threads and
    processes (the gateway, the CLI, the MCP server): the workspace's (its directory) and, for each of
    `targets` (the files it will write, or folders), the folder it really is in (lock_folder). The agent's
    own writers all take the first; the second is what two agents take for one file, the workspace locks
    being theirs alone (a shared extra path, or one agent's memory/ named by another's extra_paths).

    Locks are taken in one fixed order (by real path), so two writers each needing two never wait on each
    other; a caller needing several takes them in one call. A thread that holds one may take it again (the
    web app checks what the owner edited and writes it through the file tool inside one hold): flock
    would wait on itself; a nested call takes only the locks it does not hold yet."""
    held: set[str] = _held.__dict__.setdefault("paths", set())
    wanted = {os.path.realpath(workspace), *(lock_folder(t) for t in targets)}
    with contextlib.ExitStack() as stack:
        for key in sorted(wanted - held):
            stack.enter_context(locked_dir(Path(key), MEMORY_LOCK_SECONDS, "a memory write"))
            held.add(key)
            stack.callback(held.discard, key)
        yield


def daily_log_path(day: datetime) -> str:
    return f"memory/{day:%Y-%m-%d}.md"


def append_daily_note(workspace: Path, note: str, now: datetime, extra_paths: Sequence[str] = (),
                      origin: Origin | None = None) -> dict[str, Any]:
    """Append `note` to the daily log of `now`'s date; returns {"path", "startLine", "endLine"} of the note
    (its own lines, inside its origin block when `origin` is given)."""
    text = note.strip("\n").rstrip()
    if not text.strip():
        raise HermitError("empty note", "pass the text to remember")
    if len(text) > MAX_NOTE_CHARS:
        raise HermitError(f"note is {len(text):,} characters (limit {MAX_NOTE_CHARS:,})",
                          "store a summary; put long documents in a file and note where it is")
    if "\x00" in text:
        raise HermitError("note contains a NUL byte", "send plain text")
    rel = daily_log_path(now)
    try:
        (workspace / "memory").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PathPolicyError(f"cannot create memory/ in {workspace}: {e}", RULES) from e
    real, shown = resolve_memory_path(workspace, rel, list(extra_paths))
    with memory_writes_locked(workspace, real):
        return _append(real, shown, text, now, origin)


def _append(real: Path, shown: str, text: str, now: datetime, origin: Origin | None) -> dict[str, Any]:
    try:
        # O_NONBLOCK: a FIFO planted under the log's name must not hold the memory lock (refused below).
        fd = os.open(real, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        raise PathPolicyError(f"cannot open {shown} for appending: {e}", RULES) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathPolicyError(f"{shown} is not a regular file", "move it away; the daily log is a Markdown file")
        if st.st_nlink > 1:  # another name of the same file (MEMORY.md?) would show the note as its own
            raise PathPolicyError(
                f"{shown} has {st.st_nlink} hard links: a note appended to it would also appear under the other name",
                f"replace it with a copy of its own (cp --remove-destination, or `cp {shown} x && mv x {shown}`)")
        lock_fd(fd)
        size = os.fstat(fd).st_size
        existing = os.pread(fd, size, 0).decode("utf-8", errors="replace") if size else ""
        # A log ending inside an unclosed block (cut short by hand) would take the note into that block.
        closing = seal(existing)[len(existing):]
        existing += closing
        if not existing:
            lead = f"# {now:%Y-%m-%d}\n\n"
        elif existing.endswith("\n\n"):
            lead = ""
        elif existing.endswith("\n"):
            lead = "\n"
        else:
            lead = "\n\n"
        body = text + "\n" if origin is None else wrap(neutralize(text, origin), origin)
        start = (existing + lead).count("\n") + 1 + (1 if origin is not None else 0)
        # new_line: the lead is checked against the last byte again right before the write (an editor or
        # shell appending meanwhile takes no lock).
        append_whole(fd, (closing + lead + body).encode("utf-8"), new_line=True)
        added_notes.added(real, closing + lead + body)  # not an owner's command's change (tools/exec_marks)
    finally:
        os.close(fd)  # releases the lock
    return {"path": shown, "startLine": start, "endLine": start + text.count("\n")}
