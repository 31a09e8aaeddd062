"""How a runtime's sessions end: /new and /reset (the session-memory hook saving the old session to memory first), an
expiry by the reset policy, the `ended` line an old transcript gets (its reason, shown with the web app's past
sessions), and a message its sender deleted on the platform retracted from the session's current or ended
transcripts, from the notes its flushes wrote and from the file /new saved (deleted_copies.py). Split from
agent/runtime.py, which holds the session's lock around each of these.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from hermit.agent.context import includes_long_term_memory, load_history
from hermit.agent.deleted_copies import scrub_saved_session, scrub_turn_notes
from hermit.agent.lifecycle import SessionStart, check_expiry
from hermit.agent.session_memory import save_session_memory
from hermit.agent.turn import TurnNotes
from hermit.agent.untrusted_carry import note_saved
from hermit.errors import HermitError
from hermit.memory.policy.audience import owner_origin
from hermit.sessions.entries import ENDED_TYPE
from hermit.sessions.record import SessionRecord
from hermit.sessions.retraction import Remove, retract_ended, retract_in
from hermit.sessions.scrub import Deleted
from hermit.sessions.transcript import MessageEntry

if TYPE_CHECKING:
    from hermit.agent.runtime import AgentRuntime

log = logging.getLogger("hermit.agent")


class SessionEnds:
    """Ends one runtime's sessions. The caller (AgentRuntime) holds the session's lock."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    def reset(self, session_key: str, reason: str, notes: TurnNotes) -> SessionStart:
        """/new, /reset or a reset trigger: save the end of the old session to memory (the session-memory
        hook), mark its transcript ended and start a fresh one."""
        rt = self.runtime
        rt._check_key(session_key)
        old = rt.store.get(session_key)
        saved: Path | None = None
        hook = rt.agent.settings.session.hooks.session_memory
        private = includes_long_term_memory(session_key)
        # Another person's session writes memory like any of its tools would: marked, or not at all.
        allowed = private or rt.agent.settings.sandbox.memory_writes == "all"
        if old is not None and hook.enabled and allowed:
            try:
                saved = save_session_memory(
                    transcript=rt.store.transcript_path(old.session_id), record=old,
                    workspace=rt.agent.workspace, cfg=hook, model=rt.model, now=rt.clock(),
                    tz=rt.timezone, tz_name=rt.timezone_name, reason=reason,
                    origin=owner_origin(session_key) if private else rt._write_origin(session_key, dm_only=True))
                if saved is not None and private:  # what it saved of a page stays the page's (untrusted_carry, t11)
                    note_saved(rt._agent_dir, saved, load_history(rt.store.open_transcript(old)).messages)
            except (HermitError, OSError) as e:  # the new session must start anyway
                notes.warnings.append(f"could not save the last session to memory: {e}")
                log.warning("session-memory hook failed for %s: %s", session_key, e)
            if saved is not None and rt.memory is not None:
                rt.memory.mark_dirty()
        self._mark_ended(old, reason)
        record = rt.new_session(session_key)
        notes.reset = reason
        return SessionStart(record.session_id, old.session_id if old else None, reason, saved)

    def expire(self, session_key: str, notes: TurnNotes) -> None:
        """A new session when the reset policy says the old one expired (never for a heartbeat)."""
        rt = self.runtime
        record = rt.store.get(session_key)
        if record is None:
            return
        check = check_expiry(record, rt.agent.settings.session, rt.clock(), rt.timezone)
        if check.expired:
            log.info("session %s expired (%s); starting a new one", session_key, check.reason)
            self._mark_ended(record, f"{check.reason} reset")
            rt.new_session(session_key)
            notes.reset = check.reason

    def _mark_ended(self, record: SessionRecord | None, reason: str) -> None:
        """The old transcript's last line says why it ended (shown with the web app's past sessions)."""
        if record is None:
            return
        try:
            self.runtime.store.open_transcript(record).append_custom(ENDED_TYPE, {"reason": reason})
        except (HermitError, OSError) as e:  # the new session starts anyway; the reason is then inferred
            log.warning("could not record why session %s ended: %s", record.session_id, e)

    def retract(self, session_key: str, ref: str, remove: Remove | None) -> bool:
        """AgentRuntime.retract's work, under the session's lock: the current transcript first, then the ended ones."""
        store = self.runtime.store
        record = store.get(session_key)
        if record is None:
            return False
        if retract_in(store.open_transcript(record), ref, remove):
            return True
        return self.retract_ended(session_key, ref, remove, current=record.session_id)

    def retract_ended(self, session_key: str, ref: str, remove: Remove | None, *, current: str | None) -> bool:
        """Retract `ref` in the key's ended transcripts that hold it (sessions/retraction.py), and where an ended
        session was saved to memory at /new (session_memory.scrub_saved). True when one held it."""
        rt = self.runtime

        def saved(session_id: str, entries: list[MessageEntry]) -> None:  # by its transcript's rule (deleted_copies)
            scrub_saved_session(rt.agent.workspace, rt.store.transcript_path(session_id), session_id, ref, entries,
                                rt.timezone, self._changed)

        return retract_ended(rt.store, session_key, ref, remove, current=current, saved=saved) > 0

    def reach(self, session_key: str | None, deleted: Deleted) -> None:
        """A deleted message's copies in the notes `session_key`'s flush wrote (agent/flush.py), scrubbed before
        its transcript is (sessions/retraction.py), and the index re-synced so that search no longer finds them."""
        if session_key is not None:
            scrub_turn_notes(self.runtime.agent.workspace, session_key, deleted, self._changed)

    def _changed(self) -> None:
        if self.runtime.memory is not None:
            self.runtime.memory.mark_dirty()
