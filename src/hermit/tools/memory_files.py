"""The rules every tool write to memory obeys: append-only daily logs, MEMORY.md history, and notes from others.

1. Daily logs (`memory/YYYY-MM-DD*.md`) keep every line, in every session (SPEC §14.16): a write or
   edit whose result drops or changes an existing line is refused with a hint to append
   (`write` with `append: true`). Inserting new lines anywhere is allowed.
2. A rewrite of MEMORY.md (write or edit, decided by file identity) first copies the previous version
   to `<state>/agents/<agentId>/memory-history/MEMORY-<UTC time>.md`, outside the workspace, so it
   is never indexed nor visible to a sandboxed command or another chat's room, and can be restored by hand.
   A rewrite of a note under memory/private/ keeps its previous version the same way, in
   `memory-history/private/<its path under memory/private/>/<UTC time>.md` (files 0600, folders 0700, kept until
   the owner removes them, as MEMORY.md's): the scrub of a deleted message (agent/owner_notes.py) tells by it which
   lines a whole rewrite added, and takes the copy out of every kept version too.
3. Writes from a session that is not the owner's (`origin` set) may only add notes to a recent daily log
   (`refuse_unless_addable`): no edits, no rewrites, no other file under memory/; the added text is
   escaped so it cannot forge a marker, and wrapped in an origin block (memory/policy/provenance.py) naming the channel, group,
   sender, session and audience (memory/policy/audience.py: that chat and the owner may read it). With
   `sandbox.memory_writes: main-only` they may not write memory at all. The bootstrap files
   (AGENTS.md, SOUL.md …) are the owner's instructions: such a session cannot change them either.
4. What the main session writes to memory (`owner` set), and to the instruction files (shown to every
   chat; the templates ask it to keep USER.md, TOOLS.md … current), is owner-only: a new file is wrapped
   whole in an owner block, an append is wrapped, and in a rewrite or edit of an existing file each run of added or
   changed lines is wrapped (lines added inside one of its own blocks already are owner-only). Its text
   is escaped too, so it cannot close its own block. An edit inside another audience's block is refused
   (append instead), and so is any change that would alter who may read a line it keeps (removing a
   marker). MEMORY.md and files under memory/private/ are owner-only whole and are not wrapped.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Literal

from hermit.config.paths import ensure_private_dir
from hermit.durable import create_new
from hermit.errors import PathPolicyError, SessionError
from hermit.memory.policy.audience import (
    OWNER,
    SHARED,
    UNKNOWN,
    audience_of_session,
    block_audience,
    is_private_path,
    line_audiences,
)
from hermit.memory.policy.daily_log import MAX_NOTE_CHARS
from hermit.memory.policy.privacy import is_long_term
from hermit.memory.policy.provenance import (
    CLOSE_LINE,
    Origin,
    marker_damage,
    neutralize,
    open_line,
    origin_blocks,
    seal,
    wrap,
)
from hermit.sessions.keys import SessionKind, parse_session_key
from hermit.tools.sandbox import ResolvedPath, is_within
from hermit.workspace import BOOTSTRAP_ORDER

DAILY_LOG_RE = re.compile(r"memory/\d{4}-\d{2}-\d{2}[^/]*\.md", re.IGNORECASE)
# The daily logs a session other than the owner's may add to (see MemoryWriteRules.refuse_unless_addable).
CHAT_LOG_RE = re.compile(r"memory/([0-9]{4})-([0-9]{2})-([0-9]{2})\.md")
CHAT_LOG_DAYS = 2
APPEND_HINT = ("write policy: daily logs are append only — keep every existing line; to add a note call write "
               "with append: true and only the new text")
MemoryWrites = Literal["all", "main-only"]


def keeps_every_line(before: str, after: str) -> bool:
    """True when every line of `before` survives unchanged and in order in `after` (insertions allowed)."""
    remaining = iter(after.splitlines())
    return all(any(line == candidate for candidate in remaining) for line in before.splitlines())


def join_append(before: str | None, addition: str) -> str:
    """`before` followed by `addition`, starting the addition on a new line."""
    if not before:
        return addition
    return before + ("" if before.endswith("\n") else "\n") + addition


def session_origin(session_key: str, sender: str | None = None) -> Origin:
    """The origin of notes written by a session: its key, channel and group (or DM peer), the sender, and
    its audience (who besides the owner may read them)."""
    audience = audience_of_session(session_key)
    try:
        key = parse_session_key(session_key)
    except SessionError:
        return Origin(session_key, sender=sender, audience=audience)
    group = key.peer_id if key.is_group else None
    if sender is None and key.kind is SessionKind.DM:
        sender = key.peer_id
    return Origin(session_key, key.channel, group, sender, audience)


def _utc_now() -> datetime:
    return datetime.now(UTC)


# How large a memory file a session other than the owner's may make by adding notes (the owner's own
# notes are not bounded here): with MAX_NOTE_CHARS per note, what a chat can put into memory is bounded.
MAX_FILE_CHARS_FROM_OTHERS = 1_000_000
_ADD_ONLY = "write policy: sessions other than the owner's main session may only add notes to memory files"


@dataclass(frozen=True)
class MemoryWriteRules:
    workspace: Path
    origin: Origin | None = None  # None: the owner's main session
    # The main session's origin (audience "owner"): its memory writes go into owner-only blocks. None
    # leaves them unmarked (a caller that is not a session, e.g. a test of the file tools).
    owner: Origin | None = None
    memory_writes: MemoryWrites = "all"
    history_dir: Path | None = None  # where MEMORY.md's previous versions go
    extra_paths: tuple[Path, ...] = ()  # configured extra memory roots (absolute)
    clock: Callable[[], datetime] = _utc_now  # aware; the runtime gives the agent's local time (its today)

    @property
    def root(self) -> Path:
        return self.workspace.resolve()

    def is_memory_file(self, target: ResolvedPath) -> bool:
        real = target.real
        if is_long_term(real, self.root):
            return True
        in_memory = is_within(real, self.root / "memory") or any(is_within(real, r) for r in self.extra_paths)
        return in_memory and real.suffix.lower() == ".md"

    def is_daily_log(self, target: ResolvedPath) -> bool:
        return DAILY_LOG_RE.fullmatch(target.shown) is not None

    def prepare(self, target: ResolvedPath, kind: Literal["write", "edit"], before: str | None,
                after: str) -> str:
        """The content to write instead of `after` (an origin block added), or PathPolicyError."""
        if self.origin is not None:
            after = self._from_others(target, kind, before, after)
        elif self.owner is not None and self.marks_owner_writes(target):
            after = self._from_owner(target, kind, before, after, self.owner)
        if before is not None and self.is_daily_log(target) and not keeps_every_line(before, after):
            raise PathPolicyError(f"this {kind} would drop or change existing lines of the daily log {target.shown}",
                                  APPEND_HINT)
        return after

    def marks_owner_writes(self, target: ResolvedPath) -> bool:
        """The owner's writes to `target` become owner-only blocks: a memory file that is not owner-only
        whole (MEMORY.md, memory/private/), or an instruction file."""
        return self.is_memory_file(target) and not self._owner_only_file(target) or self._is_instruction_file(target)

    def mark_owner_change(self, target: ResolvedPath, before: str | None, after: str) -> tuple[str, int]:
        """`after` with what changed since `before` in owner-only blocks, as a file tool's write of that change
        from the owner's session would have made it (exec_marks: what the owner's shell already wrote, so
        nothing is refused), and the number of changed lines left as written because they lie inside another
        chat's note (marking them would change who reads that note). Unchanged when this session is not the
        owner's or the file is not one whose owner writes are marked. PathPolicyError only when the change
        moved a marker, so that no line can be said to be whose."""
        if self.owner is None or self.origin is not None or not self.marks_owner_writes(target):
            return after, 0
        try:
            return self._from_owner(target, "edit", before, after, self.owner), 0
        except PathPolicyError:
            if not before:
                raise
        result, kept, added_at, left = _wrap_changes(target.shown, "edit", before, after, self.owner,
                                                     keep_others=True)
        _check_audiences(target.shown, "edit", before, result, kept, added_at)
        # A line left as written must still be inside another chat's note: one the change took out of it (the
        # file overwritten, a marker gone) would be shared. Then the whole new text is the owner's.
        audiences = line_audiences(result, target.shown)
        if any(audiences[j] in (SHARED, OWNER) for j in left):
            return self._from_owner(target, "edit", None, after, self.owner), 0
        return result, len(left)

    def refuse_unless_addable(self, target: ResolvedPath) -> None:
        """Raise unless a session other than the owner's may add a note to `target`: only a recent daily log,
        `memory/YYYY-MM-DD.md` (ASCII digits, dated within CHAT_LOG_DAYS of today: whatever the time zones,
        today's is one of them), new or not. So a chat never adds to the owner's other notes, never places
        text in MEMORY.md or memory/private/ (where it would become owner-only), never leaves other files
        outside its room, and everything it can put into memory is bounded: a few logs of at most
        MAX_FILE_CHARS_FROM_OTHERS. The view asks this before it reads or even looks for the file, so the
        answer does not depend on what is there."""
        if self.origin is None:
            return
        self._refuse_if_main_only(target)
        if not self._recent_log(target):
            today = self.clock().date()  # the agent's date (the runtime's clock is in its zone)
            raise PathPolicyError(f"{target.shown}: this session adds notes only to a recent daily log",
                                  f"{_ADD_ONLY}: write to memory/{today:%Y-%m-%d}.md (today's) with append: true; "
                                  "keep other files in this chat's own folder (paths outside memory/)")

    def _refuse_if_main_only(self, target: ResolvedPath) -> None:
        if self.memory_writes == "main-only":
            raise PathPolicyError(f"writing memory ({target.shown}) is not allowed from this session",
                                  "write policy: sandbox.memory_writes is main-only")

    def _recent_log(self, target: ResolvedPath) -> bool:
        m = CHAT_LOG_RE.fullmatch(target.shown)
        if m is None:
            return False
        try:
            day = date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            return False
        return abs((day - self.clock().date()).days) <= CHAT_LOG_DAYS

    def refuse_edit(self, target: ResolvedPath, *, in_memory_dir: bool = False) -> None:
        """Raise when this session may not edit `target` whatever the file holds: a session other than the
        owner's only adds notes, and changes no other file under memory/ (`in_memory_dir`: the view's memory
        area, whatever the file's kind). The file tools ask this before reading the file or matching the
        edit's `old` against it, so that neither the answer nor its error can tell the session what the
        file's withheld lines say (a "0 matches" / "not allowed" pair is an oracle, one guess at a time)."""
        if self.origin is None or not (in_memory_dir or self.is_memory_file(target)):
            return
        self._refuse_if_main_only(target)
        raise PathPolicyError(f"editing {target.shown} is not allowed from this session",
                              f"{_ADD_ONLY}; use write with append: true")

    def _from_others(self, target: ResolvedPath, kind: str, before: str | None, after: str) -> str:
        if target.real.parent == self.root and target.real.name in BOOTSTRAP_ORDER:
            raise PathPolicyError(f"{target.shown} holds the owner's instructions and cannot be changed from this "
                                  "session", "write policy: only the main session may change workspace "
                                         "instruction files")
        if not self.is_memory_file(target):
            return after
        if kind == "edit":
            self.refuse_edit(target)
        self.refuse_unless_addable(target)
        old = before or ""
        if not after.startswith(old):
            raise PathPolicyError(f"this write would change existing text of {target.shown}",
                                  f"{_ADD_ONLY}; use write with append: true")
        added = after[len(old):]
        if not added.strip():
            return after
        result = join_append(seal(old), wrap(neutralize(added.lstrip("\n"), self.origin), self.origin))  # type: ignore[arg-type]
        if len(added) > MAX_NOTE_CHARS or len(result) > MAX_FILE_CHARS_FROM_OTHERS:  # the size as written
            raise PathPolicyError(f"this note would make {target.shown} too large ({len(added):,} characters added; "
                                  f"a note from this session may have {MAX_NOTE_CHARS:,}, and a memory file may "
                                  f"grow to {MAX_FILE_CHARS_FROM_OTHERS:,} through it)",
                                  "store a short summary; keep long documents in this chat's folder")
        return result

    def _is_instruction_file(self, target: ResolvedPath) -> bool:
        """AGENTS.md, SOUL.md, TOOLS.md, USER.md …: shown to every chat, and written by the owner's chat as
        its templates ask (what it learns about the owner, hosts and devices, lessons). Like everything the
        main session writes, those writes are owner-only blocks, withheld from other chats (SPEC §18); what
        the owner types in by hand stays shared."""
        return target.real.parent == self.root and target.real.name in BOOTSTRAP_ORDER

    def _owner_only_file(self, target: ResolvedPath) -> bool:
        return is_long_term(target.real, self.root) or is_private_path(target.shown)

    def _from_owner(self, target: ResolvedPath, kind: str, before: str | None, after: str, owner: Origin) -> str:
        if not after.strip():
            return after
        if not before:
            return wrap(neutralize(after, owner), owner)
        if after.startswith(before):
            added = after[len(before):]
            if not added.strip():
                return after
            return join_append(seal(before), wrap(neutralize(added.lstrip("\n"), owner), owner))
        result, kept, added_at, _ = _wrap_changes(target.shown, kind, before, after, owner)
        _check_audiences(target.shown, kind, before, result, kept, added_at)
        return result

    def keep_history(self, target: ResolvedPath, before: str | None, after: str) -> Path | None:
        """Before MEMORY.md or a memory/private/ note is rewritten, copy its current text aside; returns where (None:
        nothing to keep)."""
        if before is None or before == after or self.history_dir is None:
            return None
        folder: Path | None = self.history_dir
        prefix = "MEMORY-"
        if not is_long_term(target.real, self.root):
            folder, prefix = private_history(self.history_dir, self.root, target.real), ""
        if folder is None:
            return None
        # Every folder made on the way is owner-only (a plain mkdir(parents=True) left <state>/agents/<id> 0755).
        ensure_private_dir(folder)
        os.chmod(self.history_dir, 0o700)
        stamp = self.clock().astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for n in range(1000):
            dest = folder / (f"{prefix}{stamp}.md" if n == 0 else f"{prefix}{stamp}-{n}.md")
            # The copy appears under its name only once it is whole: killed while it was written, no torn
            # "previous version" is left for the owner to restore from.
            if create_new(dest, before.encode("utf-8"), 0o600):
                return dest
        raise PathPolicyError(f"cannot keep the previous version of {target.shown} in {folder}",
                              "clean up the memory-history folder")


PRIVATE_HISTORY = "private"  # memory-history/private/<the note's path under memory/private/>/<UTC time>[-n].md


def private_history(history_dir: Path, workspace: Path, note: Path) -> Path | None:
    """The folder a memory/private/ note's (`note`, its real path) kept versions go in — one folder per note, named by
    its path under memory/private/ — or None when `note` is not such a note."""
    try:
        private = (workspace / "memory" / "private").resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
        return None
    if note.suffix.lower() != ".md" or note == private or not note.is_relative_to(private):
        return None
    return history_dir / PRIVATE_HISTORY / note.relative_to(private)


def _wrap_changes(shown: str, kind: str, before: str, after: str, owner: Origin, *,
                  keep_others: bool = False) -> tuple[str, list[tuple[int, int]], list[int], list[int]]:
    """`after` with each run of lines added or changed relative to `before` escaped and wrapped in an owner
    block, unless it lies inside one of the owner's blocks already. Returns the text, the (old, new) line
    indexes of the lines kept, the new indexes of the added lines, and the new indexes of the changed lines
    left as written. A change touching another audience's block is refused — or, with `keep_others` (a change
    already made), left as written and listed."""
    old, new = before.split("\n"), after.split("\n")
    blocks = [(b, block_audience(b.origin)) for b in origin_blocks(before)]
    out: list[str] = []
    kept: list[tuple[int, int]] = []
    added_at: list[int] = []
    left: list[int] = []
    for tag, i1, i2, j1, j2 in _line_opcodes(old, new):
        if tag == "equal":
            for k in range(i2 - i1):
                kept.append((i1 + k, len(out)))
                out.append(old[i1 + k])
            continue
        # Old lines i1+1..i2 (1-based; none for an insert) go, and new lines come between old lines i1
        # and i2+1. For an insert (i1 == i2) "overlapping" a block means landing inside it.
        if any(aud != OWNER and b.start <= i2 and i1 + 1 <= b.end for b, aud in blocks):
            if not keep_others:
                raise PathPolicyError(f"this {kind} would change a note another chat wrote in {shown}",
                                      "write policy: notes of other chats are theirs; add yours with write and "
                                      "append: true")
            for line in new[j1:j2]:
                if line.strip():
                    left.append(len(out))
                out.append(line)
            continue
        if tag == "delete":
            continue
        lines = [neutralize(line, owner) for line in new[j1:j2]]
        tail: list[str] = []
        if j2 == len(new) and lines and lines[-1] == "":  # the final newline stays after the block
            lines, tail = lines[:-1], [""]
        inside = any(aud == OWNER and b.start <= i1 and i2 + 1 <= b.end for b, aud in blocks)
        wrap_run = not inside and any(line.strip() for line in lines)
        if wrap_run:
            out.append(open_line(owner))
        for line in lines:
            if line.strip():
                added_at.append(len(out))
            out.append(line)
        if wrap_run:
            out.append(CLOSE_LINE)
        out.extend(tail)
    return "\n".join(out), kept, added_at, left


MAX_DIFF_CELLS = 4_000_000  # a middle part larger than this (lines × lines) is diffed with difflib's autojunk


def _line_opcodes(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes from `old` to `new`, the common first and last lines taken off first (the usual
    change — lines added at an end, a line edited — costs a pass over the file); a large middle is diffed
    with autojunk, whose result is a valid edit script, if not always the smallest, and never quadratic in
    the file's repeated lines."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    mid_old, mid_new = old[head:len(old) - tail], new[head:len(new) - tail]
    junk = len(mid_old) * len(mid_new) > MAX_DIFF_CELLS
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, head, 0, head)] if head else []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mid_old, mid_new, autojunk=junk).get_opcodes():
        ops.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        ops.append(("equal", len(old) - tail, len(old), len(new) - tail, len(new)))
    return ops


