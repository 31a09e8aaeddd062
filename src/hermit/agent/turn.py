"""The values of one agent turn: its fixed context, what happened around it, its result, and its clock."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hermit.agent.context import History, SystemPrompt
from hermit.errors import ConfigError
from hermit.messages import Usage
from hermit.models.base import ToolSchema
from hermit.sessions.pruning import PruneResult
from hermit.sessions.record import SessionRecord
from hermit.tools import ToolRunner
from hermit.tools.base import ToolRun
from hermit.zones import host_zone


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
class PruneMemo:
    """The previous request's pruning and when it touched the prompt cache, per session."""

    session_id: str
    previous: PruneResult | None = None
    touched: datetime | None = None


def resolve_timezone(name: str | None, now: datetime) -> tuple[tzinfo, str]:
    """The configured IANA zone, else the machine's own zone (hermit.zones: the one the scheduler uses)."""
    if name:
        try:
            return ZoneInfo(name), name
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ConfigError(f"unknown time zone {name!r}",
                              "set agents.defaults.timezone to an IANA name like Europe/Paris") from e
    return host_zone()  # with its DST rules: never the offset of the moment the process started
