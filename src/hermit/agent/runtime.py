"""AgentRuntime: one configured agent — model, tools, memory, sessions — answering one turn at a time.

A turn: handle `/new`, `/reset` and `/compact`; start a new session when the reset policy says the
old one expired (those ends, and a deleted message's retraction: session_ends.py); open the session, decide its sandbox and privacy from the key, build the tools and
the system prompt, load the history; let session maintenance (maintenance.py) give the agent its silent
memory flush and compact when the context nears the window; run the loop (recording every message in
the transcript and usage in sessions.json), recovering once from a context overflow by flush → compact
→ retry; and return the reply with `delivered=False` for a silent NO_REPLY. A turn stopped through its
`cancel` event (gateway shutdown) ends with an `interrupted` custom entry in the transcript and raises
TurnCancelled. Every request is built in
`build_request`, which prunes old tool output (SPEC §10) in what is sent, never in the transcript. The
turn's value types live in turn.py.

Composition roots (the CLI, later the gateway) build the model and the memory service from config
and pass them in; nothing here reads the environment or config files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from hermit.agent.compaction import CompactionOutcome
from hermit.agent.confinement import Confinement
from hermit.agent.context import (
    ContextReport,
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
from hermit.agent.lifecycle import SessionStart, parse_compact_command
from hermit.agent.loop import EventSink, LoopResult, TurnCancelled, run_loop
from hermit.agent.maintenance import SessionMaintenance
from hermit.agent.session_ends import SessionEnds
from hermit.agent.speakers import (
    OwnerCheck,
    attributed,
    contact_chat_note,
    is_contact_dm,
    make_sender,
    records_senders,
    sender_of,
)
from hermit.agent.turn import PruneMemo, ToolCallRecord, TurnContext, TurnNotes, TurnResult, resolve_timezone
from hermit.agent.untrusted_jobs import at_turn_start, tell_owner
from hermit.agent.untrusted_words import UntrustedGuard
from hermit.config.load import AgentConfig
from hermit.errors import ContextOverflowError, HermitError, SessionError
from hermit.memory.policy.audience import owner_origin, reader_for_session
from hermit.memory.policy.paths import safe_extra_roots
from hermit.memory.policy.provenance import Origin, sender_text
from hermit.memory.service import MemoryService
from hermit.messages import (
    AssistantMessage,
    FiledFile,
    ImagePart,
    Message,
    Sender,
    Usage,
    UserMessage,
    valid_text,
)
from hermit.models.base import ClosableModel, Model, ModelRequest
from hermit.models.cancel import CancelToken
from hermit.sessions.entries import IMAGE_REFUSED_TYPE, image_key
from hermit.sessions.keys import SessionKind, agent_id_of, classify_session_key, is_main_session_key
from hermit.sessions.lock import DEFAULT_WAIT_SECONDS, session_lock
from hermit.sessions.pruning import PruningMode, prune_for_request, resolve_pruning_mode
from hermit.sessions.record import SessionRecord
from hermit.sessions.reset import parse_reset_command
from hermit.sessions.retraction import Remove, register_reach
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import Clock, utc_now
from hermit.tools import (
    CronBackend,
    MemoryWriteRules,
    OsSandbox,
    ReadOnlyWrites,
    RoomSandbox,
    ToolRunner,
    WritePolicy,
    build_toolset,
)
from hermit.tools.memory_files import session_origin
from hermit.tools.os_sandbox import Backend
from hermit.workspace import ensure_workspace

log = logging.getLogger("hermit.agent")


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
        cron: CronBackend | None = None,
        sandbox_backend: Backend | None = None,
        owner_check: OwnerCheck | None = None,
    ) -> None:
        self.agent = agent
        self.cron = cron  # the scheduler's jobs, offered as the cron tool in the main session only
        self.model = model
        self.memory = memory
        self.clock = clock
        self.exec_env = exec_env
        self.home = home
        ensure_workspace(agent.workspace)
        self.store = store or SessionStore(agent.sessions_dir, clock=clock, cwd=agent.workspace, fsync=fsync)
        self._ends = SessionEnds(self)  # /new, /reset, expiry and retraction (session_ends.py)
        register_reach(self.store.directory, self._ends.reach)  # a retraction's scrub reaches the flush's notes
        self.timezone, self.timezone_name = resolve_timezone(agent.settings.timezone, clock())
        self._locks: dict[str, threading.Lock] = {}
        self.session_wait_seconds = DEFAULT_WAIT_SECONDS  # before "session busy" (another process's turn)
        self._locks_guard = threading.Lock()
        self._prune_memo: dict[str, PruneMemo] = {}
        self._maintenance = SessionMaintenance(self, forget_pruning=self._forget_pruning)
        # Rooms and sandboxes of non-owner sessions; the backend is detected on first use when None.
        self.confinement = Confinement(agent, self._agent_dir, sandbox_backend)
        self._senders: dict[str, Sender] = {}  # who sent the current turn's message, per session key
        self._refs: dict[str, str | None] = {}  # the platform's id of the current turn's message, per session key
        self._files: dict[str, tuple[FiledFile, ...]] = {}  # those of the current turn's message
        # Whether a channel's sender is one of the owner's ids (config, given by the composition root): a
        # group message of the owner's is marked as theirs to the model (speakers.py). None: nobody is.
        self.owner_check = owner_check

    def close(self) -> None:
        """Release what the runtime holds: its memory index and its model's connections."""
        if self.memory is not None:
            self.memory.close()
        if isinstance(self.model, ClosableModel):
            self.model.close()

    # ---- policy -----------------------------------------------------------------------------------

    def sandboxed(self, session_key: str) -> bool:
        return self.confinement.sandboxed(session_key)

    def pruning_mode(self) -> PruningMode:
        return resolve_pruning_mode(self.agent.settings.context_pruning.mode, self.model.profile.cache_ttl_seconds)

    def tools_for(self, session_key: str, *, write_policy: WritePolicy | None = None,
                  exec_enabled: bool = True) -> ToolRunner:
        """The session's tools; a restricted turn (the pre-compaction flush, a read-only session) passes a
        write policy and turns exec off, since a shell could write around the policy. tool_output is
        offered when pruning can trim results."""
        transcript = (lambda: self._transcript_path(session_key)) if self.pruning_mode() != "off" else None
        sandbox = self.agent.settings.sandbox
        private = includes_long_term_memory(session_key)
        view = self.confinement.view(session_key)
        return build_toolset(
            self.agent.workspace,
            confined=self.sandboxed(session_key),
            memory=self.memory,
            write_policy=write_policy,
            on_change=self._file_changed,
            exec_env=self.exec_env,
            exec_enabled=exec_enabled,
            home=self.home,
            private_memory=private,
            reader=reader_for_session(session_key),
            transcript=transcript,
            cron=(self.cron, self.agent.id) if self.cron is not None and write_policy is None
            and is_main_session_key(session_key) else None,
            os_sandbox=self.confinement.os_sandbox(session_key, view),
            rules=MemoryWriteRules(
                self.agent.workspace, origin=None if private else self._write_origin(session_key),
                owner=owner_origin(session_key) if private else None,
                memory_writes=sandbox.memory_writes, history_dir=self._agent_dir / "memory-history",
                extra_paths=self._extra_memory_paths(), clock=lambda: self.clock().astimezone(self.timezone)),
            env_allow=frozenset(sandbox.env_allow),
            view=view,
        )

    @property
    def _agent_dir(self) -> Path:
        return self.agent.sessions_dir.parent

    def _extra_memory_paths(self) -> tuple[Path, ...]:
        # Only the roots indexing accepts: an entry naming the workspace (or above) would make every file
        # there a memory file the write rules treat as such.
        return tuple(safe_extra_roots(self.agent.workspace, list(self.agent.settings.memory_search.extra_paths)))

    def os_sandbox(self, session_key: str) -> OsSandbox | RoomSandbox | None:
        """The OS sandbox a confined session's exec runs in; None when not confined or none is available."""
        return self.confinement.os_sandbox(session_key, self.confinement.view(session_key))

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

    def channel_sender(self, channel: str, account_id: str, sender_id: str, name: str | None = None,
                       username: str | None = None) -> Sender:
        """Who wrote a channel's message, as a turn records it: marked the owner's when `owner_check` says
        the id (or username) is one of the owner's on that channel account."""
        owner = self.owner_check is not None and self.owner_check(channel, account_id, sender_id, username)
        return make_sender(sender_id, name, owner=owner)

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
            roomed=self.confinement.roomed(session_key),
            model_ref=self.model.profile.ref,
            bootstrap_max_chars=s.bootstrap_max_chars,
            bootstrap_total_max_chars=s.bootstrap_total_max_chars,
            compacted=compacted,
            sessions_searchable=self.memory is not None and self.memory.sessions_dir is not None,
            chat_note=contact_chat_note(session_key, self._senders.get(session_key)),
            room_note=self.confinement.room_news(session_key),
        ))

    def build_request(self, turn: TurnContext, messages: Sequence[Message], *,
                      system: str | None = None) -> ModelRequest:
        """The one place a request is made from the turn's messages: tool pairs repaired, old tool output
        pruned (the transcript is never touched)."""
        text = turn.system.text if system is None else system
        sent = self._prune(turn, tuple(self._attributed(turn.session_key, messages)), text, commit=True)
        return ModelRequest(system=text, messages=sent, tools=turn.schemas)

    def _attributed(self, session_key: str, messages: Sequence[Message]) -> list[Message]:
        """The messages as the model is shown them: who said each (speakers.attributed); a contact's DM quoted."""
        contact = is_contact_dm(session_key, self._senders.get(session_key))
        return attributed(repair_tool_pairs(messages), contact=contact)

    def _prune(self, turn: TurnContext, messages: tuple[Message, ...], system: str, *,
               commit: bool) -> tuple[Message, ...]:
        if self.pruning_mode() == "off":
            return messages
        memo = self._prune_memo.get(turn.session_key)
        if memo is None or memo.session_id != turn.record.session_id:
            memo = PruneMemo(turn.record.session_id)
        now = self.clock()
        result = prune_for_request(
            messages, cfg=self.agent.settings.context_pruning, context_window_tokens=self.model.profile.context_window,
            profile_cache_ttl=self.model.profile.cache_ttl_seconds, last_cache_touch=memo.touched, now=now,
            system_prompt=system + turn.tools_text, previous=memo.previous)
        if commit:
            self._prune_memo[turn.session_key] = PruneMemo(turn.record.session_id, result, now)
        return result.messages

    def _forget_pruning(self, session_key: str) -> None:
        """Drop the session's pruning memo: a new session or a compaction changed the prefix."""
        self._prune_memo.pop(session_key, None)

    def context_tokens(self, turn: TurnContext, messages: Sequence[Message]) -> int:
        """Estimated size of the request these messages would make now (pruning applied)."""
        sent = self._prune(turn, tuple(self._attributed(turn.session_key, messages)), turn.system.text, commit=False)
        return request_tokens(turn.system.text, turn.schemas, sent)

    def prepare(self, session_key: str, *, read_only: bool = False) -> TurnContext:
        self._check_key(session_key)
        opened = self.store.get_or_create(session_key)
        if opened.created:
            self._sync_memory_on_start()
        transcript = self.store.open_transcript(opened.record)
        history = load_history(transcript, session_key, self._senders.get(session_key))
        for problem in history.problems:
            log.warning("%s", problem)
        tools = (self.tools_for(session_key, write_policy=ReadOnlyWrites(), exec_enabled=False) if read_only
                 else self.tools_for(session_key))
        system = self.system_prompt(session_key, tools, compacted=history.summary is not None)
        return TurnContext(session_key, opened.record, tools, system, history)

    def _sync_memory_on_start(self) -> None:
        if self.memory is None or not self.memory.cfg.sync.on_session_start:
            return
        try:  # an embedding backlog (a first index stopped part-way) is `hermit memory index`'s or the gateway's
            self.memory.sync(blocking=False, defer_vectors=True)
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
        self._forget_pruning(session_key)
        self._sync_memory_on_start()
        return opened.record

    def reset_session(self, session_key: str, command: str = "/new") -> SessionStart:
        """/new or /reset: save the end of the old session to memory (the session-memory hook), then
        start a fresh one."""
        with self._lock(session_key):
            return self._ends.reset(session_key, command, TurnNotes())

    def _write_origin(self, session_key: str, *, dm_only: bool = False) -> Origin:
        """The origin of what a non-main session writes to memory (its tools' writes, the flush's notes; with
        `dm_only`, its /new file). Whatever a group, channel or thread session writes may hold several
        members' words (a flush or a /new file sums up the conversation, and a tool write during one
        member's turn may quote the others), so it names the chat (its audience stays the chat) and no
        single sender: neither whoever spoke last nor the owner. A DM (one person's words) names its sender;
        a /new file names one only there."""
        kind = classify_session_key(session_key)
        named = kind is SessionKind.DM if dm_only else not records_senders(session_key)
        sender = self._senders.get(session_key) if named else None
        return session_origin(session_key, sender_text(sender.name, sender.id) if sender else None)

    def retract(self, session_key: str, ref: str, remove: Remove | None = None) -> bool:
        """The sender deleted message `ref` on the platform after its turn started: when the session's current
        transcript holds it, or one of the key's ended ones (sessions/retraction.py), a `retracted` entry makes
        every reader see a placeholder instead (sessions/entries.py) from the next turn on; `remove` deletes the
        files the message brought (gateway/attachments.py) before that entry is written. Waits for a running
        turn of the session. True when it was found."""
        with self._lock(session_key):
            return self._ends.retract(session_key, ref, remove)

    def retract_ended(self, session_key: str, ref: str, remove: Remove | None, *, current: str | None) -> bool:
        """Retract `ref` in the key's ended transcripts that hold it (session_ends.py). True when one held it."""
        return self._ends.retract_ended(session_key, ref, remove, current=current)

    def session_busy(self, session_key: str) -> bool:
        """A turn is running in the session now in this process (the heartbeat skips a busy main session)."""
        lock = self._locks.get(session_key)
        return lock is not None and lock.locked()

    @contextlib.contextmanager
    def _lock(self, session_key: str) -> Iterator[None]:
        """One turn at a time per session: a thread lock in this process, a file lock across processes."""
        with self._locks_guard:
            lock = self._locks.setdefault(session_key, threading.Lock())
        with lock, session_lock(self.store.directory, session_key, wait_seconds=self.session_wait_seconds), \
                self.confinement.turn(session_key):  # the turn's views hold one room (Confinement.turn)
            yield

    # ---- maintenance (maintenance.py) -------------------------------------------------------------

    def compact(self, session_key: str, focus: str | None = None) -> CompactionOutcome:
        """Manual compaction (/compact [focus])."""
        with self._lock(session_key):
            return self._maintenance.compact(session_key, "manual", focus or None, TurnNotes(), None)

    # ---- the turn ---------------------------------------------------------------------------------

    def _reply_only(self, session_key: str, reply: str, notes: TurnNotes) -> TurnResult:
        record = self.store.get(session_key)
        return TurnResult(reply=reply, delivered=True, tool_calls=(), usage=Usage(), session_key=session_key,
                          session_id=record.session_id if record else "", iterations=0,
                          warnings=tuple(notes.warnings), notices=tuple(notes.notices),
                          compactions=notes.compactions, flushes=notes.flushes, reset=notes.reset)

    def run_turn(self, session_key: str, text: str, on_event: EventSink | None = None, *,
                 stream: bool | None = None, heartbeat: bool = False, read_only: bool = False,
                 cancel: CancelToken | None = None, sender: Sender | str | None = None,
                 ref: str | None = None, images: tuple[ImagePart, ...] = (),
                 files: tuple[FiledFile, ...] = ()) -> TurnResult:
        """Answer one user message. Streams when `stream` (default: when `on_event` is given).

        `heartbeat` runs are never reset by the reset policy and get no memory flush; `read_only` turns
        cannot write files or run commands (and get no flush either). Cancelling `cancel` (the gateway's
        shutdown) ends the model call in progress (models.cancel) and stops the turn between steps
        (loop.py): the transcript gets an `interrupted` entry and TurnCancelled is raised. `sender` (who
        wrote the message, from a channel) is recorded with the message in a group's transcript and shown to
        the model with it (speakers.py); a DM's memory notes name it in their origin. `ref` (the platform's
        message) is recorded with it, so that a delete by its sender can retract it (`retract`). `images` (the
        photos it brought, for a model that reads them: gateway/attachments.py) go with it and its transcript;
        `files` (what the gateway filed for it, messages.FiledFile) are recorded with it, so that its delete
        removes them."""
        text = valid_text(text)  # from a terminal, a channel or a script: a lone surrogate breaks every store
        with self._lock(session_key):
            self._check_key(session_key)
            self._refs[session_key] = ref
            self._files[session_key] = files if ref is not None else ()
            who = sender_of(sender)
            if who is None:
                self._senders.pop(session_key, None)
            else:
                self._senders[session_key] = who
            notes = TurnNotes()
            command = parse_reset_command(text, self.agent.settings.session.reset_triggers)
            if command.is_reset:
                started = self._ends.reset(session_key, command.command or "/new", notes)
                if not command.rest:
                    return self._reply_only(session_key, started.describe(self.agent.workspace), notes)
                text = command.rest
            else:
                focus = parse_compact_command(text)
                if focus is not None:
                    # A group member's or a contact's focus is named as theirs, not the owner's, and quoted
                    # (compaction.focus_request); a contact's once went raw, as "the user's" request.
                    outcome = self._maintenance.compact(
                        session_key, "manual", focus or None, notes, on_event,
                        asked_by=None if is_main_session_key(session_key) else who)
                    if outcome.status == "failed":
                        log.warning("/compact in %s failed: %s", session_key, outcome.error)
                    # the why goes to the log; only the owner's own session is told it
                    return self._reply_only(session_key, outcome.describe(detail=is_main_session_key(session_key)),
                                            notes)
                if not heartbeat:
                    self._ends.expire(session_key, notes)
            notes.warnings += at_turn_start(self, session_key, text, heartbeat=heartbeat)  # untrusted_jobs.py
            turn = self.prepare(session_key, read_only=read_only)
            turn = self._maintenance.before_turn(turn, text, heartbeat=heartbeat, read_only=read_only, notes=notes,
                                                 on_event=on_event, images=images)
            result = self._run(turn, text, on_event, stream=stream, heartbeat=heartbeat, read_only=read_only,
                               notes=notes, cancel=cancel, images=images)
            self.confinement.room_news_said(session_key)  # its prompt told what was finished in its room
        reply = tell_owner(self._agent_dir, session_key, result.reply, heartbeat=heartbeat, on_event=on_event)
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
             heartbeat: bool, read_only: bool, notes: TurnNotes, cancel: CancelToken | None = None,
             images: tuple[ImagePart, ...] = ()) -> LoopResult:
        transcript = self.store.open_transcript(turn.record)
        if heartbeat:  # marks the background exchange that follows, so a chat history can hide its prompt
            transcript.append_custom("heartbeat")
        current = [turn]  # replaced when an overflow is recovered by compaction

        def record(message: Message) -> None:
            transcript.append_message(message.to_dict())

        def refused(found: tuple[ImagePart, ...]) -> None:  # left out of every later request (sessions/entries.py)
            transcript.append_custom(IMAGE_REFUSED_TYPE, {"images": sorted({image_key(i.data) for i in found})})

        def usage(message: AssistantMessage) -> None:
            u = message.usage
            # A heartbeat must not count as activity, or an idle reset would never come (SPEC §16).
            self.store.add_usage(turn.session_key, input_tokens=u.context_tokens, output_tokens=u.output_tokens,
                                 context_tokens=u.context_tokens + u.output_tokens, touch=not heartbeat)

        def recover(_: Sequence[Message]) -> Sequence[Message] | None:
            rebuilt = self._maintenance.recover_overflow(current[0], heartbeat=heartbeat, read_only=read_only,
                                                         notes=notes, on_event=on_event)
            if rebuilt is None:
                return None
            current[0] = rebuilt
            return repair_tool_pairs(rebuilt.history.messages)

        user = UserMessage(text, images, sender=self._senders.get(turn.session_key) if records_senders(turn.session_key)
                           else None, ref=self._refs.get(turn.session_key), files=self._files.get(turn.session_key, ()))
        # The main session's copies of what its tools brought in stay material (agent/untrusted_words.py).
        runner = UntrustedGuard(turn.tools, self.agent.workspace, user, turn.history.messages, heartbeat=heartbeat,
                                state=self._agent_dir) if is_main_session_key(turn.session_key) and not read_only \
            else turn.tools
        try:
            return run_loop(
                self.model,
                runner,
                lambda messages: dataclasses.replace(self.build_request(current[0], messages), cancel=cancel),
                repair_tool_pairs(turn.history.messages),
                user,
                record=record,
                max_iterations=self.agent.settings.max_tool_iterations,
                stream=on_event is not None if stream is None else stream,
                on_event=on_event,
                on_usage=usage,
                on_overflow=recover,
                cancel=cancel,
                on_images_refused=refused,
            )
        except TurnCancelled as e:
            transcript.append_custom("interrupted", {"reason": e.message})
            raise
        except ContextOverflowError as e:
            if notes.overflow_failure is None:
                raise
            raise ContextOverflowError(
                e.message, f"automatic compaction could not make room ({notes.overflow_failure}); nothing was "
                           f"deleted — try /compact, or /new to start a fresh session") from e
