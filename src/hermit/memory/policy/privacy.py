"""Which files are private long-term memory, decided by file identity (device + inode), never by name.

MEMORY.md is private to the main session (SPEC §3). A name check is not enough: `ln MEMORY.md
memory/leak.md` gives the same bytes a second name. So a file is long-term memory when it *is*
MEMORY.md — same (st_dev, st_ino) — and, outside the main session, any hard-linked regular file
(st_nlink > 1) is treated as possibly MEMORY.md too, since a second name of it might be anywhere.

What identity cannot catch: a *copy* of MEMORY.md's text (`cp`), or a link whose twin MEMORY.md has
since been replaced by an atomic rewrite (the old inode then has one name only). docs/security.md says so.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from hermit.workspace import MEMORY_FILE

FileIdentity = tuple[int, int]


def file_identity(path: Path) -> FileIdentity | None:
    """(st_dev, st_ino) of what `path` names (symlinks followed), or None when it does not exist."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def is_hard_linked(path: Path) -> bool:
    """A regular file with more than one name (directories always have several links; they don't count)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink > 1


def is_same_file(path: Path, others: Iterable[Path]) -> bool:
    ident = file_identity(path)
    return ident is not None and any(file_identity(o) == ident for o in others)


def long_term_file(workspace: Path) -> Path:
    return workspace / MEMORY_FILE


def is_long_term(path: Path, workspace: Path) -> bool:
    """True when `path` is the workspace's MEMORY.md by identity (or by name, should it not exist)."""
    memory = long_term_file(workspace)
    if Path(os.path.realpath(path)) == Path(os.path.realpath(memory)):
        return True
    return is_same_file(path, [memory])

