"""Tools the agent can call: typed functions, their runner, the file/exec/memory tools and the sandbox.

`build_toolset` assembles the standard tools for one session; the agent runtime calls it per turn,
because the sandbox, the write policy (append-only during the memory flush, none in a read-only
session), the memory write rules (whose session wrote a note) and the transcript that tool_output
reads depend on the session and the turn. A confined session gets exec only inside an OS sandbox
(`os_sandbox`); with none available, it gets no exec at all. A non-owner session works through a
`view` (views.py): its room plus what it may see of the workspace, for its file tools and its exec.

Names are resolved on first use (PEP 562), as in hermit.config: `hermit.tools.rooms` or `os_sandbox` (the CLI's
cron and doctor) load without the memory service, the model clients and numpy that the tools themselves need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.lazy import names_from

if TYPE_CHECKING:
    from hermit.tools.base import (
        Tool,
        ToolOutput,
        ToolRun,
        ToolRunner,
        clean_schema,
        make_tool,
    )
    from hermit.tools.cron import CronBackend, CronTools
    from hermit.tools.exec import ExecTool
    from hermit.tools.files import AllowAllWrites, AppendOnlyPolicy, FileTools, ReadOnlyWrites, WritePolicy
    from hermit.tools.memory import MEMORY_GET_DESCRIPTION, MEMORY_SEARCH_DESCRIPTION, MemoryTools
    from hermit.tools.memory_files import MemoryWriteRules
    from hermit.tools.os_sandbox import OsSandbox
    from hermit.tools.room_sandbox import RoomSandbox
    from hermit.tools.sandbox import PathResolver, ResolvedPath
    from hermit.tools.toolset import build_toolset
    from hermit.tools.transcript_tools import TranscriptTools
    from hermit.tools.views import RoomView

_WHERE = {
    "Tool": "base", "ToolOutput": "base", "ToolRun": "base", "ToolRunner": "base", "clean_schema": "base",
    "make_tool": "base", "CronBackend": "cron", "CronTools": "cron", "ExecTool": "exec",
    "AllowAllWrites": "files", "AppendOnlyPolicy": "files", "FileTools": "files",
    "ReadOnlyWrites": "files", "WritePolicy": "files", "MEMORY_GET_DESCRIPTION": "memory",
    "MEMORY_SEARCH_DESCRIPTION": "memory", "MemoryTools": "memory", "MemoryWriteRules": "memory_files",
    "OsSandbox": "os_sandbox", "RoomSandbox": "room_sandbox", "PathResolver": "sandbox", "ResolvedPath": "sandbox",
    "TranscriptTools": "transcript_tools", "build_toolset": "toolset", "RoomView": "views",
}

__getattr__ = names_from(__name__, _WHERE)


__all__ = [
    "MEMORY_GET_DESCRIPTION",
    "MEMORY_SEARCH_DESCRIPTION",
    "AllowAllWrites",
    "AppendOnlyPolicy",
    "CronBackend",
    "CronTools",
    "ExecTool",
    "FileTools",
    "MemoryTools",
    "MemoryWriteRules",
    "OsSandbox",
    "PathResolver",
    "ReadOnlyWrites",
    "ResolvedPath",
    "RoomSandbox",
    "RoomView",
    "Tool",
    "ToolOutput",
    "ToolRun",
    "ToolRunner",
    "TranscriptTools",
    "WritePolicy",
    "build_toolset",
    "clean_schema",
    "make_tool",
]
