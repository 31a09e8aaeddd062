"""Confinement of one agent's sessions: which are sandboxed, which room and view a non-owner session gets,
and which OS sandbox its exec runs in.

- The owner's main session works in the workspace itself; with `sandbox.mode: all` its tools are
  confined to the workspace and its exec runs in the bind-mode sandbox (memory/ and the instruction
  files read-only).
- Every other session (groups, contacts' DMs, cron jobs, sub-agents) is sandboxed unless
  `sandbox.mode: off`: its files are its room (tools/rooms.py), it sees the instruction files and the
  memory its audience may read, and its exec runs in room mode (tools/room_sandbox.py) — or, on macOS,
  the bind-mode sandbox confined to the room. Without a usable OS sandbox it gets no exec.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hermit.config.load import AgentConfig
from hermit.errors import HermitError
from hermit.memory.policy.audience import reader_for_session
from hermit.sessions.keys import is_main_session_key
from hermit.tools import room_journal
from hermit.tools.bind_guard import recover
from hermit.tools.os_sandbox import Backend, OsSandbox, SandboxLimits
from hermit.tools.os_sandbox import detect as detect_sandbox
from hermit.tools.room_sandbox import RoomSandbox, sandbox_uid
from hermit.tools.rooms import Room, room_audience
from hermit.tools.views import AudienceMemoryView, MemoryView, RoomView
from hermit.workspace import BOOTSTRAP_ORDER, MEMORY_FILE

log = logging.getLogger("hermit.rooms")
MemoryViewFactory = Callable[[str], MemoryView]  # session key -> what of memory it may read


@dataclass
class Confinement:
    agent: AgentConfig
    agent_dir: Path  # <state>/agents/<agentId>
    backend: Backend | None = None  # None: detect the machine's OS sandbox on first use
    memory_view: MemoryViewFactory | None = None
    _rooms: dict[str, Room] = field(default_factory=dict)
    _slots: threading.BoundedSemaphore | None = None
    _news: dict[str, list[str]] = field(default_factory=dict)  # what each session's turn prompt said (room_news)
    _held: dict[str, Room | None] = field(default_factory=dict)  # the room each session's running turn holds (turn)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def command_slots(self) -> threading.BoundedSemaphore:
        """The agent's sandboxed commands running at once, at most `sandbox.max_commands` (one per chat would be
        unbounded: every thread or topic of a group is a session), shared by all its chats and only theirs."""
        if self._slots is None:
            self._slots = threading.BoundedSemaphore(self.agent.settings.sandbox.max_commands)
        return self._slots

    def sandboxed(self, session_key: str) -> bool:
        mode = self.agent.settings.sandbox.mode
        return mode == "all" or (mode == "non-main" and not is_main_session_key(session_key))

    def roomed(self, session_key: str) -> bool:
        """A sandboxed session that is not the owner's: it works in a room."""
        return self.sandboxed(session_key) and not is_main_session_key(session_key)

    @property
    def limits(self) -> SandboxLimits:
        s = self.agent.settings.sandbox
        return SandboxLimits(memory_mb=s.exec_memory_mb, max_file_mb=s.exec_max_file_mb,
                             max_processes=s.exec_max_processes, tmp_mb=s.exec_tmp_mb)

    def _backend(self) -> Backend:
        if self.backend is None:
            self.backend = detect_sandbox(sandbox_uid=self.agent.settings.sandbox.uid)
        return self.backend

    def room(self, session_key: str) -> Room:
        audience = room_audience(session_key)
        room = self._rooms.get(audience)
        if room is None:
            room = Room(self.agent_dir / "rooms", audience, self.agent.settings.sandbox.room_mb << 20)
            self._rooms[audience] = room
        return room

    def room_news(self, session_key: str) -> str:
        """What a roomed session's turn is to be told of its room in its prompt, in fixed words (room_journal.news:
        a merge a stopped Hermit left, finished); "" for none. The turn's end removes it (`room_news_said`)."""
        if not self.roomed(session_key):
            return ""
        try:
            notes = room_journal.news(self.room(session_key))
        except (OSError, HermitError) as e:  # the room's next tool use still says it
            log.warning("what was finished in a room could not be read for its turn's prompt: %s", e)
            return ""
        with self._lock:
            self._news[session_key] = notes
        return room_journal.plainly(notes)

    def room_news_said(self, session_key: str) -> None:
        """The turn whose prompt said `room_news` is over: that is not said again (a tool may have said it already)."""
        with self._lock:
            notes = self._news.pop(session_key, [])
        try:
            room_journal.said(self.room(session_key), notes)
        except (OSError, HermitError) as e:
            log.warning("what was said of a room could not be cleared (its next turn says it again): %s", e)

    @contextlib.contextmanager
    def turn(self, session_key: str) -> Iterator[None]:
        """One turn of the session (the runtime's session lock): every view taken meanwhile — the turn's own, its
        pre-compaction flush's, the one it is rebuilt with after a compaction — holds the one room its first took. Each
        took a hold of its own: a run in flight when its job was re-aimed wrote, after a compaction, into the room made
        under the name for the new audience, and its flush added a note under the job's audience after the retire."""
        with self._lock:
            self._held[session_key] = None
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(session_key, None)

    def _turn_room(self, session_key: str) -> Room:
        with self._lock:
            if session_key not in self._held:  # not within a turn (a context report): a hold of its own
                return self.room(session_key).for_turn()
            held = self._held[session_key]
            if held is None:
                held = self._held[session_key] = self.room(session_key).for_turn()
            return held

    def view(self, session_key: str) -> RoomView | None:
        """The view of a roomed session (None: the session works in the workspace itself)."""
        if not self.roomed(session_key):
            return None
        memory = self.memory_view(session_key) if self.memory_view is not None else AudienceMemoryView(
            self.agent.workspace, reader_for_session(session_key),
            tuple(self.agent.settings.memory_search.extra_paths))
        # The turn's own hold of the room: moved away meanwhile (a re-aimed job's, retired), it is not followed to
        # the next room of its name (rooms.Room.for_turn) — nor by a view the same turn takes later (`turn`).
        return RoomView(self.agent.workspace, self._turn_room(session_key), memory)

    def os_sandbox(self, session_key: str, view: RoomView | None) -> OsSandbox | RoomSandbox | None:
        """Where a sandboxed session's exec runs; None when it is not sandboxed or no sandbox is usable."""
        if not self.sandboxed(session_key):
            return None
        backend = self._backend()
        if not backend.available:
            return None
        if view is None:  # the owner's main session under sandbox.mode: all
            ws = self.agent.workspace
            # MEMORY.md too: the write tool keeps its previous version in memory-history/, a command would not.
            protected = (ws / "memory", ws / MEMORY_FILE, *(ws / n for n in BOOTSTRAP_ORDER))
            guarded = (*protected, ws / "inbox")
            journals = self.agent_dir / "sandbox"
            kept_out = tuple(ws / n for n in BOOTSTRAP_ORDER)
            recover(journals, guarded, kept_out)  # what a command left when its Hermit was killed: undone first
            return OsSandbox(backend, ws, protected, self.limits, guarded, kept_out, journals)
        if backend.name == "bwrap":
            return RoomSandbox(backend, view, self.limits, self.agent_dir / "sandbox",
                               sandbox_uid(self.agent.settings.sandbox.uid), self.command_slots())
        with view.room.fd():  # sandbox-exec confines to a real folder: the room itself (created here)
            pass
        return OsSandbox(backend, view.room.path, (), self.limits)
