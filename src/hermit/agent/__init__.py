"""The agent: context assembly, the model ↔ tools loop, the per-agent runtime and message routing."""

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
from hermit.agent.loop import (
    AgentEvent,
    EventSink,
    LoopResult,
    ModelReplied,
    TextChunk,
    ToolFinished,
    ToolStarted,
    run_loop,
)
from hermit.agent.routing import Inbound, Router
from hermit.agent.runtime import AgentRuntime, ToolCallRecord, TurnContext, TurnResult, resolve_timezone

__all__ = [
    "SILENT_TOKEN",
    "AgentEvent",
    "AgentRuntime",
    "ContextBlock",
    "ContextReport",
    "EventSink",
    "History",
    "Inbound",
    "LoopResult",
    "ModelReplied",
    "PromptInputs",
    "Router",
    "SystemPrompt",
    "TextChunk",
    "ToolCallRecord",
    "ToolFinished",
    "ToolStarted",
    "TurnContext",
    "TurnResult",
    "build_system_prompt",
    "includes_long_term_memory",
    "is_silent",
    "load_history",
    "repair_tool_pairs",
    "resolve_timezone",
    "run_loop",
]
