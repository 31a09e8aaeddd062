"""What the owner's unsandboxed shell writes into memory becomes the owner's, as the file tools' writes do.

The owner's sessions run exec as the owner's shell (outside a sandbox under the default `sandbox.mode:
non-main`): `printf … >> memory/2026-01-20.md`, `mv draft.md memory/health.md`, `sed -i …`. Text outside origin
blocks under memory/ is shared (hand-written daily logs are), so such a note reached every chat, where the
same note written with the write tool is an owner-only block (SPEC §18: what the main session writes is the
owner's). So around such a command:

- before it, the text of every file whose owner writes are marked (`MemoryWriteRules.marks_owner_writes`:
  memory/ but memory/private/, and the instruction files; MEMORY.md and the extra paths' files are owner-only
  whole) is kept — from a cache keyed by the file's identity, size, mtime and ctime, so the next command
  re-reads only what changed;
- after it, under the memory-write locks of the files it changed, each is rewritten as the write tool would
  have written that change from the owner's session (`mark_owner_change`: added and changed runs of lines in
  owner-only blocks; a new file one block). A file moved (same inode, size and mtime, old name gone) or copied
  (same text) from another memory file keeps that file's blocks. The index is told of every change.

Lines changed inside another chat's note stay in that note (marking them would change who reads it) and are
counted in the command's output; the rest of the file's change is marked; a change that took lines out of such
a note (the file overwritten) makes the whole new text the owner's, as does a file new under its name whose
change cannot be told apart. Named in the output, not marked: a file over MAX_TEXT_BYTES, a change that moved a
marker; a file whose markers no longer pair up after the command (`sort -u`, `sed -i '/origin/d'`) is said to
be withheld from every chat but the owner's until it is put right (provenance.marker_damage). Text in another encoding is marked and written back as UTF-8; a binary file is left (no tool shows
it, the indexer skips it). A
process the command leaves running that writes later is not seen. A note one of Hermit's own writers adds while
the command runs (another chat's write tool or flush, the file its /new saves, the MCP server's memory_append)
is not the command's: each says what it added (memory/policy/added_notes.py) and the comparison starts from the
text before the command with those additions — taken for the command's, a contact's note became an owner-only
note the main session read as its own. Past added_notes.MAX_ENTRIES notes in one command, the rest are taken
for the command's (owner-only: hidden from their chat, never shown to others).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hermit.durable import write_atomic
from hermit.errors import PathPolicyError
from hermit.memory.policy import added_notes
from hermit.memory.policy.audience import is_private_path
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.policy.provenance import damaged_note, marker_damage
from hermit.textfile import FileTooLarge, NotRegularFile, decode_text, read_regular_stat
from hermit.tools.memory_files import MemoryWriteRules
from hermit.tools.sandbox import ResolvedPath
from hermit.workspace import BOOTSTRAP_ORDER

MAX_TEXT_BYTES = 20_000_000  # what the read tool reads (tools/files.MAX_FILE_BYTES); larger files are named
CACHE_CHARS = 64_000_000  # texts kept between commands, all workspaces together

Key = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns (no one can set it)


@dataclass(frozen=True)
class Seen:
    key: Key
    text: str | None  # None: too large; "" for a binary file (no tool shows it to anyone)


_cache: dict[str, Seen] = {}  # by path
_cache_chars = [0]
_cache_lock = threading.Lock()


class Snapshot(dict[str, Seen]):
    """The memory files' texts before a command (by path), and the window in which Hermit's own writers say
    what they add meanwhile (memory/policy/added_notes.py): another chat's note is not the command's change."""

    window: int = 0


def _key(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class OwnerExecMarks:
    """Before and after one command of an owner's session that runs outside a sandbox."""

    def __init__(self, rules: MemoryWriteRules, on_change: Callable[[Path], None] | None = None) -> None:
        self.rules = rules
        self.on_change = on_change
        self._root = rules.root

    def before(self) -> Snapshot:
        # First: a note added while the files are read is recorded too; other processes' writers are asked
        # (through the workspace's watch folder) to say theirs.
        window = added_notes.watch(self.rules.root)
        try:
            snapshot = Snapshot(self._scan())
        except BaseException:
            added_notes.unwatch(window)
            raise
        snapshot.window = window
        return snapshot

    def after(self, before: dict[str, Seen]) -> list[str]:
        """Mark what the command changed; the lines to add to its output (what could not be marked). A note
        one of Hermit's writers added meanwhile (another chat's, the MCP server's) is not the command's."""
        window = before.window if isinstance(before, Snapshot) else None
        try:
            return self._after(before, window)
        finally:
            if window is not None:
                added_notes.unwatch(window)

    def _after(self, before: dict[str, Seen], window: int | None) -> list[str]:
        notes: list[str] = []
        try:
            changed = [p for p, seen in self._scan() if p not in before or before[p].key != seen.key]
            if not changed:
                return notes
            # The locks of every writer of these files (another agent's extra path may name this memory/).
            with memory_writes_locked(self.rules.workspace, *map(Path, changed)):
                now = dict(self._scan())
                for path, seen in now.items():
                    old = before.get(path)
                    if old is not None and old.key == seen.key:
                        continue
                    previous = _source(path, seen, before, now) if old is None else old.text
                    others = added_notes.additions(window, path) if window is not None else []
                    if others and (old is None or previous is not None):
                        previous = added_notes.rebase(previous, others)
                        if previous == seen.text:  # only other writers' notes: nothing of the command's
                            if self.on_change is not None:
                                self.on_change(Path(path))
                            continue
                    note = self._mark(Path(path), seen, old, previous)
                    if note:
                        notes.append(note)
                    # Markers this command scrambled: the file is withheld from every chat until put right.
                    damage = marker_damage(seen.text) if seen.text else None
                    if damage is not None and (previous is None or marker_damage(previous) is None):
                        notes.append(damaged_note(self._shown(Path(path)), damage))
                    if self.on_change is not None:
                        self.on_change(Path(path))
        except (OSError, PathPolicyError) as e:  # the command ran; say what was not looked at
            notes.append(f"[memory files changed by this command were not checked: {e}]")
        return notes

    def _mark(self, path: Path, seen: Seen, old: Seen | None, previous: str | None) -> str | None:
        """Mark one changed file; `previous` is its text before the command (for a file new under its name, the
        text of the memory file it was moved or copied from, else None)."""
        target = ResolvedPath(path, self._shown(path))
        if seen.text is None:
            return (f"[{target.shown}: changed by this command but not marked as the owner's (over "
                    f"{MAX_TEXT_BYTES:,} bytes): what it says outside origin blocks is shared]")
        if not seen.text:
            return None  # binary (the tools refuse it) or empty
        if old is not None and previous is None:
            return (f"[{target.shown}: changed by this command but its earlier text was not kept (too large): not "
                    f"marked as the owner's]")
        note = None
        try:
            marked, left = self.rules.mark_owner_change(target, previous, seen.text)
        except PathPolicyError as e:
            if old is not None:
                return f"[{target.shown}: not marked as the owner's: {e.message}; the change stays as written]"
            marked, left = self.rules.mark_owner_change(target, None, seen.text)  # new here: all of it is the owner's
        if left:
            note = (f"[{target.shown}: {left} changed line(s) inside another chat's note were left as written, in "
                    f"that note (that chat reads them); the rest of the change is the owner's]")
        if marked != seen.text:
            write_atomic(path, marked)
            with contextlib.suppress(OSError):
                _remember(str(path), Seen(_key(os.lstat(path)), marked))
        return note

    def _shown(self, path: Path) -> str:
        try:
            return path.relative_to(self._root).as_posix()
        except ValueError:
            return str(path)

    def _scan(self) -> Iterator[tuple[str, Seen]]:
        root = self._root = self.rules.root
        for name in BOOTSTRAP_ORDER:
            if is_private_path(name):  # MEMORY.md, HEARTBEAT.md: the owner's whole, never a copy's source
                continue
            path = str(root / name)
            with contextlib.suppress(OSError):
                seen = _look(path, os.lstat(path))
                if seen is not None:
                    yield path, seen
        # memory/ but memory/private/ (and not the extra paths: their files are owner-only whole). Strings and
        # scandir's own lstat: a thousand notes cost a few milliseconds.
        folders = [(str(root / "memory"), "memory")]
        while folders:
            folder, shown = folders.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                rel = f"{shown}/{entry.name}"
                if is_private_path(rel):
                    continue
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):  # symlinked folders are not entered
                        folders.append((entry.path, rel))
                    elif entry.name.lower().endswith(".md"):
                        seen = _look(entry.path, entry.stat(follow_symlinks=False))
                        if seen is not None:
                            yield entry.path, seen


