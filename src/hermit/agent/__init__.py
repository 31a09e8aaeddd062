"""The agent: context assembly, the model ↔ tools loop, compaction and memory flush, session lifecycle,
the per-agent runtime (its turn types and session maintenance) and message routing.

Names are resolved on first use (PEP 562), as in hermit.config: `hermit.agent.routing` (cron, the doctor) loads
without the runtime, the model clients and the tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.lazy import names_from

if TYPE_CHECKING:
    from hermit.agent.compaction import CompactionOutcome, compaction_budget
    from hermit.agent.context import (
        SILENT_TOKEN,
        ContextBlock,
        ContextReport,
        History,
        PromptInputs,
        SystemPrompt,
        build_system_prompt,
        includes_long_term_memory,
        is_silent,
        load_history,
        repair_tool_pairs,
    )
    from hermit.agent.lifecycle import SessionStart
    from hermit.agent.loop import (
        AgentEvent,
        EventSink,
        LoopResult,
        ModelReplied,
        Notice,
        TextChunk,
        ToolFinished,
        ToolStarted,
        run_loop,
    )
    from hermit.agent.routing import Route, RouteInput, Router
    from hermit.agent.runtime import AgentRuntime
    from hermit.agent.turn import ToolCallRecord, TurnContext, TurnResult, resolve_timezone

_WHERE = {
    "CompactionOutcome": "compaction", "compaction_budget": "compaction", "SILENT_TOKEN": "context",
    "ContextBlock": "context", "ContextReport": "context", "History": "context", "PromptInputs": "context",
    "SystemPrompt": "context", "build_system_prompt": "context", "includes_long_term_memory": "context",
    "is_silent": "context", "load_history": "context", "repair_tool_pairs": "context", "SessionStart": "lifecycle",
    "AgentEvent": "loop", "EventSink": "loop", "LoopResult": "loop", "ModelReplied": "loop", "Notice": "loop",
    "TextChunk": "loop", "ToolFinished": "loop", "ToolStarted": "loop", "run_loop": "loop", "Route": "routing",
    "RouteInput": "routing", "Router": "routing", "AgentRuntime": "runtime", "ToolCallRecord": "turn",
    "TurnContext": "turn", "TurnResult": "turn", "resolve_timezone": "turn",
}

__getattr__ = names_from(__name__, _WHERE)


__all__ = [
    "SILENT_TOKEN",
    "AgentEvent",
    "AgentRuntime",
    "CompactionOutcome",
    "ContextBlock",
    "ContextReport",
    "EventSink",
    "History",
    "LoopResult",
    "ModelReplied",
    "Notice",
    "PromptInputs",
    "Route",
    "RouteInput",
    "Router",
    "SessionStart",
    "SystemPrompt",
    "TextChunk",
    "ToolCallRecord",
    "ToolFinished",
    "ToolStarted",
    "TurnContext",
    "TurnResult",
    "build_system_prompt",
    "compaction_budget",
    "includes_long_term_memory",
    "is_silent",
    "load_history",
    "repair_tool_pairs",
    "resolve_timezone",
    "run_loop",
]
