"""AgentRuntime: one configured agent — model, tools, memory, sessions — answering one turn at a time.

A turn: open (or start) the session of a key, decide the session's sandbox and privacy from the
key, build the tools and the system prompt, load the history, run the loop (recording every message
in the transcript and usage in sessions.json), and return the reply with `delivered=False` for a
silent NO_REPLY. Composition roots (the CLI, later the gateway) build the model and the memory
service from config and pass them in; nothing here reads the environment or config files.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
    tools_block,
)
from hermit.agent.loop import EventSink, LoopResult, run_loop
from hermit.config.load import AgentConfig
from hermit.errors import ConfigError, HermitError, SessionError
from hermit.memory.service import MemoryService
from hermit.messages import AssistantMessage, Message, Usage, UserMessage
from hermit.models.base import Model, ModelRequest
from hermit.sessions.keys import agent_id_of, is_main_session_key
from hermit.sessions.store import SessionRecord, SessionStore
from hermit.sessions.transcript import Clock, utc_now
from hermit.tools import ToolRunner, WritePolicy, build_toolset
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

    def to_dict(self) -> dict[str, Any]:
        return {"reply": self.reply, "delivered": self.delivered, "sessionKey": self.session_key,
                "sessionId": self.session_id, "toolCalls": [c.to_dict() for c in self.tool_calls],
                "usage": self.usage.to_dict(), "iterations": self.iterations, "stopped": self.stopped,
                "warnings": list(self.warnings)}


@dataclass(frozen=True)
class TurnContext:
    """What stays fixed during one turn: the session, its tools and its system prompt."""

    session_key: str
    record: SessionRecord
    tools: ToolRunner
    system: SystemPrompt
    history: History


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

    # ---- policy -----------------------------------------------------------------------------------

    def sandboxed(self, session_key: str) -> bool:
        mode = self.agent.settings.sandbox.mode
        return mode == "all" or (mode == "non-main" and not is_main_session_key(session_key))

    def tools_for(self, session_key: str, *, write_policy: WritePolicy | None = None,
                  exec_enabled: bool = True) -> ToolRunner:
        """The session's tools; a restricted turn (e.g. the pre-compaction flush) passes a write policy
        and may turn exec off, since a shell could write around the policy."""
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
        )

    def _file_changed(self, path: Path) -> None:
        if self.memory is not None and path.suffix.lower() == ".md":
            self.memory.mark_dirty()  # the next memory_search re-indexes before searching

    def _check_key(self, session_key: str) -> None:
        owner = agent_id_of(session_key)
        if owner is not None and owner != self.agent.id:
            raise SessionError(f"session {session_key!r} belongs to agent {owner!r}, not {self.agent.id!r}",
                               f"use a key like agent:{self.agent.id}:main, or run with --agent {owner}")

    # ---- context ----------------------------------------------------------------------------------

    def system_prompt(self, session_key: str, tools: ToolRunner) -> SystemPrompt:
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
        ))

    def build_request(self, turn: TurnContext, messages: Sequence[Message]) -> ModelRequest:
        """The one place a request is made from the turn's messages (pruning/compaction hook in later)."""
        return ModelRequest(system=turn.system.text, messages=tuple(repair_tool_pairs(messages)),
                            tools=turn.tools.schemas())

    def prepare(self, session_key: str) -> TurnContext:
        self._check_key(session_key)
        opened = self.store.get_or_create(session_key)
        if opened.created:
            self._sync_memory_on_start()
        transcript = self.store.open_transcript(opened.record)
        history = load_history(transcript)
        for problem in history.problems:
            log.warning("%s", problem)
        tools = self.tools_for(session_key)
        return TurnContext(session_key, opened.record, tools, self.system_prompt(session_key, tools), history)

    def _sync_memory_on_start(self) -> None:
        if self.memory is None or not self.memory.cfg.sync.on_session_start:
            return
        try:
            self.memory.sync(blocking=False)
        except HermitError as e:  # memory trouble must not stop the conversation; search will say so
            log.warning("memory sync at session start failed: %s", e)

    def context_report(self, session_key: str, text: str = "") -> ContextReport:
        turn = self.prepare(session_key)
        blocks = [*turn.system.blocks, tools_block(turn.tools.schemas()),
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
        self._sync_memory_on_start()
        return opened.record

    def _lock(self, session_key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(session_key, threading.Lock())

    # ---- the turn ---------------------------------------------------------------------------------

    def run_turn(self, session_key: str, text: str, on_event: EventSink | None = None, *,
                 stream: bool | None = None) -> TurnResult:
        """Answer one user message. Streams when `stream` (default: when `on_event` is given)."""
        with self._lock(session_key):
            turn = self.prepare(session_key)
            transcript = self.store.open_transcript(turn.record)

            def record(message: Message) -> None:
                transcript.append_message(message.to_dict())

            def usage(message: AssistantMessage) -> None:
                u = message.usage
                self.store.add_usage(session_key, input_tokens=u.context_tokens, output_tokens=u.output_tokens,
                                     context_tokens=u.context_tokens + u.output_tokens)

            result: LoopResult = run_loop(
                self.model,
                turn.tools,
                lambda messages: self.build_request(turn, messages),
                repair_tool_pairs(turn.history.messages),
                UserMessage(text),
                record=record,
                max_iterations=self.agent.settings.max_tool_iterations,
                stream=on_event is not None if stream is None else stream,
                on_event=on_event,
                on_usage=usage,
            )
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
            warnings=turn.history.problems,
        )
