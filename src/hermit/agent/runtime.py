"""AgentRuntime: one configured agent — model, tools, memory, sessions — answering one turn at a time.

A turn: handle `/new`, `/reset` and `/compact`; start a new session when the reset policy says the
old one expired; open the session, decide its sandbox and privacy from the key, build the tools and
the system prompt, load the history; give the agent its silent memory flush and compact when the
context nears the window; run the loop (recording every message in the transcript and usage in
sessions.json), recovering once from a context overflow by flush → compact → retry; and return the
reply with `delivered=False` for a silent NO_REPLY. Every request is built in `build_request`, which
prunes old tool output (SPEC §10) in what is sent, never in the transcript.

Composition roots (the CLI, later the gateway) build the model and the memory service from config
and pass them in; nothing here reads the environment or config files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from functools import cached_property
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hermit.agent import flush as flushing
from hermit.agent.compaction import (
    CompactionOutcome,
    Trigger,
    compact_transcript,
    compaction_budget,
    tail_within,
)
from hermit.agent.context import (
    ContextReport,
    History,
    PromptInputs,
    SystemPrompt,
    build_system_prompt,
    history_block,
    includes_long_term_memory,
    is_silent,
    load_history,
    message_block,
    repair_tool_pairs,
    request_tokens,
    tools_block,
)
from hermit.agent.lifecycle import SessionStart, check_expiry, parse_compact_command
from hermit.agent.loop import EventSink, LoopResult, Notice, run_loop
from hermit.agent.session_memory import save_session_memory
from hermit.config.load import AgentConfig
from hermit.errors import ConfigError, ContextOverflowError, HermitError, SessionError
from hermit.memory.service import MemoryService
from hermit.messages import AssistantMessage, Message, Usage, UserMessage
from hermit.models.base import Model, ModelRequest, ToolSchema
from hermit.sessions.keys import agent_id_of, is_main_session_key
from hermit.sessions.pruning import PruneResult, PruningMode, prune_for_request, resolve_pruning_mode
from hermit.sessions.reset import parse_reset_command
from hermit.sessions.store import SessionRecord, SessionStore
from hermit.sessions.transcript import Clock, utc_now
from hermit.tools import ReadOnlyWrites, ToolRunner, WritePolicy, build_toolset
from hermit.tools.base import ToolRun
from hermit.workspace import ensure_workspace

log = logging.getLogger("hermit.agent")


@dataclass(frozen=True)
class ToolCallRecord:
    name: str
    arguments: dict[str, Any]
    result: str
    is_error: bool
    seconds: float

    @classmethod
    def from_run(cls, run: ToolRun) -> ToolCallRecord:
        return cls(run.call.name, dict(run.call.arguments), run.result.content, run.result.is_error, run.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "isError": self.is_error,
                "result": self.result, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class TurnResult:
    reply: str
    delivered: bool
    tool_calls: tuple[ToolCallRecord, ...]
    usage: Usage
    session_key: str
    session_id: str
    iterations: int
    stopped: str = "done"
    warnings: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()  # e.g. "🧹 Auto-compaction complete (count 2)" with compaction.verbose
    compactions: int = 0
    flushes: int = 0
    reset: str | None = None  # why a new session started before this turn: /new, /reset, daily, idle

    def to_dict(self) -> dict[str, Any]:
        return {"reply": self.reply, "delivered": self.delivered, "sessionKey": self.session_key,
                "sessionId": self.session_id, "toolCalls": [c.to_dict() for c in self.tool_calls],
                "usage": self.usage.to_dict(), "iterations": self.iterations, "stopped": self.stopped,
                "warnings": list(self.warnings), "notices": list(self.notices),
                "compactions": self.compactions, "flushes": self.flushes, "reset": self.reset}


@dataclass(frozen=True)
class TurnContext:
    """What stays fixed during one turn: the session, its tools and its system prompt."""

    session_key: str
    record: SessionRecord
    tools: ToolRunner
    system: SystemPrompt
    history: History

    @cached_property
    def schemas(self) -> tuple[ToolSchema, ...]:
        return self.tools.schemas()

    @cached_property
    def tools_text(self) -> str:
        return json.dumps([{"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                           for t in self.schemas], ensure_ascii=False)


@dataclass
class TurnNotes:
    """What happened around a turn besides the reply."""

    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    compactions: int = 0
    flushes: int = 0
    reset: str | None = None
    overflow_failure: str | None = None


@dataclass(frozen=True)
class _PruneMemo:
    """The previous request's pruning and when it touched the prompt cache, per session."""

    session_id: str
    previous: PruneResult | None = None
    touched: datetime | None = None


