"""What Hermit's own writers add to memory files while an owner's unsandboxed command runs.

Why: the owner's shell runs outside a sandbox, and what it writes into memory is marked as the owner's after
each command (tools/exec_marks.py) by comparing every memory file with its text from before the command. A
note another chat added meanwhile — its write tool or its flush, the file its /new saved, the MCP server's
memory_append — was a change like the command's own, so it was wrapped as the owner's: the chat lost its note
and the main session read a contact's words ("the owner decided that Gus gets the door code") as an owner-only
note of its own. That took no timing but the owner's: any command (`ls`) of a few seconds was enough.

So each of those writers says what it added (`added`: the text appended at the file's end, or the whole of a
file it created), and the marking step starts from the text before the command *with those additions*
(`additions` and `rebase`), so that only the command's own change is the owner's. Recorded only while a
command is being watched (`watch` … `unwatch`), at most MAX_ENTRIES at once (past that a note is taken for
the command's, as before: owner-only, never shared). Only text a writer of Hermit's appended, exactly as it was
written, is ever taken out of a command's change; a command's own text is never in here.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from pathlib import Path

MAX_ENTRIES = 4096

_lock = threading.Lock()
_watching: set[int] = set()
_entries: list[tuple[int, str, str]] = []  # (sequence number, real path, the text added)
_numbers = itertools.count(1)


def watch() -> int:
    """Start recording additions (before the command's files are looked at); the window's number."""
    with _lock:
        window = next(_numbers)
        _watching.add(window)
        return window


def unwatch(window: int) -> None:
    """Stop recording for `window`; what no open window needs is forgotten."""
    with _lock:
        _watching.discard(window)
        first = min(_watching, default=None)
        _entries[:] = [] if first is None else [e for e in _entries if e[0] > first]


def added(path: Path | str, text: str) -> None:
    """A writer of Hermit's appended `text` to `path` (or created it holding `text`), under the memory lock."""
    if not _watching or not text:
        return
    real = os.path.realpath(path)
    with _lock:
        if _watching and len(_entries) < MAX_ENTRIES:
            _entries.append((next(_numbers), real, text))


def additions(window: int, path: Path | str) -> list[str]:
    """What Hermit's writers added to `path` since `window` opened, in order."""
    real = os.path.realpath(path)
    with _lock:
        return [text for n, p, text in _entries if n > window and p == real]


def rebase(previous: str | None, texts: Sequence[str]) -> str | None:
    """`previous` (a file's text before the command; None: there was no file) with `texts` appended as their
    writers appended them, each starting a line — unless it is already there (the file was read after it)."""
    text = previous
    for addition in texts:
        base = text or ""
        if base.endswith(addition):
            continue
        lead = "" if not base or base.endswith("\n") or addition.startswith("\n") else "\n"
        text = base + lead + addition
    return text
