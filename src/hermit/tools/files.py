"""The file tools: read (line window), write (whole file) and edit (exact-string replace), under a write policy.

Paths go through the session's PathResolver (workspace-relative, confined in a sandbox). Every
write and edit is first shown to the WritePolicy with the file's content before and after, so a
later restriction — the pre-compaction flush may only *append* to today's daily log — is enforced
here in the tool layer and not by prompt text. Files are replaced atomically (temp file + fsync +
rename, keeping the file's mode), so a crash never leaves half a memory file. `on_change` is called
with each file written, which is how the memory index learns it is dirty.

Before the policy, the memory rules (memory_files.py) apply to every write in every session: daily
logs keep every line (`write` has an `append` mode for adding), MEMORY.md's previous version is
kept, and notes from other people's sessions are marked with their origin.

A session that is not the owner's works through a RoomView (views.py) instead of host paths: its files
live in its room, memory and the instruction files are what it may see of the workspace, and every
open is race-free (safe_fs.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Protocol

from pydantic import Field

from hermit.durable import append_file, write_atomic
from hermit.errors import HermitError, PathPolicyError, ToolError
from hermit.memory.policy.audience import NOT_FOUND_OR_NOT_SHARED
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.textfile import FileTooLarge, NotRegularFile, decode_text, read_regular
from hermit.tools import room_journal
from hermit.tools.base import Tool, make_tool
from hermit.tools.memory_files import MemoryWriteRules, join_append
from hermit.tools.safe_fs import NotAFile
from hermit.tools.sandbox import PathResolver, ResolvedPath
from hermit.tools.views import Located, RoomView

DEFAULT_READ_LINES = 2000
MAX_READ_CHARS = 50_000
MAX_FILE_BYTES = 20_000_000
WriteKind = Literal["write", "edit"]


class WritePolicy(Protocol):
    """Decides whether a write/edit may happen; raises ToolError (or PathPolicyError) naming the rule.

    `before` is the current content (None: the file does not exist), `after` the content the tool
    would leave.
    """

    def check(self, target: ResolvedPath, kind: WriteKind, before: str | None, after: str) -> None: ...


class AllowAllWrites:
    def check(self, target: ResolvedPath, kind: WriteKind, before: str | None, after: str) -> None:
        return None


class ReadOnlyWrites:
    """No file may be written (a read-only session)."""

    def check(self, target: ResolvedPath, kind: WriteKind, before: str | None, after: str) -> None:
        raise PathPolicyError(f"writing {target.shown} is not allowed in this session",
                              "write policy: this session is read-only")


@dataclass(frozen=True)
class AppendOnlyPolicy:
    """Only appending to one file is allowed (the pre-compaction flush's rule, SPEC §9): the new content
    must start with the whole old content, and no other file may be touched."""

    path: Path  # absolute, resolved

    def check(self, target: ResolvedPath, kind: WriteKind, before: str | None, after: str) -> None:
        allowed = Path(os.path.realpath(self.path))
        if target.real != allowed:
            raise PathPolicyError(f"writing {target.shown} is not allowed now",
                                  f"write policy: only appending to {allowed.name} is allowed in this turn")
        if before is not None and not after.startswith(before):
            raise PathPolicyError(f"this {kind} would change existing text of {target.shown}",
                                  "write policy: append only — keep the existing content and add to the end")


def _read_text(target: ResolvedPath) -> str:
    p = target.real
    if not p.exists():
        raise ToolError(f"file not found: {target.shown}", "check the path (relative paths start at the workspace)")
    if p.is_dir():
        names = sorted(c.name + ("/" if c.is_dir() else "") for c in p.iterdir())
        more = f" … and {len(names) - 50} more" if len(names) > 50 else ""
        listing = ", ".join(names[:50]) or "(empty)"
        raise ToolError(f"{target.shown} is a directory; it contains: {listing}{more}",
                        "read a file inside it, or list it with exec")
    try:
        data = read_regular(p, MAX_FILE_BYTES)
    except NotRegularFile as e:  # a FIFO would block the turn forever
        raise ToolError(f"{target.shown} is {e.kind}, not a regular file",
                        "only regular text files can be read") from None
    except FileTooLarge as e:
        raise ToolError(f"{target.shown} is too large to read ({e.size:,} bytes)",
                        "use exec with head, tail or grep to look at parts of it") from None
    except OSError as e:
        raise ToolError(f"cannot read {target.shown}: {e.strerror or e}", "check the file's permissions") from None
    if b"\x00" in data[:8192]:
        raise ToolError(f"{target.shown} looks like a binary file", "only text files can be read")
    return decode_text(data).text


def _one_match(text: str, old: str, shown: str) -> int:
    """The line where `old` occurs in `text`; ToolError unless it occurs exactly once."""
    count = text.count(old)
    if count == 0:
        raise ToolError(f"`old` was not found in {shown} (0 matches)",
                        "read the file and copy the exact text, including whitespace and line breaks")
    if count > 1:
        raise ToolError(f"`old` matches {count} times in {shown}; it must match exactly once",
                        "include more surrounding text in `old` so it is unique")
    return text[: text.index(old)].count("\n") + 1


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=0o600)  # a user's file keeps its permissions; a new one is owner-only


class FileTools:
    """read / write / edit bound to one session's paths, write policy and change callback."""

    def __init__(self, paths: PathResolver, *, policy: WritePolicy | None = None,
                 on_change: Callable[[Path], None] | None = None, rules: MemoryWriteRules | None = None,
                 view: RoomView | None = None) -> None:
        self.paths = paths
        self.policy: WritePolicy = policy or AllowAllWrites()
        self.on_change = on_change
        self.rules = rules or MemoryWriteRules(paths.workspace)
        self.view = view  # a non-owner session: its room and what it may see of the workspace

    def tools(self) -> list[Tool]:
        return [make_tool(self.read, name="read"), make_tool(self.write, name="write"),
                make_tool(self.edit, name="edit")]

    def read(
        self,
        path: Annotated[str, Field(description="File path, relative to the workspace")],
        offset: Annotated[int | None, Field(ge=1, description="First line to read (1-based)")] = None,
        limit: Annotated[int | None, Field(ge=1, description="Maximum number of lines")] = None,
    ) -> str:
        """Read a text file. Long files come back in windows of lines; use offset/limit to page."""
        if self.view is not None:
            loc = self.view.locate(path)  # its refusal repeats the path as given, nothing else
            with self._telling(), self._as_shown("read", path):
                text = self._window(self._view_text(loc), loc.shown, offset, limit)
            return self._told(text)
        target = self.paths.resolve(path)
        return self._window(_read_text(target), target.shown, offset, limit)

    @staticmethod
    def _window(text: str, shown: str, offset: int | None, limit: int | None) -> str:
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        total = len(lines)
        start = (offset or 1) - 1
        if total == 0:
            return "(empty file)"
        if start >= total:
            raise ToolError(f"offset {offset} is past the end of {shown} ({total} lines)",
                            f"use an offset between 1 and {total}")
        end = min(total, start + (limit or DEFAULT_READ_LINES))
        out: list[str] = []
        size = 0
        for i in range(start, end):
            size += len(lines[i]) + 1
            if size > MAX_READ_CHARS and out:
                end = i
                break
            out.append(lines[i])
        body = "\n".join(out)
        if start > 0 or end < total:
            body += f"\n\n[showing lines {start + 1}-{end} of {total}"
            body += f"; use offset={end + 1} to continue]" if end < total else "]"
        return body

    def write(
        self,
        path: Annotated[str, Field(description="File path, relative to the workspace")],
        content: Annotated[str, Field(description="The complete new content of the file")],
        append: Annotated[bool, Field(description="Add content to the end instead (daily logs)")] = False,
    ) -> str:
        """Create or overwrite a file with the given content (parent folders are created)."""
        if self.view is not None:
            loc = self.view.locate(path)  # its refusal repeats the path as given, nothing else
            with self._telling(), self._as_shown("write", path), \
                    self._memory_lock(self._view_target(loc) if loc.area == "memory" else None):
                done = self._view_write(loc, "write", content, append)
            return self._told(done)
        target = self.paths.resolve(path)
        with self._memory_lock(target if self.rules.is_memory_file(target) else None):
            return self._write(target, content, append)

    def _write(self, target: ResolvedPath, content: str, append: bool) -> str:
        if target.real.is_dir():
            raise ToolError(f"{target.shown} is a directory", "write to a file path inside it")
        before = _read_text(target) if target.real.exists() else None
        after = self.rules.prepare(target, "write", before, join_append(before, content) if append else content)
        self.policy.check(target, "write", before, after)
        self._commit(target, before, after)
        verb = "created" if before is None else "appended to" if append else "overwrote"
        size = len(after.encode("utf-8")) - len((before or "").encode("utf-8")) if append else len(after.encode())
        return f"{verb} {target.shown} ({size:,} bytes)"

    def edit(
        self,
        path: Annotated[str, Field(description="File path, relative to the workspace")],
        old: Annotated[str, Field(description="Exact text to replace; must occur exactly once")],
        new: Annotated[str, Field(description="Replacement text")],
    ) -> str:
        """Replace one exact occurrence of `old` with `new` in a file (whitespace must match)."""
        if not old:
            raise ToolError("`old` is empty", "pass the exact text to replace (use write to create a file)")
        if self.view is not None:
            loc = self.view.locate(path)  # its refusal repeats the path as given, nothing else
            with self._telling(), self._as_shown("edit", path), \
                    self._memory_lock(self._view_target(loc) if loc.area == "memory" else None):
                done = self._view_edit(loc, old, new)
            return self._told(done)
        target = self.paths.resolve(path)
        with self._memory_lock(target if self.rules.is_memory_file(target) else None):
            return self._edit(target, old, new)

    def _edit(self, target: ResolvedPath, old: str, new: str) -> str:
        before = _read_text(target)
        line = _one_match(before, old, target.shown)
        after = self.rules.prepare(target, "edit", before, before.replace(old, new, 1))
        self.policy.check(target, "edit", before, after)
        self._commit(target, before, after)
        return f"edited {target.shown}: replaced 1 occurrence at line {line}"

    def _memory_lock(self, target: ResolvedPath | None) -> contextlib.AbstractContextManager[None]:
        """Around a memory file's read-modify-write (`target`; None: not a memory file): the memory-write lock
        of the workspace and of the file's folder, so a note another session, process, agent (an extra path
        two agents share) or the MCP server adds meanwhile is not replaced by this write."""
        if target is None:
            return contextlib.nullcontext()
        return memory_writes_locked(self.rules.workspace, target.real)

    # ---- a non-owner session: through its RoomView ----------------------------------------------------

    @contextlib.contextmanager
    def _as_shown(self, verb: str, path: str) -> Iterator[None]:
        """A non-owner session's errors name paths as it knows them (views.ROOM_ROOT), never the host's: an
        OSError (a full disk, a folder the owner changed) becomes a ToolError without its file name."""
        assert self.view is not None
        try:
            yield
        except HermitError as e:
            e.message, e.hint = self.view.hide_host(e.message), self.view.hide_host(e.hint)
            e.args = (e.message,)
            raise
        except OSError as e:
            why = os.strerror(e.errno) if e.errno is not None else type(e).__name__
            raise ToolError(f"cannot {verb} {path!r}: {why}",
                            "try again later, or tell the owner if it keeps failing") from None

    def _told(self, result: str) -> str:
        """`result`, and after it what this chat is to be told of its room (room_journal.told: a merge a stopped
        Hermit left, finished by this use of the room or an earlier one), as an exec's result says it — once."""
        assert self.view is not None
        notes = room_journal.told(self.view.room)
        return "\n\n".join([result, *notes])

    @contextlib.contextmanager
    def _telling(self) -> Iterator[None]:
        """A refusal says it too (`_told`): the chat hears it in this reply whatever the tool's answer."""
        try:
            yield
        except HermitError as e:
            with contextlib.suppress(OSError, HermitError):
                if notes := self._told(""):
                    e.message = f"{e.message}\n{notes.strip()}"
                    e.args = (e.message,)
            raise

    def _view_text(self, loc: Located) -> str:
        assert self.view is not None
        if self.view.is_dir(loc):
            names = self.view.listing(loc)
            more = f" … and {len(names) - 50} more" if len(names) > 50 else ""
            raise ToolError(f"{loc.shown} is a directory; it contains: {', '.join(names[:50]) or '(empty)'}{more}",
                            "read a file inside it, or list it with exec")
        try:
            data = self.view.read(loc, MAX_FILE_BYTES)
        except FileNotFoundError:
            # A memory file this chat may see nothing of is answered as a missing one: no way to probe names.
            # (memory_get answers the same words: the two tools cannot be played against each other)
            text = NOT_FOUND_OR_NOT_SHARED.format(path=loc.shown) if loc.area == "memory" else f"file not found: {loc.shown}"
            raise ToolError(text, "check the path (relative paths start at the workspace)") from None
        except NotAFile as e:
            raise ToolError(f"{loc.shown} is {e.kind}, not a regular file", "only regular text files can be read") \
                from None
        if b"\x00" in data[:8192]:
            raise ToolError(f"{loc.shown} looks like a binary file", "only text files can be read")
        return decode_text(data).text

    def _view_before(self, loc: Located) -> str | None:
        """The current text of a file the session is about to change (memory: the file as it really is,
        since the memory rules only let this session add to it)."""
        assert self.view is not None
        if loc.area in ("root", "instruction"):
            raise PathPolicyError(f"{loc.shown} holds the owner's instructions and cannot be changed from this "
                                  "session", "write policy: only the main session may change workspace "
                                         "instruction files")
        # What is really there (a write cannot replace a folder); the path alone decided whether it may add.
        st = self.view.lstat(loc)
        if st is None:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{loc.shown} is a directory", "write to a file path inside it")
        try:
            if loc.area == "memory":
                return self._memory_text(loc)
            return self._view_text(loc)
        except FileNotFoundError:
            return None

    def _memory_text(self, loc: Located) -> str:
        assert self.view is not None
        return decode_text(self.view.read_to_add(loc, MAX_FILE_BYTES)).text

    def _view_target(self, loc: Located) -> ResolvedPath:
        assert self.view is not None
        base = self.view.workspace.resolve() if loc.area == "memory" else self.view.room.path
        return ResolvedPath(base / loc.rel, loc.shown)

    def _view_write(self, loc: Located, kind: WriteKind, content: str, append: bool) -> str:
        target = self._view_target(loc)
        if loc.area == "memory":  # decided on the path alone, before anything of the file is looked at
            self.rules.refuse_unless_addable(target)
        before = self._view_before(loc)
        if loc.area == "memory" and before and not append:
            content, append = self._addition(loc, before, content), True
        after = self.rules.prepare(target, kind, before, join_append(before, content) if append else content)
        self.policy.check(target, kind, before, after)
        self._view_commit(loc, target, before, after)
        if loc.area == "memory":  # one answer whether the log was there or not, and whatever it held
            return f"added a note to {loc.shown} ({len(content.encode('utf-8')):,} bytes)"
        verb = "created" if before is None else "appended to" if append else "overwrote"
        size = len(after.encode("utf-8")) - len((before or "").encode("utf-8")) if append else len(after.encode())
        return f"{verb} {loc.shown} ({size:,} bytes)"

    def _addition(self, loc: Located, before: str, content: str) -> str:
        """What a whole-file write to a memory file adds, judged against the file as this session sees it
        (withheld lines as their placeholders; nothing, when it sees none), never against its real text: a
        write that had to keep every real line answered "added" to a right guess of the withheld lines and
        "would change existing text" to a wrong one, one guess at a time."""
        assert self.view is not None
        st = self.view.lstat(loc)
        rendered = self.view.memory.render(loc.rel, before.encode("utf-8"), st) if st is not None else None
        shown = decode_text(rendered).text if rendered is not None else ""
        shown = shown.removesuffix("\n")  # as the read tool shows it; the note starts on a line of its own anyway
        if not content.startswith(shown):
            raise PathPolicyError(f"this write would change existing text of {loc.shown}",
                                  "write policy: sessions other than the owner's main session may only add notes "
                                  "to memory files; use write with append: true")
        return content[len(shown):]

    def _view_edit(self, loc: Located, old: str, new: str) -> str:
        target = self._view_target(loc)
        if loc.area == "memory":  # refused before `old` is matched against lines this session cannot see
            self.rules.refuse_edit(target, in_memory_dir=True)
        before = self._view_before(loc)
        if before is None:
            raise ToolError(f"file not found: {loc.shown}", "check the path (relative paths start at the workspace)")
        line = _one_match(before, old, loc.shown)
        after = self.rules.prepare(target, "edit", before, before.replace(old, new, 1))
        self.policy.check(target, "edit", before, after)
        self._view_commit(loc, target, before, after)
        return f"edited {loc.shown}: replaced 1 occurrence at line {line}"

    def _view_commit(self, loc: Located, target: ResolvedPath, before: str | None, after: str) -> None:
        assert self.view is not None
        if loc.area == "memory":
            self.view.write_memory(loc, before, after)
        else:
            self.view.write_room(loc, after.encode("utf-8"))
        self._changed(target.real)

    def _commit(self, target: ResolvedPath, before: str | None, after: str) -> None:
        self.rules.keep_history(target, before, after)
        if before and after.startswith(before) and target.real.is_file():
            # An addition (a note at the end of a daily log): appended, so a note another session added
            # since `before` was read is kept rather than replaced. One that starts a line (its origin
            # marker) starts it whatever an editor or shell outside Hermit's lock added meanwhile.
            append_file(target.real, after[len(before):].encode("utf-8"), new_line=before.endswith("\n"))
        else:
            _write_atomic(target.real, after)
        self._changed(target.real)

    def _changed(self, path: Path) -> None:
        if self.on_change is not None:
            self.on_change(path)