def _look(path: str, st: os.stat_result) -> Seen | None:
    """The file's identity and text (cached while its identity, size and mtime hold); None when it is not a
    regular file (a symlink is not followed: the indexer does not follow it either)."""
    if not stat.S_ISREG(st.st_mode):
        return None
    key = _key(st)
    with _cache_lock:
        cached = _cache.get(path)
    if cached is not None and cached.key == key:
        return cached
    try:
        data, fst = read_regular_stat(path, MAX_TEXT_BYTES, follow=False)
        # As the indexer and the read tool see it: another encoding decoded (marked, it is written as UTF-8).
        text: str | None = "" if b"\x00" in data[:8192] else decode_text(data).text
        key = _key(fst)
    except FileTooLarge:
        text = None
    except (NotRegularFile, OSError):
        return None
    seen = Seen(key, text)
    _remember(path, seen)
    return seen


def _remember(path: str, seen: Seen) -> None:
    with _cache_lock:
        dropped = _cache.pop(path, None)
        if dropped is not None:
            _cache_chars[0] -= len(dropped.text or "")
        if seen.text is None:
            return
        if _cache_chars[0] + len(seen.text) > CACHE_CHARS:
            _cache.clear()
            _cache_chars[0] = 0
        _cache[path] = seen
        _cache_chars[0] += len(seen.text)


def _source(path: str, new: Seen, before: dict[str, Seen], now: dict[str, Seen]) -> str | None:
    """The earlier text of a file new under its name: a memory file it was moved from (the same inode, size
    and mtime, no longer under its old name: an inode freed and handed to a new file is not a move) or copied
    from (the same text)."""
    for old_path, seen in before.items():
        if old_path == path:
            continue
        gone = old_path not in now or now[old_path].key[:2] != seen.key[:2]
        if (seen.key[:4] == new.key[:4] and gone) or (seen.text is not None and seen.text == new.text):
            return seen.text
    return None
