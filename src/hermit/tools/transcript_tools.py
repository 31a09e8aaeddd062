"""tool_output: the agent re-reads a tool result in full from the session transcript (SPEC §14.10).

Pruning trims or clears old tool results in the request only; every trimmed or cleared result names
its tool-call id and this tool. The JSONL transcript keeps every result as it was returned, so the
original text is always there to read again, in pages of at most MAX_CHARS characters (a whole page
fits under the runner's result cap). Only the current session's transcript is searched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from pydantic import Field

from hermit.errors import ToolError
from hermit.messages import stored_text
from hermit.sessions.pruning import TOOL_OUTPUT_TOOL
from hermit.sessions.transcript import MessageEntry, read_transcript
from hermit.tools.base import Tool, make_tool

DEFAULT_CHARS = 20_000
MAX_CHARS = 50_000
TOOL_OUTPUT_DESCRIPTION = (
    "Read the full original output of an earlier tool call whose result was trimmed or cleared from the "
    "context; pass the toolCallId named in the note. Long outputs come in pages (offset, maxChars)."
)


class TranscriptTools:
    """tool_output bound to one session; `transcript` gives the current transcript file."""

    def __init__(self, transcript: Callable[[], Path]) -> None:
        self.transcript = transcript

    def tools(self) -> list[Tool]:
        return [make_tool(self.tool_output, name=TOOL_OUTPUT_TOOL, description=TOOL_OUTPUT_DESCRIPTION)]

    def find(self, tool_call_id: str) -> tuple[str, str]:
        """(tool name, full text) of the latest result of `tool_call_id` in the transcript."""
        read = read_transcript(self.transcript())
        for entry in reversed(read.entries):
            if not isinstance(entry, MessageEntry):
                continue
            m = entry.message
            if m.get("role") == "toolResult" and m.get("toolCallId") == tool_call_id:
                return str(m.get("toolName", "")), stored_text(m)
        raise ToolError(f"no tool result with toolCallId {tool_call_id!r} in this session's transcript",
                        "copy the id exactly from the note of the trimmed or cleared result")

    def tool_output(
        self,
        tool_call_id: Annotated[str, Field(alias="toolCallId", min_length=1,
                                           description="The id named in the trimmed/cleared note")],
        offset: Annotated[int | None, Field(ge=0, description="First character to return (default 0)")] = None,
        max_chars: Annotated[int | None, Field(alias="maxChars", ge=1, le=MAX_CHARS,
                                               description=f"Page size (default {DEFAULT_CHARS})")] = None,
    ) -> str:
        name, text = self.find(tool_call_id)
        start = offset or 0
        size = max_chars or DEFAULT_CHARS
        total = len(text)
        if start > total:
            raise ToolError(f"offset {start} is past the end of the output ({total} chars)",
                            f"use an offset between 0 and {total}")
        end = min(total, start + size)
        if start == 0 and end == total:
            return text
        more = f"; call {TOOL_OUTPUT_TOOL} with offset={end} for the rest" if end < total else ""
        return f"{text[start:end]}\n\n[{name} output of {tool_call_id}: chars {start}-{end} of {total}{more}]"
