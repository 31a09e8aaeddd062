"""A sync's first step: the `.hermit-watch/` journal a killed `hermit chat` watcher left is removed.

The journal (memory/policy/added_notes.py) holds the notes other chats added while an owner's command ran — a
deleted message's copy among them. The last command to end removes it; one a watcher killed mid-command left
waited for the owner's next command or the next start of an agent (workspace.ensure_workspace). A memory sync
(`hermit memory index`, the gateway's watcher after a change, a search's or a session start's sync) runs far
more often, so it clears it too: under the workspace's memory-write lock, as added_notes.clear_dead requires,
taken without waiting — a writer holding it now (a long flush) leaves the journal to the next sync, and the sync
goes on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hermit.locks import LockBusy, locked_dir
from hermit.memory.policy import added_notes

log = logging.getLogger("hermit.memory.index")


def clear_dead_journal(workspace: Path) -> bool:
    """Remove the journal of `workspace` when no watcher lives; True when one was removed."""
    if not os.path.lexists(workspace / added_notes.WATCH_DIR / added_notes.JOURNAL):
        return False  # the common case: no lock taken
    try:
        with locked_dir(Path(os.path.realpath(workspace)), 0.0, "removing a dead watch journal"):
            removed = added_notes.clear_dead(workspace)
    except (LockBusy, OSError):
        return False
    if removed:
        log.info("removed %s/%s/%s, left by a command's watcher that was killed", workspace,
                 added_notes.WATCH_DIR, added_notes.JOURNAL)
    return removed