def resolve_timezone(name: str | None, now: datetime) -> tuple[tzinfo, str]:
    """The configured IANA zone, else the machine's local zone."""
    if name:
        try:
            return ZoneInfo(name), name
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ConfigError(f"unknown time zone {name!r}",
                              "set agents.defaults.timezone to an IANA name like Europe/Paris") from e
    local = now.astimezone().tzinfo
    assert local is not None
    return local, local.tzname(None) or "local time"


def _emit(on_event: EventSink | None, notice: Notice) -> None:
    if on_event is not None:
        on_event(notice)


class AgentRuntime:
    def __init__(
        self,
        agent: AgentConfig,
        model: Model,
        *,
        memory: MemoryService | None = None,
        store: SessionStore | None = None,
        clock: Clock = utc_now,
        exec_env: Mapping[str, str] | None = None,
        home: Path | None = None,
        fsync: bool = True,
    ) -> None:
        self.agent = agent
        self.model = model
        self.memory = memory
        self.clock = clock
        self.exec_env = exec_env
        self.home = home
        ensure_workspace(agent.workspace)
        self.store = store or SessionStore(agent.sessions_dir, clock=clock, cwd=agent.workspace, fsync=fsync)
        self.timezone, self.timezone_name = resolve_timezone(agent.settings.timezone, clock())
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._prune_memo: dict[str, _PruneMemo] = {}

    # ---- policy -----------------------------------------------------------------------------------

    def sandboxed(self, session_key: str) -> bool:
        mode = self.agent.settings.sandbox.mode
        return mode == "all" or (mode == "non-main" and not is_main_session_key(session_key))

    def pruning_mode(self) -> PruningMode:
        return resolve_pruning_mode(self.agent.settings.context_pruning.mode, self.model.profile.cache_ttl_seconds)

    def tools_for(self, session_key: str, *, write_policy: WritePolicy | None = None,
                  exec_enabled: bool = True) -> ToolRunner:
        """The session's tools; a restricted turn (the pre-compaction flush, a read-only session) passes a
        write policy and turns exec off, since a shell could write around the policy. tool_output is
        offered when pruning can trim results."""
        transcript = (lambda: self._transcript_path(session_key)) if self.pruning_mode() != "off" else None
        return build_toolset(
            self.agent.workspace,
            confined=self.sandboxed(session_key),
            memory=self.memory,
            write_policy=write_policy,
            on_change=self._file_changed,
            exec_env=self.exec_env,
            exec_enabled=exec_enabled,
            home=self.home,
            private_memory=includes_long_term_memory(session_key),
            transcript=transcript,
        )

    def _transcript_path(self, session_key: str) -> Path:
        record = self.store.get(session_key)
        if record is None:
            raise SessionError(f"no session {session_key!r}", "send a message first")
        return self.store.transcript_path(record.session_id)

    def _file_changed(self, path: Path) -> None:
        if self.memory is not None and path.suffix.lower() == ".md":
            self.memory.mark_dirty()  # the next memory_search re-indexes before searching

    def _check_key(self, session_key: str) -> None:
        owner = agent_id_of(session_key)
        if owner is not None and owner != self.agent.id:
            raise SessionError(f"session {session_key!r} belongs to agent {owner!r}, not {self.agent.id!r}",
                               f"use a key like agent:{self.agent.id}:main, or run with --agent {owner}")

    def today(self) -> str:
        return self.clock().astimezone(self.timezone).date().isoformat()

    # ---- context ----------------------------------------------------------------------------------

    def system_prompt(self, session_key: str, tools: ToolRunner, *, compacted: bool = False) -> SystemPrompt:
        s = self.agent.settings
        return build_system_prompt(PromptInputs(
            agent_id=self.agent.id,
            session_key=session_key,
            workspace=self.agent.workspace,
            now=self.clock(),
            timezone=self.timezone,
            timezone_name=self.timezone_name,
            tools=tools.schemas(),
            sandboxed=self.sandboxed(session_key),
            model_ref=self.model.profile.ref,
            bootstrap_max_chars=s.bootstrap_max_chars,
            bootstrap_total_max_chars=s.bootstrap_total_max_chars,
            compacted=compacted,
            sessions_searchable=self.memory is not None and self.memory.sessions_dir is not None,
        ))

    def build_request(self, turn: TurnContext, messages: Sequence[Message], *,
                      system: str | None = None) -> ModelRequest:
        """The one place a request is made from the turn's messages: tool pairs repaired, old tool output
        pruned (the transcript is never touched)."""
        text = turn.system.text if system is None else system
        sent = self._prune(turn, tuple(repair_tool_pairs(messages)), text, commit=True)
        return ModelRequest(system=text, messages=sent, tools=turn.schemas)

    def _prune(self, turn: TurnContext, messages: tuple[Message, ...], system: str, *,
               commit: bool) -> tuple[Message, ...]:
        if self.pruning_mode() == "off":
            return messages
        memo = self._prune_memo.get(turn.session_key)
        if memo is None or memo.session_id != turn.record.session_id:
            memo = _PruneMemo(turn.record.session_id)
        now = self.clock()
        result = prune_for_request(
            messages, cfg=self.agent.settings.context_pruning, context_window_tokens=self.model.profile.context_window,
            profile_cache_ttl=self.model.profile.cache_ttl_seconds, last_cache_touch=memo.touched, now=now,
            system_prompt=system + turn.tools_text, previous=memo.previous)
        if commit:
            self._prune_memo[turn.session_key] = _PruneMemo(turn.record.session_id, result, now)
        return result.messages

    def context_tokens(self, turn: TurnContext, messages: Sequence[Message]) -> int:
        """Estimated size of the request these messages would make now (pruning applied)."""
        sent = self._prune(turn, tuple(repair_tool_pairs(messages)), turn.system.text, commit=False)
        return request_tokens(turn.system.text, turn.schemas, sent)

    def prepare(self, session_key: str, *, read_only: bool = False) -> TurnContext:
        self._check_key(session_key)
        opened = self.store.get_or_create(session_key)
        if opened.created:
            self._sync_memory_on_start()
        transcript = self.store.open_transcript(opened.record)
        history = load_history(transcript)
        for problem in history.problems:
            log.warning("%s", problem)
        tools = (self.tools_for(session_key, write_policy=ReadOnlyWrites(), exec_enabled=False) if read_only
                 else self.tools_for(session_key))
        system = self.system_prompt(session_key, tools, compacted=history.summary is not None)
        return TurnContext(session_key, opened.record, tools, system, history)

    def _sync_memory_on_start(self) -> None:
        if self.memory is None or not self.memory.cfg.sync.on_session_start:
            return
        try:
            self.memory.sync(blocking=False)
        except HermitError as e:  # memory trouble must not stop the conversation; search will say so
            log.warning("memory sync at session start failed: %s", e)

    def context_report(self, session_key: str, text: str = "") -> ContextReport:
        turn = self.prepare(session_key)
        blocks = [*turn.system.blocks, tools_block(turn.schemas),
                  history_block(repair_tool_pairs(turn.history.messages))]
        if text:
            blocks.append(message_block(UserMessage(text)))
        return ContextReport(tuple(blocks))

    # ---- sessions ---------------------------------------------------------------------------------

    def session(self, session_key: str) -> SessionRecord | None:
        return self.store.get(session_key)

    def new_session(self, session_key: str) -> SessionRecord:
        """Start a fresh session (new sessionId and transcript) for the key; the old one stays on disk."""
        self._check_key(session_key)
        opened = self.store.new_session(session_key)
        self._prune_memo.pop(session_key, None)
        self._sync_memory_on_start()
        return opened.record

    def reset_session(self, session_key: str, command: str = "/new") -> SessionStart:
        """/new or /reset: save the end of the old session to memory (the session-memory hook), then
        start a fresh one."""
        with self._lock(session_key):
            return self._reset(session_key, command, TurnNotes())

    def _reset(self, session_key: str, reason: str, notes: TurnNotes) -> SessionStart:
        self._check_key(session_key)
        old = self.store.get(session_key)
        saved: Path | None = None
        hook = self.agent.settings.session.hooks.session_memory
        if old is not None and hook.enabled:
            try:
                saved = save_session_memory(
                    transcript=self.store.transcript_path(old.session_id), record=old,
                    workspace=self.agent.workspace, cfg=hook, model=self.model, now=self.clock(),
                    tz=self.timezone, tz_name=self.timezone_name, reason=reason)
            except (HermitError, OSError) as e:  # the new session must start anyway
                notes.warnings.append(f"could not save the last session to memory: {e}")
                log.warning("session-memory hook failed for %s: %s", session_key, e)
            if saved is not None and self.memory is not None:
                self.memory.mark_dirty()
        record = self.new_session(session_key)
        notes.reset = reason
        return SessionStart(record.session_id, old.session_id if old else None, reason, saved)

    def _expire(self, session_key: str, notes: TurnNotes) -> None:
        record = self.store.get(session_key)
        if record is None:
            return
        check = check_expiry(record, self.agent.settings.session, self.clock(), self.timezone)
        if check.expired:
            log.info("session %s expired (%s); starting a new one", session_key, check.reason)
            self.new_session(session_key)
            notes.reset = check.reason

    def _lock(self, session_key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(session_key, threading.Lock())

    # ---- flush and compaction ---------------------------------------------------------------------

    def compact(self, session_key: str, focus: str | None = None) -> CompactionOutcome:
        """Manual compaction (/compact [focus])."""
        with self._lock(session_key):
            return self._compact(session_key, "manual", focus or None, TurnNotes(), None)

    def _compact(self, session_key: str, trigger: Trigger, focus: str | None, notes: TurnNotes,
                 on_event: EventSink | None) -> CompactionOutcome:
        cfg = self.agent.settings.compaction
        turn = self.prepare(session_key)
        budget = compaction_budget(cfg, self.model.profile.context_window)
        outcome = compact_transcript(
            self.store.open_transcript(turn.record), self.model,
            fixed_tokens=request_tokens(turn.system.text, turn.schemas, ()), keep_tokens=budget.keep_tokens,
            summary_max_tokens=cfg.summary_max_tokens, context_window=budget.context_window, trigger=trigger,
            focus=focus)
        if outcome.ok:
            now = self.clock()
            record = self.store.mutate(session_key, lambda r: dataclasses.replace(
                r, compaction_count=r.compaction_count + 1, context_tokens=outcome.tokens_after, updated_at=now))
            outcome = dataclasses.replace(outcome, count=record.compaction_count)
            self._prune_memo.pop(session_key, None)  # the prefix changed: old pruning decisions are moot
            if self.memory is not None:
                self.memory.mark_dirty()  # the compacted turns stay findable through the sessions source
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

    def _flush_due(self, session_key: str, *, heartbeat: bool, read_only: bool) -> bool:
        if not flushing.flush_allowed(self.agent.settings.compaction, self.agent.workspace,
                                      heartbeat=heartbeat, read_only=read_only):
            return False
        record = self.store.get(session_key)
        return record is not None and not flushing.flush_done(record)

    def _flush(self, turn: TurnContext, notes: TurnNotes, *, limit_tokens: int | None = None) -> bool:
        """The silent pre-compaction turn; True when it ran to the end. Failures are logged, not raised:
        compaction must still be able to make room."""
        cfg = self.agent.settings.compaction.memory_flush
        today = self.today()
        tools = self.tools_for(turn.session_key, write_policy=flushing.flush_policy(self.agent.workspace, today),
                               exec_enabled=False)
        system = flushing.flush_system(turn.system.text, cfg, today)
        flush_turn = TurnContext(turn.session_key, turn.record, tools, turn.system, turn.history)
        history = repair_tool_pairs(turn.history.messages)
        if limit_tokens is not None:
            history = tail_within(history, max(limit_tokens - request_tokens(system, flush_turn.schemas, ()), 0))
        _, prompt = flushing.flush_prompts(cfg, today)

        def usage(message: AssistantMessage) -> None:
            self.store.add_usage(turn.session_key, input_tokens=message.usage.context_tokens,
                                 output_tokens=message.usage.output_tokens)

        try:
            flushing.run_flush_turn(
                self.model, tools, lambda ms: self.build_request(flush_turn, ms, system=system), history, prompt,
                self.store.open_transcript(turn.record), max_iterations=self.agent.settings.max_tool_iterations,
                on_usage=usage)
        except HermitError as e:
            log.warning("memory flush of %s failed: %s", turn.session_key, e)
            return False
        self.store.mutate(turn.session_key, lambda r: dataclasses.replace(
            r, memory_flush_compaction_count=r.compaction_count))
        notes.flushes += 1
        return True

    def _maintain(self, turn: TurnContext, text: str, *, heartbeat: bool, read_only: bool, notes: TurnNotes,
                  on_event: EventSink | None) -> TurnContext:
        """Before the turn: flush at the soft threshold, compact over the compaction threshold."""
        cfg = self.agent.settings.compaction
        if not cfg.enabled:
            return turn
        budget = compaction_budget(cfg, self.model.profile.context_window)
        tokens = self.context_tokens(turn, [*turn.history.messages, UserMessage(text)])
        # Compaction is lossy, so the flush also runs right before one when the soft threshold was skipped
        # over (a big jump, or reserve_tokens above reserve_tokens_floor); at most one attempt per turn.
        near = tokens >= budget.flush_at or tokens > budget.compact_at
        if near and self._flush_due(turn.session_key, heartbeat=heartbeat, read_only=read_only):
            self._flush(turn, notes)
        if tokens > budget.compact_at and self._compact(turn.session_key, "auto", None, notes, on_event).ok:
            return self.prepare(turn.session_key, read_only=read_only)
        return turn

    def _recover_overflow(self, turn: TurnContext, *, heartbeat: bool, read_only: bool, notes: TurnNotes,
                          on_event: EventSink | None) -> TurnContext | None:
        """The provider said the request is too large: flush (if due), compact once, rebuild the turn."""
        if not self.agent.settings.compaction.enabled:
            notes.overflow_failure = "compaction is disabled (agents.defaults.compaction.enabled)"
            return None
        if self._flush_due(turn.session_key, heartbeat=heartbeat, read_only=read_only):
            # The full context just overflowed, so the flush sees only the recent half of the window
            # (including this turn so far).
            fresh = self.prepare(turn.session_key, read_only=read_only)
            self._flush(fresh, notes, limit_tokens=self.model.profile.context_window // 2)
        outcome = self._compact(turn.session_key, "overflow", None, notes, on_event)
        if not outcome.ok:
            notes.overflow_failure = outcome.error or "there was nothing old enough to summarise"
            return None
        return self.prepare(turn.session_key, read_only=read_only)

    # ---- the turn ---------------------------------------------------------------------------------

    def _reply_only(self, session_key: str, reply: str, notes: TurnNotes) -> TurnResult:
        record = self.store.get(session_key)
        return TurnResult(reply=reply, delivered=True, tool_calls=(), usage=Usage(), session_key=session_key,
                          session_id=record.session_id if record else "", iterations=0,
                          warnings=tuple(notes.warnings), notices=tuple(notes.notices),
                          compactions=notes.compactions, flushes=notes.flushes, reset=notes.reset)

    def run_turn(self, session_key: str, text: str, on_event: EventSink | None = None, *,
                 stream: bool | None = None, heartbeat: bool = False, read_only: bool = False) -> TurnResult:
        """Answer one user message. Streams when `stream` (default: when `on_event` is given).

        `heartbeat` runs are never reset by the reset policy and get no memory flush; `read_only` turns
        cannot write files or run commands (and get no flush either)."""
        with self._lock(session_key):
            self._check_key(session_key)
            notes = TurnNotes()
            command = parse_reset_command(text, self.agent.settings.session.reset_triggers)
            if command.is_reset:
                started = self._reset(session_key, command.command or "/new", notes)
                if not command.rest:
                    return self._reply_only(session_key, started.describe(self.agent.workspace), notes)
                text = command.rest
            else:
                focus = parse_compact_command(text)
                if focus is not None:
                    outcome = self._compact(session_key, "manual", focus or None, notes, on_event)
                    return self._reply_only(session_key, outcome.describe(), notes)
                if not heartbeat:
                    self._expire(session_key, notes)
            turn = self.prepare(session_key, read_only=read_only)
            turn = self._maintain(turn, text, heartbeat=heartbeat, read_only=read_only, notes=notes,
                                  on_event=on_event)
            result = self._run(turn, text, on_event, stream=stream, heartbeat=heartbeat, read_only=read_only,
                               notes=notes)
        reply = result.reply
        return TurnResult(
            reply=reply,
            delivered=bool(reply.strip()) and not is_silent(reply),
            tool_calls=tuple(ToolCallRecord.from_run(r) for r in result.tool_runs),
            usage=result.usage,
            session_key=session_key,
            session_id=turn.record.session_id,
            iterations=result.iterations,
            stopped=result.stopped,
            warnings=turn.history.problems + tuple(notes.warnings),
            notices=tuple(notes.notices),
            compactions=notes.compactions,
            flushes=notes.flushes,
            reset=notes.reset,
        )

    def _run(self, turn: TurnContext, text: str, on_event: EventSink | None, *, stream: bool | None,
             heartbeat: bool, read_only: bool, notes: TurnNotes) -> LoopResult:
        transcript = self.store.open_transcript(turn.record)
        current = [turn]  # replaced when an overflow is recovered by compaction

        def record(message: Message) -> None:
            transcript.append_message(message.to_dict())

        def usage(message: AssistantMessage) -> None:
            u = message.usage
            self.store.add_usage(turn.session_key, input_tokens=u.context_tokens, output_tokens=u.output_tokens,
                                 context_tokens=u.context_tokens + u.output_tokens)

        def recover(_: Sequence[Message]) -> Sequence[Message] | None:
            rebuilt = self._recover_overflow(current[0], heartbeat=heartbeat, read_only=read_only, notes=notes,
                                             on_event=on_event)
            if rebuilt is None:
                return None
            current[0] = rebuilt
            return repair_tool_pairs(rebuilt.history.messages)

        try:
            return run_loop(
                self.model,
                turn.tools,
                lambda messages: self.build_request(current[0], messages),
                repair_tool_pairs(turn.history.messages),
                UserMessage(text),
                record=record,
                max_iterations=self.agent.settings.max_tool_iterations,
                stream=on_event is not None if stream is None else stream,
                on_event=on_event,
                on_usage=usage,
                on_overflow=recover,
            )
        except ContextOverflowError as e:
            if notes.overflow_failure is None:
                raise
            raise ContextOverflowError(
                e.message, f"automatic compaction could not make room ({notes.overflow_failure}); nothing was "
                           f"deleted — try /compact, or /new to start a fresh session") from e