def _check_audiences(shown: str, kind: str, before: str, after: str, kept: list[tuple[int, int]],
                     added_at: list[int]) -> None:
    """Every kept line keeps its audience and every added line is owner-only, or PathPolicyError."""
    old, new = line_audiences(before, shown), line_audiences(after, shown)
    if (damage := marker_damage(before)) is not None and any(old[i] != new[j] for i, j in kept):
        raise PathPolicyError(f"{shown}: its origin markers do not pair up ({damage}), so whose each line is "
                              f"cannot be told, and this {kind} would decide it",
                              "the owner puts the <!-- origin … --> and <!-- /origin --> lines right by hand "
                              "(an editor); adding with write and append: true still works")
    if any(old[i] != new[j] for i, j in kept):
        raise PathPolicyError(f"this {kind} would change who may read existing lines of {shown} (it removes or "
                              "moves an origin marker)",
                              "write policy: keep the <!-- origin … --> and <!-- /origin --> lines as they are: "
                              "change the lines you mean with edit, or add with write and append: true")
    if any(new[j] not in (OWNER, UNKNOWN) for j in added_at):  # unknown: a damaged file, owner-only to read
        raise PathPolicyError(f"this {kind} would put the main session's text where others may read it in {shown}",
                              "write policy: add notes with write and append: true")
