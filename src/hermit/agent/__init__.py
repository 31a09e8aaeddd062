"""The agent: context assembly, the model ↔ tools loop, compaction and memory flush, session lifecycle,
the per-agent runtime (its turn types and session maintenance) and message routing."""

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
