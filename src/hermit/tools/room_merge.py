"""The merge after a room's command: what came back (room_unpack.unpack, into a staging folder) goes into the room.

The merge is planned before the room is touched, and the plan reads only: which of the room's entries the command
deleted, which it created or changed, what a file tool (or another command of this chat) wrote there meanwhile,
what the room's quota allows, which links would lead out of it. An entry that came back as it went in (the seed's
signature: a folder, a link's text, a file's sha256) costs nothing more; when nothing changed the room is not even
walked. Then the plan is carried out: deletions, then folders, links and files by depth, a file moved into place
from the staging folder by one rename (the staging folder is in the rooms folder, beside the room).

The merge has a time (`deadline`, room_limits.merge_seconds: what the room's quota may hold, at the same rates as
its way in). Reading what came back and planning stop at it (OverTime), and the room stays as it was; the plan is
carried out only when what is left of that time covers its steps at those rates. So a merge never stops half-way
for time: it is kept whole or not at all, and the chat is told which (room_sandbox.py). Nor for a crash: the plan is
written down before its first step (room_journal.py), and a merge stopped part-way is finished by the room's next use.
The time counts from when the merge has the room (room_sandbox: waiting for another merge of it is not its time).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import hermit.tools.rooms as rooms
from hermit.tools import room_journal, safe_fs
from hermit.tools.room_journal import Op
from hermit.tools.room_limits import ROOM_IN_ENTRIES_PER_SECOND
from hermit.tools.room_unpack import CHECK_EVERY, OverTime, Seen
from hermit.tools.rooms import (
    Manifest,
    Merge,
    SeedEntry,
    Signature,
    charge,
    file_signature,
    links_leaving,
    stamp_of,
)

# Called before each step of a merge is carried out (its index): a test's way to stop Hermit at a chosen step.
STEP_HOOK: list[Callable[[int], None] | None] = [None]


def apply_incoming(room_fd: int, extracted: Path, seed: Manifest, quota_bytes: int | None = None,
                   seen: Mapping[str, Seen] | None = None, deadline: float | None = None,
                   carry: Path | None = None) -> Merge:
    """Merge what a sandboxed command left (extracted into `extracted`) into the room: files it deleted are
    removed, then files and folders it created or changed are written — unless a file tool changed that
    path while it ran (then the tool's version stays), or the entry would take the room past
    `quota_bytes` (then it is skipped and the room's own version, if any, stays). Every link that would lead
    out of the room through its other links is never created, and any the room holds after is removed (`refused`).

    `seen` (room_unpack.unpack's record) says what came back; without it `extracted` holds all of it and is
    walked. What came back is read in full and the merge planned before the room is touched: an error there
    (OSError), or `deadline` passing (OverTime), leaves the room as it was.

    With `carry` (the room's carry folder, room_journal.carry_path) the plan is written down before the room is touched
    and `extracted` renamed to it: a merge stopped part-way (kill -9, power loss, an error) is finished by the room's
    next use, so the room gets all of the command's changes or none."""
    src_fd = os.open(extracted, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        merge = _Plan(room_fd, src_fd, seed, quota_bytes, deadline, carry, extracted).run(
            dict(seen) if seen is not None else _walked(src_fd))
    finally:
        os.close(src_fd)
    shutil.rmtree(extracted, ignore_errors=True)
    return merge


def _walked(root_fd: int) -> dict[str, Seen]:
    """Every entry of an extracted folder (only Hermit writes it), by relative path, read through descriptors."""
    out: dict[str, Seen] = {}
    for rel, st in safe_fs.walk_beneath(root_fd):
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = Seen(("l", safe_fs.readlink_beneath(root_fd, rel)), mode)
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = Seen(("d", ""), mode)
        elif stat.S_ISREG(st.st_mode):
            fd = safe_fs.open_beneath(root_fd, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            try:
                out[rel] = Seen(file_signature(fd), mode, rel)
            finally:
                os.close(fd)
    return out


@dataclass
class _Step:
    rel: str
    entry: Seen
    current: os.stat_result | None
    remove: bool = False  # a link refused (it would lead out of the room): what the room has there is removed


WALK_PAST = 256  # deletions past which the room is walked once rather than each entry looked up


@dataclass
class _Plan:
    room_fd: int
    src_fd: int
    seed: Manifest
    quota_bytes: int | None
    deadline: float | None
    carry: Path | None = None  # the room's carry folder (room_journal): the merge is written down before it is applied
    staging: Path | None = None  # what came back (renamed to `carry` when the merge is written down)
    looked: int = 0
    walked: dict[str, os.stat_result] | None = None  # the whole room, when it was walked (under its lock)
    _stat: dict[str, os.stat_result | None] = field(default_factory=dict)
    after: dict[str, str | None] = field(default_factory=dict)  # kind ("d", "f", "l") or None: what the plan leaves

    def tick(self) -> None:
        self.looked += 1
        if self.deadline is not None and self.looked % CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            raise OverTime("the merge could not be planned within its time")

    def lstat(self, rel: str) -> os.stat_result | None:
        if self.walked is not None:
            return self.walked.get(rel)
        if rel not in self._stat:
            self.tick()
            self._stat[rel] = safe_fs.lstat_beneath(self.room_fd, rel)
        return self._stat[rel]

    def is_dir_after(self, rel: str) -> bool:
        if not rel:
            return True
        if rel in self.after:
            return self.after[rel] == "d"
        st = self.lstat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def run(self, seen: dict[str, Seen]) -> Merge:
        gone = sorted((rel for rel in self.seed if rel not in seen), key=lambda r: -r.count("/"))
        new = sorted((rel for rel, e in seen.items() if rel not in self.seed or self.seed[rel].sig != e.sig),
                     key=lambda r: (r.count("/"), r.split("/")))
        if not gone and not new:
            # Nothing changed: the room is not walked, and its links are not judged again: only a merge changes a
            # room's links (the file tools write files), and each one that does judges them all (or, stopped,
            # the room's next use does: room_journal.recover).
            return Merge([], [])
        used, links = self._room() if new or len(gone) > WALK_PAST else (0, {})
        deletions = [rel for rel in gone if self._deletable(rel)]
        for rel in deletions:
            self.after[rel] = None
            st = self.lstat(rel)
            used -= charge(st) if st is not None else 0
        steps, skipped, meanwhile, refused = self._writes(new, seen, used, self._leaving(links, seen))
        ops, was, changed = self._ops(deletions, steps)
        if self.deadline is not None and ops and self.deadline - time.monotonic() < len(ops) / ROOM_IN_ENTRIES_PER_SECOND:
            raise OverTime("what is left of the merge's time would not cover its changes")
        # The room's links are judged again only when the plan changes them: a link made, replaced or removed, or
        # one refused, or kept as written meanwhile (what room_merge._leaving cannot foresee). Whatever else
        # changes, the links resolve as before (a name that is not a link is taken as a folder: rooms._resolve).
        judge = bool(refused) or (bool(meanwhile) and bool(links)) or any(
            op[0] in ("l", "x") or w == "l" for op, w in zip(ops, was, strict=True))
        if ops:
            # "room": which room the plan is for (a stopped one is finished only into that one: room_journal.recover)
            self._carry_out(ops, was, {"changed": changed, "judge": judge, "room": os.fstat(self.room_fd).st_ino})
        dropped: list[str] = []
        if judge:
            dropped = [r for r in rooms._drop_links_leaving(self.room_fd) if r not in refused]
        if ops and self.carry is not None:
            room_journal.done(self.carry, self.src_fd)
        out = refused + dropped
        return Merge([c for c in changed if c not in out], skipped, out, meanwhile=meanwhile)

    def _carry_out(self, ops: list[Op], was: list[str | None], summary: dict[str, object]) -> None:
        """Carry the plan out; with a carry folder, written down first (room_journal.commit): from there a Hermit
        stopped at any point has the room's next use finish it."""
        if self.carry is not None:
            assert self.staging is not None
            room_journal.commit(self.staging, self.src_fd, self.carry, ops, summary)
        room_journal.Carry(self.room_fd, self.src_fd, lambda rel, i: was[i]).run(ops, STEP_HOOK[0])

    def _deletable(self, rel: str) -> bool:
        """The command deleted `rel`: removed unless something else changed it meanwhile."""
        current = self.lstat(rel)
        return current is not None and stamp_of(current) == self.seed[rel].stamp

    def _room(self) -> tuple[int, dict[str, str]]:
        """What the room counts against its quota now, and its links (one walk, kept for `lstat`)."""
        used = 0
        links: dict[str, str] = {}
        walked: dict[str, os.stat_result] = {}
        for rel, st in safe_fs.walk_beneath(self.room_fd):
            self.tick()
            walked[rel] = st
            used += charge(st)
            if stat.S_ISLNK(st.st_mode):
                links[rel] = safe_fs.readlink_beneath(self.room_fd, rel)
        self.walked = walked
        return used, links

    def _leaving(self, links: dict[str, str], seen: dict[str, Seen]) -> set[str]:
        """The incoming links that would lead out of the room together with the room's links as the merge leaves
        them (its own, unless the command replaced them, and the incoming ones): never created. What this cannot
        foresee (an entry kept because it was written meanwhile) is caught by rooms._drop_links_leaving after."""
        incoming = {rel: e.sig[1] for rel, e in seen.items() if e.sig[0] == "l"}
        if not incoming:
            return set()
        every = {rel: t for rel, t in links.items() if rel not in seen or seen[rel].sig[0] == "l"}
        every.update(incoming)
        return {rel for rel in links_leaving(every) if rel in incoming}

    def _writes(self, new: list[str], seen: dict[str, Seen], used: int,
                leaving: set[str]) -> tuple[list[_Step], list[str], list[str], list[str]]:
        steps: list[_Step] = []
        skipped: list[str] = []
        meanwhile: list[str] = []
        held: set[str] = set()  # paths kept as someone else wrote them: nothing of the command's goes below
        refused: list[str] = []
        for rel in new:
            self.tick()
            entry = seen[rel]
            before = self.seed.get(rel)
            parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
            if _below(rel, held):
                meanwhile.append(rel)
                continue
            current = None if self._fresh(rel) else self.lstat(rel)
            if _written_meanwhile(entry.sig, before, current):
                meanwhile.append(rel)
                held.add(rel)
                continue
            if self.quota_bytes is not None:
                # A folder replacing a file (or the reverse) is charged in full: the entries below it are
                # charged as they come. A staged file is charged as its copy is.
                cost = self._charge(entry) - (charge(current) if current is not None else 0)
                if used + cost > self.quota_bytes or (current is None and not self.is_dir_after(parent)):
                    skipped.append(rel)
                    continue
                used += cost
            if entry.sig[0] == "l" and rel in leaving:
                refused.append(rel)
                self.after[rel] = None
                if current is not None:
                    steps.append(_Step(rel, entry, current, remove=True))
                continue
            self.after[rel] = entry.sig[0]
            steps.append(_Step(rel, entry, current))
        return steps, skipped, meanwhile, refused

    def _fresh(self, rel: str) -> bool:
        """`rel`'s folder, or one above it, is made by the plan where something else is now (a file, a link, or
        nothing): the room holds nothing at `rel` by the time it is written."""
        while "/" in rel:
            rel = rel.rsplit("/", 1)[0]
            if rel in self.after:
                st = self.lstat(rel)
                if st is None or not stat.S_ISDIR(st.st_mode) or self.after[rel] != "d":
                    return True
        return False

    def _charge(self, entry: Seen) -> int:
        if entry.staged is not None:
            return charge(os.stat(entry.staged, dir_fd=self.src_fd, follow_symlinks=False))  # Hermit's own folder
        return rooms.ENTRY_BYTES

    # ---- carrying the plan out (nothing here reads what came back again but the staged files) ----

    def _ops(self, deletions: list[str], steps: list[_Step]) -> tuple[list[Op], list[str | None], list[str]]:
        """The plan as room_journal's steps, what is at each step's path before it, and what the chat is told."""
        ops: list[Op] = []
        was: list[str | None] = []
        changed: list[str] = []
        for rel in deletions:
            ops.append(["rm", rel])
            was.append(_kind(self.lstat(rel)))
            changed.append(f"-{rel}")
        for step in steps:
            was.append(_kind(step.current))
            kind = step.entry.sig[0]
            if step.remove:
                ops.append(["x", step.rel])
            elif kind == "d":
                ops.append(["d", step.rel])
            elif kind == "l":
                ops.append(["l", step.rel, step.entry.sig[1]])
                changed.append(step.rel)
            else:
                ops.append(["f", step.rel, step.entry.staged, self._mode(step)])
                changed.append(step.rel)  # a folder is told by what is kept in it
        return ops, was, changed

    @staticmethod
    def _mode(step: _Step) -> int:
        """A file's permissions as safe_fs.write_beneath gives them: a regular file of this user's there keeps its
        rwx bits."""
        current = step.current
        carried = current is not None and stat.S_ISREG(current.st_mode) and current.st_uid == os.geteuid()
        return (stat.S_IMODE(current.st_mode) if current is not None and carried else step.entry.mode) & 0o777


def _kind(st: os.stat_result | None) -> str | None:
    if st is None:
        return None
    return "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"


def _below(rel: str, held: set[str]) -> bool:
    while "/" in rel:
        rel = rel.rsplit("/", 1)[0]
        if rel in held:
            return True
    return False


def _written_meanwhile(sig: Signature, before: SeedEntry | None, current: os.stat_result | None) -> bool:
    """Whether the room's entry at a path the command changed is no longer what the command started from:
    changed since the seed, or created since (two folders of one name merge; anything else is a clash)."""
    if current is None:
        return False
    if before is None:
        return not (sig[0] == "d" and stat.S_ISDIR(current.st_mode))
    return stamp_of(current) != before.stamp
