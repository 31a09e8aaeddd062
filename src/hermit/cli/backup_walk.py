"""What `hermit backup` puts in the archive: the walk of each tree, what is left out, and hard links.

Left out: only Hermit's own derived or transient files at the places Hermit keeps them — the state dir's
`memory/` (indexes), `cache/`, `logs/`, `inbox/`, `channels/status/`; every agent's index file wherever it
is configured, with its SQLite sidecars, lock and rebuild files; lock files (`*.lock`) in the folders Hermit
alone writes (the state dir outside workspaces, session stores); and files named the way Hermit names a file
it is still writing (`.NAME.tmp-<pid>-<8 hex>`, `.NAME.<12 hex>.tmp`, `.NAME.restore-tmp`, a restore's
`.hermit-restore-<16 hex>` folder and its `.ready` marker); the gateway's pending sign-in tickets and the
dashboard's launcher pages (keys for a gateway process that will not run again); and at the top of each workspace `.hermit-watch/`, the
journal of notes other chats added while an owner's command ran (memory/policy/added_notes.py): other chats'
words, a deleted message's copy among them, that means nothing once its command has ended, and that a restore
would bring back as a journal nobody removes. Nothing else in a workspace is left out for how its name ends: a
user's `finances.sqlite`, `release.lock` or `letter.tmp` is theirs. Whatever is left out is counted and named.
The bind guard's journals (`<agent>/sandbox/bind-guard-*.json`) are kept on purpose: a backup taken while a
bind-mode command ran holds what that command left at the instruction files' names, and the journal restored
with it has the next turn undo that, as after a kill (tools/bind_guard.py).

Hard links: MEMORY.md is private by identity (policy/privacy.py), and any note under `memory/` with a second
name is withheld from everyone but the owner, since that name may be MEMORY.md's. A backup that stored each
name as its own file would turn such a twin into a plain shared note after a restore. So a file whose names
include an owner-only one (MEMORY.md, `memory/private/…`, anything of the state dir outside workspaces) or a
note under `memory/` is stored once and its other names go in the manifest as links to it (`restore`
recreates them with link(2)); a `memory/` note whose other name is outside the backup is left out with a
warning. Other hard links (a `git clone` makes them) are stored as plain files, as before.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hermit.memory.policy.added_notes import WATCH_DIR

# The state dir's own derived or transient folders (relative to it).
DERIVED_DIRS = ("memory", "cache", "logs", "inbox", "channels/status")
# The state dir's transient files: sign-in tickets (gateway/tickets.py: keys to the gateway token for ten
# minutes, for the gateway process that was running) and the dashboard's launcher pages that carry one.
TRANSIENT_STATE = re.compile(r"gateway/(ticket-[0-9a-f]{64}|dashboard-[0-9a-f]{16}\.html)")
HERMIT_TEMP = re.compile(r"\..+\.(tmp-\d+-[0-9a-f]{8}|[0-9a-f]{12}\.tmp|restore-tmp)|\.hermit-restore-[0-9a-f]{16}(\.ready)?")
INDEX_SIDECARS = ("", "-wal", "-shm", "-journal", ".lock")
SHOWN = 10  # names printed of what was left out


@dataclass
class Tree:
    """One folder backed up as `arc/…`. `own` is a folder Hermit alone writes (its lock files are left out);
    `workspaces` are the folders inside it (relative) that are workspaces, where nothing is left out by name."""

    root: Path
    arc: str
    own: bool
    workspaces: tuple[PurePosixPath, ...] = ()
    derived: tuple[str, ...] = ()
    shown: str = ""  # how a path in it is printed: relative to the state dir, or from this prefix


@dataclass
class Entry:
    path: Path
    arc: str
    st: os.stat_result
    shown: str


@dataclass
class Plan:
    entries: list[Entry] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # archive name -> the stored name it is another name of
    left_out: list[str] = field(default_factory=list)  # derived or transient: rebuilt, or Hermit's while running
    skipped: list[str] = field(default_factory=list)  # not backed up, with why (symlinks, special files, twins)
    workspaces: list[str] = field(default_factory=list)  # archive names of the workspaces

    def summary(self) -> list[str]:
        lines = []
        if self.left_out:
            shown = ", ".join(self.left_out[:SHOWN]) + (f" and {len(self.left_out) - SHOWN} more"
                                                          if len(self.left_out) > SHOWN else "")
            lines.append(f"left out {len(self.left_out)} derived or transient files and folders (indexes, caches, "
                         f"logs, locks, unfinished writes; they rebuild): {shown}")
        lines += [f"skipped {s}" for s in self.skipped]
        return lines


def plan(trees: list[Tree], index_paths: list[Path]) -> Plan:
    """Every file and folder of `trees` to store, in walk order, with the hard links to keep as links."""
    index_files = {Path(str(p) + s) for p in index_paths for s in INDEX_SIDECARS}
    out = Plan()
    for tree in trees:
        out.workspaces += [f"{tree.arc}/{w}" if w.parts else tree.arc for w in tree.workspaces]
        _walk(tree, index_files, index_paths, out)
    _hard_links(out)
    return out


def _in(rel: PurePosixPath, folders: tuple[PurePosixPath, ...]) -> bool:
    return any(not f.parts or rel == f or f in rel.parents for f in folders)


def _left_out(tree: Tree, rel: PurePosixPath, path: Path, is_dir: bool, index_files: set[Path],
              index_paths: list[Path]) -> bool:
    name = rel.name
    if HERMIT_TEMP.fullmatch(name) or path in index_files:
        return True
    if any(path.parent == p.parent and name.startswith(p.name + ".rebuild-") for p in index_paths):
        return True
    if _in(rel, tree.workspaces):
        return name == WATCH_DIR and is_dir and rel.parent in tree.workspaces
    if rel.as_posix() in tree.derived or (tree.derived and TRANSIENT_STATE.fullmatch(rel.as_posix())):
        return True
    return tree.own and not is_dir and (name == ".lock" or name.endswith(".lock"))


def _walk(tree: Tree, index_files: set[Path], index_paths: list[Path], out: Plan) -> None:
    """Every regular file and directory under the tree, without following links."""
    for dirpath, dirnames, filenames in os.walk(tree.root):
        here = Path(dirpath)
        rel_dir = PurePosixPath(here.relative_to(tree.root).as_posix())
        kept = []
        for name in sorted(dirnames) + sorted(filenames):
            path, rel = here / name, rel_dir / name
            arc, shown = f"{tree.arc}/{rel}", f"{tree.shown}{rel}"
            try:
                st = os.lstat(path)
            except OSError as e:  # gone since it was listed
                out.skipped.append(f"{shown} ({e.strerror or e})")
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if _left_out(tree, rel, path, is_dir, index_files, index_paths):
                out.left_out.append(shown + ("/" if is_dir else ""))
            elif stat.S_ISLNK(st.st_mode):
                out.skipped.append(f"{shown} (a symlink)")
            elif not (is_dir or stat.S_ISREG(st.st_mode)):
                out.skipped.append(f"{shown} (not a file)")
            else:
                out.entries.append(Entry(path, arc, st, shown))
                if is_dir:
                    kept.append(name)
        dirnames[:] = kept


def _zone(arc: str, workspaces: list[str]) -> str:
    """"owner" (only the owner may read it), "memory" (a note others may be shown) or "other"."""
    for w in workspaces:
        if arc.startswith(w + "/"):
            rel = PurePosixPath(arc[len(w) + 1:])
            if rel == PurePosixPath("MEMORY.md") or rel.parts[:2] == ("memory", "private"):
                return "owner"
            return "memory" if rel.parts[:1] == ("memory",) else "other"
    return "owner"


def _hard_links(out: Plan) -> None:
    groups: dict[tuple[int, int], list[Entry]] = {}
    for e in out.entries:
        if stat.S_ISREG(e.st.st_mode) and e.st.st_nlink > 1:
            groups.setdefault((e.st.st_dev, e.st.st_ino), []).append(e)
    dropped: set[str] = set()
    for names in groups.values():
        zones = {e.arc: _zone(e.arc, out.workspaces) for e in names}
        if not {"owner", "memory"} & set(zones.values()):
            continue  # e.g. a git clone's objects: each name a plain file, as before
        stored = min(names, key=lambda e: (zones[e.arc] != "owner", e.arc))
        if len(names) == 1 and zones[stored.arc] == "memory":
            out.skipped.append(f"{stored.shown} (a second name — a hard link — of a file outside the backup: it is "
                               "withheld from everyone but you, and a separate copy would not be; copy it by hand)")
            dropped.add(stored.arc)
        for e in names:
            if e is not stored:
                out.links[e.arc] = stored.arc
    out.entries = [e for e in out.entries if e.arc not in dropped and e.arc not in out.links]
