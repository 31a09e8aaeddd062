"""What a non-owner session sees of the filesystem: its room, plus the owner's instructions and the
memory it may read — the same layout for its file tools and for its sandboxed exec.

Paths are given as the session knows them: relative to the workspace (`notes.txt`, `memory/…`), or
absolute under ROOM_ROOT (`/workspace/notes.txt`), where the session sees its workspace — its sandbox mounts
its view there and its prompt names it, so no answer shows the host's path (the owner's login name, the state
dir's layout); the host path itself is refused like any other. They map to:

    memory/…            the workspace's memory files, as this session's audience may see them (read;
                        writes go through the memory rules: append only, marked with the origin)
    AGENTS.md, SOUL.md… the workspace's instruction files, read-only (ROOM_INSTRUCTIONS; BOOTSTRAP.md, the owner's
                        first-run script, is not there for a room at all: answered as a missing file)
    MEMORY.md           refused (owner-only long-term memory)
    anything else       the session's room (rooms.py), read-write within its quota

Every open is race-free (safe_fs: descriptors, no symlink followed) so a sandboxed command of another
chat cannot redirect a tool call, and refusals name the path the session gave, never a host path.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from hermit.errors import PathPolicyError
from hermit.memory.policy import added_notes
from hermit.memory.policy.audience import Reader, memory_view, visible_text
from hermit.memory.policy.privacy import is_long_term
from hermit.textfile import decode_text
from hermit.tools import safe_fs
from hermit.tools.rooms import Room
from hermit.workspace import BOOTSTRAP_ORDER, MEMORY_FILE

Area = Literal["room", "memory", "instruction", "root"]
MEMORY_DIR = "memory"
# Where a non-owner session sees its workspace (as container sandboxes do): its sandbox's mount point, its HOME,
# the path its prompt names and the one its file tools take besides relative ones.
ROOM_ROOT = "/workspace"
# The instruction files a room sees, read-only: all but the owner's first-run script ("ask who you are talking to,
# fill in USER.md together"), which only the owner's main session gets (agent/context.py FIRST_RUN_FILE).
FIRST_RUN_FILE = "BOOTSTRAP.md"
ROOM_INSTRUCTIONS = tuple(n for n in BOOTSTRAP_ORDER if n != FIRST_RUN_FILE)
OUTSIDE_HINT = f"this chat's workspace is {ROOM_ROOT}: pass a path inside it, or one relative to it"
_SESSION_OF_AGENT = re.compile(r"\bagent:[a-z0-9][a-z0-9_-]{0,63}:(?=[a-z0-9])")  # a session key's `agent:<id>:`
# Where a path named in an error text starts and ends: not inside a longer name (`x/home/…`, `…/workspace-work`,
# `…/main2`); a path may end in `/…`, or before a quote, a space, a bracket or a sentence's full stop.
_PATH_START = r"(?<![\w.~-])"
_PATH_END = r"(?=$|[/\s'\"`:;,)\]}>|]|[.!?]+(?:$|[\s'\"`)\]}>]))"
PRIVACY_HINT = ("privacy rule: MEMORY.md and owner-only notes are only used in the owner's main session, never "
                "in group, channel or other people's chats")


class MemoryView(Protocol):
    """The memory a session may read: one file rendered for it, and every file it may see (for exec)."""

    def render(self, rel: str, data: bytes, st: os.stat_result) -> bytes | None:
        """`data` of the memory or instruction file `rel` (workspace-relative) as this reader may see it; None:
        nothing of it."""
        ...

    def files(self) -> Iterator[tuple[str, bytes]]:
        """(workspace-relative path, rendered bytes) of every memory file under memory/ it may see."""
        ...


@dataclass(frozen=True)
class AudienceMemoryView:
    """Memory as one reader may see it (memory/policy/audience.py): shared text and its own audience's notes, with
    withheld lines replaced so line numbers stay the file's; never MEMORY.md, memory/private/, a hard-linked
    file or one with nothing visible."""

    workspace: Path
    reader: Reader
    extra_paths: tuple[str, ...] = ()

    def render(self, rel: str, data: bytes, st: os.stat_result) -> bytes | None:
        if not rel.lower().endswith(".md"):
            # Memory is Markdown (memory_get, search, the sandbox's view): the owner's writes are owner-only
            # blocks only there, so a JSON or text file under memory/ (the main session's write, the owner's
            # shell, a file kept by hand) is nobody's but the owner's — it was read whole as shared.
            return None
        if b"\x00" in data[:8192]:
            return data  # binary: the read tool refuses it as such
        shown = visible_text(decode_text(data).text, rel, self.reader)
        return None if shown is None else shown.encode("utf-8")

    def files(self) -> Iterator[tuple[str, bytes]]:
        for rel, data in memory_view(self.workspace, self.extra_paths, self.reader):
            if rel.startswith(f"{MEMORY_DIR}/"):  # what lies elsewhere has no place in a room's view
                yield rel, data


# The workspace and room folders themselves are the owner's (a symlinked workspace is the owner's choice):
# they are opened following links; nothing below them is.
_ROOT_FLAGS = (safe_fs._O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class Located:
    area: Area
    rel: str  # inside the room (area room) or the workspace (memory, instruction); "" for the root
    shown: str  # the path as the session sees it (workspace-relative)


@dataclass(frozen=True)
class RoomView:
    """One non-owner session's view: `workspace` is where it appears to be, `room` where its files are."""

    workspace: Path
    room: Room
    memory: MemoryView

    def locate(self, raw: str, what: str = "path") -> Located:
        if not raw or not raw.strip():
            raise PathPolicyError(f"empty {what}", "pass a file path relative to the workspace")
        text = raw.strip()
        if "\x00" in text:
            raise PathPolicyError(f"{what} contains a NUL byte", "pass a plain file path")
        rel = self._relative(text, raw)
        parts = safe_fs.parts_of(rel)
        shown = "/".join(parts) or "."
        if not parts:
            return Located("root", "", ".")
        if parts[0] == MEMORY_DIR:
            return Located("memory", "/".join(parts), shown)
        if len(parts) == 1 and parts[0] == MEMORY_FILE:
            raise PathPolicyError(f"{raw!r} is private long-term memory and is not available in this session",
                                  PRIVACY_HINT)
        if len(parts) == 1 and parts[0] in BOOTSTRAP_ORDER:
            return Located("instruction", parts[0], shown)
        return Located("room", "/".join(parts), shown)

    def _relative(self, text: str, raw: str) -> str:
        if text.startswith("~"):
            text = "." + text[1:] if text == "~" or text.startswith("~/") else text
        if text.startswith("/"):
            # Only ROOM_ROOT: the host's path too would tell a guess at it (a login name) from a wrong one.
            norm = posixpath.normpath(text)
            if norm == ROOM_ROOT:
                return ""
            if norm.startswith(ROOM_ROOT + "/"):
                text = norm[len(ROOM_ROOT) + 1:]
            else:
                raise PathPolicyError(f"{raw!r} is outside the workspace", OUTSIDE_HINT)
        norm = posixpath.normpath(text)
        if norm == ".." or norm.startswith("../"):
            raise PathPolicyError(f"{raw!r} is outside the workspace", OUTSIDE_HINT)
        return "" if norm == "." else norm

    def hide_host(self, text: str, given: Sequence[str] = ()) -> str:
        """`text` (an error's) with the host paths of this view — the room's, the rooms folder's, the agent's folder
        (it is named by the agent id), the workspace's — spelled as the session knows them, and session keys without
        their `agent:<id>:` (the agent id is the owner's name for a setup: agent/context.py). What the session gave
        (`given`: its call's arguments), quoted as the refusals quote it, is repeated as given: a host path it
        guessed right must get the answer a wrong guess gets ("'<its path>' is outside the workspace"), not
        "'/workspace/…' is outside" — a tell, and a contradiction. Only the whole quoted argument: a prefix it gives
        keeps no longer host path in the text from being spelled as the session knows it."""
        kept = sorted({q for g in given if len(g) > 1 and (q := repr(g)) in text}, key=len, reverse=True)
        if kept:
            parts = re.split(f"({'|'.join(map(re.escape, kept))})", text)
            return "".join(p if i % 2 else self.hide_host(p) for i, p in enumerate(parts))
        room, agent_dir = self.room.path, self.room.base.parent
        names = {str(room): ROOM_ROOT, str(self.workspace): ROOM_ROOT, str(self.room.base): "(the rooms folder)",
                 str(agent_dir): "(the assistant's folder)"}
        with contextlib.suppress(OSError, RuntimeError):
            names |= {str(room.resolve()): ROOM_ROOT, str(self.workspace.resolve()): ROOM_ROOT,
                      str(self.room.base.resolve()): "(the rooms folder)",
                      str(agent_dir.resolve()): "(the assistant's folder)"}
        hosts = [h for h in sorted(names, key=len, reverse=True) if h not in ("", "/", ".")]  # the room's first
        if hosts:  # whole paths only: <home>/workspace is also the start of another agent's <home>/workspace-<id>
            whole = re.compile(f"{_PATH_START}(?:{'|'.join(map(re.escape, hosts))}){_PATH_END}")
            text = whole.sub(lambda m: names[m.group()], text)
        return _SESSION_OF_AGENT.sub("", text)

    # ---- reading ----------------------------------------------------------------------------------

    def read(self, loc: Located, max_bytes: int) -> bytes:
        """The bytes of a file as this session may see them; PathPolicyError / FileNotFoundError."""
        if loc.area == "room":
            with self.room.fd() as fd:
                return safe_fs.read_beneath(fd, loc.rel, max_bytes).data
        if loc.area == "memory":
            return self._read_memory(loc, max_bytes)
        if loc.area == "instruction" and loc.rel not in ROOM_INSTRUCTIONS:
            raise FileNotFoundError(f"{loc.shown} is not there")  # BOOTSTRAP.md: the owner's alone, there or not
        with workspace_fd(self.workspace) as ws:
            opened = safe_fs.read_beneath(ws, loc.rel, max_bytes)
        if loc.area == "instruction":  # what the owner's chat wrote in them is withheld like its notes
            return self.memory.render(loc.rel, opened.data, opened.st) or \
                f"[{loc.shown}: nothing in it is shared with this chat]\n".encode()
        raise safe_fs.NotAFile(loc.shown, "a directory")  # the root (the room and memory returned above)

    def _read_memory(self, loc: Located, max_bytes: int) -> bytes:
        """A memory file as this session may see it. Whatever it may see nothing of — an owner-only note, one
        under memory/private/, a folder, a FIFO, a symlink (or a file where the path goes on), a binary or
        unreadable file, MEMORY.md under another name (a hard link: the sandbox's copy of memory leaves it out
        too) — is answered as a missing one (FileNotFoundError): no error tells the session which of the
        owner's names exist. A file it may see keeps the precise reason (too large)."""
        try:
            with workspace_fd(self.workspace) as ws:
                opened = safe_fs.read_beneath(ws, loc.rel, max_bytes)
        except FileNotFoundError:
            raise self._not_shared(loc) from None
        except (OSError, PathPolicyError):
            if any(rel == loc.rel for rel, _ in self.memory.files()):
                raise
            raise self._not_shared(loc) from None
        if is_long_term(self.workspace / loc.rel, self.workspace) or opened.st.st_nlink > 1:
            raise self._not_shared(loc)
        if b"\x00" in opened.data[:8192]:  # never in this session's memory (nor in its sandbox's copy)
            raise self._not_shared(loc)
        shown = self.memory.render(loc.rel, opened.data, opened.st)
        if shown is None:  # the same answer as for a file that is not there (the read tool says both)
            raise self._not_shared(loc)
        return shown

    @staticmethod
    def _not_shared(loc: Located) -> FileNotFoundError:
        return FileNotFoundError(f"{loc.shown} is not there, or nothing in it is shared with this session")

    def read_to_add(self, loc: Located, max_bytes: int) -> bytes:
        """A memory file's whole text, for adding a note at its end (the memory rules let this session only
        add): any file but MEMORY.md or a hard link to it, even one none of whose lines it may see — those
        stay unseen, and its note goes after them."""
        with workspace_fd(self.workspace) as ws:
            opened = safe_fs.read_beneath(ws, loc.rel, max_bytes)
        self._refuse_long_term(loc, opened.st)
        return opened.data

    def _refuse_long_term(self, loc: Located, st: os.stat_result) -> None:
        if is_long_term(self.workspace / loc.rel, self.workspace) or st.st_nlink > 1:
            raise PathPolicyError(f"{loc.shown} may be private long-term memory (it is MEMORY.md or hard-linked)",
                                  PRIVACY_HINT)

    def read_text(self, loc: Located, max_bytes: int) -> str:
        return decode_text(self.read(loc, max_bytes)).text

    def lstat(self, loc: Located) -> os.stat_result | None:
        if loc.area == "root" or (loc.area == "instruction" and loc.rel not in ROOM_INSTRUCTIONS):
            return None
        if loc.area == "room":
            with self.room.fd() as fd:
                return safe_fs.lstat_beneath(fd, loc.rel)
        with workspace_fd(self.workspace) as ws:
            return safe_fs.lstat_beneath(ws, loc.rel)

    def is_dir(self, loc: Located) -> bool:
        """Whether `loc` is a folder for this session. Under memory/ that is memory/ itself and a folder holding
        a memory file it may see (what `listing` and the sandbox's copy of memory show): an owner-only folder,
        such as memory/private/<topic>/, is answered as a missing one, never confirmed by its name."""
        if loc.area == "root" or (loc.area == "memory" and loc.rel == MEMORY_DIR):
            return True
        if loc.area == "memory":
            prefix = loc.rel + "/"
            return any(rel.startswith(prefix) for rel, _ in self.memory.files())
        st = self.lstat(loc)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def listing(self, loc: Located) -> list[str]:
        """Names in a folder of the view (folders end in '/'); memory/ lists only what this session may read."""
        if loc.area == "root":
            with self.room.fd() as fd:
                names = {n + ("/" if d else "") for n, d in safe_fs.list_beneath(fd, "")}
            names -= {MEMORY_DIR, MEMORY_DIR + "/", MEMORY_FILE, *BOOTSTRAP_ORDER}
            names.add(MEMORY_DIR + "/")
            names |= {n for n in ROOM_INSTRUCTIONS if (self.workspace / n).is_file()}
            return sorted(names)
        if loc.area == "memory":
            prefix = loc.rel + "/"
            visible = {rel[len(prefix):].split("/")[0] + ("/" if "/" in rel[len(prefix):] else "")
                       for rel, _ in self.memory.files() if rel.startswith(prefix)}
            return sorted(visible)
        with self.room.fd() as fd:
            return [n + ("/" if d else "") for n, d in safe_fs.list_beneath(fd, loc.rel)]

    # ---- writing (the room only; memory goes through the memory rules in files.py) ------------------

    def write_room(self, loc: Located, data: bytes) -> None:
        if loc.area != "room":
            raise PathPolicyError(f"{loc.shown} cannot be written from this session",
                                  "write policy: this chat writes files in its own room; memory only by appending")
        with self.room.locked() as fd:
            old = safe_fs.lstat_beneath(fd, loc.rel)
            old_size = old.st_blocks * 512 if old is not None and stat.S_ISREG(old.st_mode) else 0
            self.room.check_room_for(len(data) + 4096 - old_size, fd)
            safe_fs.write_beneath(fd, loc.rel, data)

    def write_memory(self, loc: Located, before: str | None, after: str) -> None:
        """Add to a memory file (the memory rules only let this session add: `after` starts with `before`).
        An existing file gets just the addition, appended; a new one is created. Only while this turn's room is still
        where it was (rooms.Room.still_held): a re-aimed job's run in flight adds nothing under its old audience."""
        with self.room.still_held(), workspace_fd(self.workspace) as ws:
            if before is not None and after.startswith(before):
                # new_line: the addition (an origin block) starts a line whatever an editor or shell outside
                # Hermit's lock added to the file since `before` was read.
                safe_fs.append_beneath(ws, loc.rel, after[len(before):].encode("utf-8"),
                                       new_line=not before or before.endswith("\n"))
                added = after[len(before):]
            else:
                safe_fs.write_beneath(ws, loc.rel, after.encode("utf-8"))
                added = after if before is None else ""
        # An owner's command running now must not take this chat's note for its own change (exec_marks).
        added_notes.added(self.workspace / loc.rel, added)


class _WsFd:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.fd = -1

    def __enter__(self) -> int:
        self.fd = os.open(self.workspace, _ROOT_FLAGS)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def workspace_fd(workspace: Path) -> _WsFd:
    return _WsFd(workspace)
