"""Session maintenance for the runtime: the pre-compaction memory flush, compaction, overflow recovery."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermit.agent import flush as flushing
from hermit.agent.compaction import (
    CompactionOutcome,
    Trigger,
    compact_transcript,
    compaction_budget,
    tail_within,
)
from hermit.agent.context import repair_tool_pairs, request_tokens
from hermit.agent.forwarded_words import GuardedTools
from hermit.agent.loop import EventSink, Notice
from hermit.agent.turn import TurnContext, TurnNotes
from hermit.agent.untrusted_carry import owners_messages
from hermit.agent.untrusted_words import UntrustedGuard
from hermit.errors import HermitError
from hermit.messages import AssistantMessage, ImagePart, Sender, UserMessage
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.record import SessionRecord

if TYPE_CHECKING:
    from hermit.agent.runtime import AgentRuntime

log = logging.getLogger("hermit.agent")


def _emit(on_event: EventSink | None, notice: Notice) -> None:
    if on_event is not None:
        on_event(notice)


class SessionMaintenance:
    """Keeps one runtime's sessions within the context window. The caller holds the session's lock."""

    def __init__(self, runtime: AgentRuntime, *, forget_pruning: Callable[[str], None]) -> None:
        self.runtime = runtime
        self._forget_pruning = forget_pruning

    def compact(self, session_key: str, trigger: Trigger, focus: str | None, notes: TurnNotes,
                on_event: EventSink | None, asked_by: Sender | None = None) -> CompactionOutcome:
        rt = self.runtime
        cfg = rt.agent.settings.compaction
        turn = rt.prepare(session_key)
        before = self.reconciled(session_key)
        budget = compaction_budget(cfg, rt.model.profile.context_window)
        outcome = compact_transcript(
            rt.store.open_transcript(turn.record), rt.model,
            fixed_tokens=request_tokens(turn.system.text, turn.schemas, ()), keep_tokens=budget.keep_tokens,
            summary_max_tokens=cfg.summary_max_tokens, context_window=budget.context_window, trigger=trigger,
            focus=focus, asked_by=asked_by, mark=is_main_session_key(session_key))
        if outcome.ok:
            now = rt.clock()
            # The entry is in the transcript: the count after it, whoever saw it first (never counted twice).
            count = (before.compaction_count if before is not None else turn.record.compaction_count) + 1
            record = rt.store.mutate(session_key, lambda r: dataclasses.replace(
                r, compaction_count=max(r.compaction_count, count), context_tokens=outcome.tokens_after,
                updated_at=now))
            outcome = dataclasses.replace(outcome, count=record.compaction_count)
            self._forget_pruning(session_key)  # the prefix changed: old pruning decisions are moot
            if rt.memory is not None:
                rt.memory.mark_dirty()  # the compacted turns stay findable through the sessions source
            notes.compactions += 1
            if trigger != "manual":
                text = f"🧹 Auto-compaction complete (count {record.compaction_count})"
                _emit(on_event, Notice(text))
                if cfg.verbose:
                    notes.notices.append(text)
        elif outcome.status == "failed" and trigger != "manual":
            text = f"⚠️ Auto-compaction failed: {outcome.error}. Nothing was deleted."
            notes.warnings.append(text)
            _emit(on_event, Notice(text, "warning"))
        log.info("compaction of %s (%s): %s %d → %d tokens", session_key, trigger, outcome.status,
                 outcome.tokens_before, outcome.tokens_after)
        return outcome

    def reconciled(self, session_key: str) -> SessionRecord | None:
        """The session's record with its compaction cycle and flush as its transcript tells them (flush.py):
        a process killed between a transcript write and the sessions.json update that follows it left the
        record behind; it is brought in line (and saved) here."""
        rt = self.runtime
        record = rt.store.get(session_key)
        if record is None:
            return None
        state = flushing.cycle_state(rt.store.open_transcript(record).entries(), rt.agent.workspace)

        def truth(r: SessionRecord) -> SessionRecord:
            if state.cycle < r.compaction_count:  # a damaged transcript lost lines: the record knows better
                return r
            flushed = state.cycle if state.flushed else r.memory_flush_compaction_count
            return dataclasses.replace(r, compaction_count=state.cycle, memory_flush_compaction_count=flushed)

        if truth(record) == record:
            return record
        fixed = rt.store.mutate(session_key, truth)
        log.warning("session %s: sessions.json was behind its transcript (a crash between the two writes): "
                    "compactionCount %d → %d, memoryFlushCompactionCount %s → %s", session_key,
                    record.compaction_count, fixed.compaction_count, record.memory_flush_compaction_count,
                    fixed.memory_flush_compaction_count)
        return fixed

    def flush_due(self, session_key: str, *, heartbeat: bool, read_only: bool) -> bool:
        rt = self.runtime
        if not flushing.flush_allowed(rt.agent.settings.compaction, rt.agent.workspace,
                                      heartbeat=heartbeat, read_only=read_only):
            return False
        record = self.reconciled(session_key)
        return record is not None and not flushing.flush_done(record)

    def flush(self, turn: TurnContext, notes: TurnNotes, *, limit_tokens: int | None = None) -> bool:
        """The silent pre-compaction turn; True when it ran to the end. Failures are logged, not raised:
        compaction must still be able to make room."""
        rt = self.runtime
        cfg = rt.agent.settings.compaction.memory_flush
        today = rt.today()
        tools = rt.tools_for(turn.session_key, write_policy=flushing.flush_policy(rt.agent.workspace, today),
                             exec_enabled=False)
        system = flushing.flush_system(turn.system.text, cfg, today, owner=is_main_session_key(turn.session_key))
        if is_main_session_key(turn.session_key):  # its notes are the owner's: no one else's words as theirs
            tools = GuardedTools(tools, turn.history.messages)  # (forwarded_words.py)
            # and the main session's own guard: a note of a page stays the page's (untrusted_carry.py, t4)
            tools = UntrustedGuard(tools, rt.agent.workspace, owners_messages(turn.history.messages),
                                   turn.history.messages, state=rt.agent.sessions_dir.parent)
        flush_turn = TurnContext(turn.session_key, turn.record, tools, turn.system, turn.history)
        history = repair_tool_pairs(turn.history.messages)
        if limit_tokens is not None:
            history = tail_within(history, max(limit_tokens - request_tokens(system, flush_turn.schemas, ()), 0))
        _, prompt = flushing.flush_prompts(cfg, today)

        def usage(message: AssistantMessage) -> None:
            rt.store.add_usage(turn.session_key, input_tokens=message.usage.context_tokens,
                               output_tokens=message.usage.output_tokens)

        def done() -> None:  # this cycle's flush: persisted once its notes landed (flush.py), and at the end
            rt.store.mutate(turn.session_key, lambda r: dataclasses.replace(
                r, memory_flush_compaction_count=r.compaction_count))

        try:
            flushing.run_flush_turn(
                rt.model, tools, lambda ms: rt.build_request(flush_turn, ms, system=system), history, prompt,
                rt.store.open_transcript(turn.record), max_iterations=rt.agent.settings.max_tool_iterations,
                on_usage=usage, on_wrote=done)
        except HermitError as e:
            log.warning("memory flush of %s failed: %s", turn.session_key, e)
            return False
        done()
        notes.flushes += 1
        return True

    def before_turn(self, turn: TurnContext, text: str, *, heartbeat: bool, read_only: bool, notes: TurnNotes,
                    on_event: EventSink | None, images: tuple[ImagePart, ...] = ()) -> TurnContext:
        """Before the turn: flush at the soft threshold, compact over the compaction threshold. The new
        message counts with the photos it brings (pruning's estimate per image)."""
        rt = self.runtime
        cfg = rt.agent.settings.compaction
        if not cfg.enabled:
            return turn
        budget = compaction_budget(cfg, rt.model.profile.context_window)
        tokens = rt.context_tokens(turn, [*turn.history.messages, UserMessage(text, images)])
        # Compaction is lossy, so the flush also runs right before one when the soft threshold was skipped
        # over (a big jump, or reserve_tokens above reserve_tokens_floor); at most one attempt per turn.
        near = tokens >= budget.flush_at or tokens > budget.compact_at
        if near and self.flush_due(turn.session_key, heartbeat=heartbeat, read_only=read_only):
            self.flush(turn, notes)
        if tokens > budget.compact_at and self.compact(turn.session_key, "auto", None, notes, on_event).ok:
            return rt.prepare(turn.session_key, read_only=read_only)
        return turn

    def recover_overflow(self, turn: TurnContext, *, heartbeat: bool, read_only: bool, notes: TurnNotes,
                         on_event: EventSink | None) -> TurnContext | None:
        """The provider said the request is too large: flush (if due), compact once, rebuild the turn."""
        rt = self.runtime
        if not rt.agent.settings.compaction.enabled:
            notes.overflow_failure = "compaction is disabled (agents.defaults.compaction.enabled)"
            return None
        if self.flush_due(turn.session_key, heartbeat=heartbeat, read_only=read_only):
            # The full context just overflowed, so the flush sees only the recent half of the window
            # (including this turn so far).
            fresh = rt.prepare(turn.session_key, read_only=read_only)
            self.flush(fresh, notes, limit_tokens=rt.model.profile.context_window // 2)
        outcome = self.compact(turn.session_key, "overflow", None, notes, on_event)
        if not outcome.ok:
            notes.overflow_failure = outcome.error or "there was nothing old enough to summarise"
            return None
        return rt.prepare(turn.session_key, read_only=read_only)
