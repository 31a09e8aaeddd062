"""`build_toolset`: the standard tools of one session (see the package's docstring), assembled per turn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from hermit.memory.policy.audience import Reader
from hermit.memory.service import MemoryService
from hermit.tools.base import ToolRunner
from hermit.tools.cron import CronBackend, CronTools
from hermit.tools.exec import ExecTool
from hermit.tools.exec_marks import OwnerExecMarks
from hermit.tools.files import FileTools, WritePolicy
from hermit.tools.memory import MemoryTools
from hermit.tools.memory_files import MemoryWriteRules
from hermit.tools.os_sandbox import OsSandbox
from hermit.tools.room_sandbox import RoomSandbox
from hermit.tools.sandbox import PathResolver
from hermit.tools.transcript_tools import TranscriptTools
from hermit.tools.views import RoomView
from hermit.workspace import MAIN_SESSION_FILES


def build_toolset(
    workspace: Path,
    *,
    confined: bool,
    memory: MemoryService | None = None,
    write_policy: WritePolicy | None = None,
    on_change: Callable[[Path], None] | None = None,
    exec_env: Mapping[str, str] | None = None,
    exec_enabled: bool = True,
    home: Path | None = None,
    private_memory: bool = True,
    reader: Reader | None = None,
    transcript: Callable[[], Path] | None = None,
    cron: tuple[CronBackend, str] | None = None,
    os_sandbox: OsSandbox | RoomSandbox | None = None,
    rules: MemoryWriteRules | None = None,
    env_allow: frozenset[str] = frozenset(),
    view: RoomView | None = None,
) -> ToolRunner:
    """read, write, edit, exec, memory_search, memory_get (memory tools only with a service), and
    tool_output when `transcript` gives the session's transcript file.

    `private_memory=False` (any session but the main private one) hides MEMORY.md and HEARTBEAT.md from
    every tool; the memory tools act for `reader` (default: the owner, or a reader of shared notes only when
    `private_memory` is False). `cron`
    (backend, agent id) adds the cron tool; the runtime passes it for the main session only.
    A `confined` session's exec runs in `os_sandbox`; without one it is not offered. With a `view` (a
    non-owner session) the file tools work in its room and what it may see of the workspace."""
    hidden = frozenset() if private_memory else frozenset((workspace / n).resolve() for n in MAIN_SESSION_FILES)
    paths = PathResolver(workspace, confined, home, hidden)
    tools = FileTools(paths, policy=write_policy, on_change=on_change, rules=rules, view=view).tools()
    if exec_enabled and (os_sandbox is not None or not confined):
        # The owner's shell outside a sandbox: what it writes into memory is marked as the owner's.
        marks = OwnerExecMarks(rules, on_change) if rules is not None and rules.owner is not None else None
        tools += ExecTool(paths, env=exec_env, env_allow=env_allow, sandbox=os_sandbox, marks=marks).tools()
    if memory is not None:
        tools += MemoryTools(memory, private=private_memory, reader=reader).tools()
    if transcript is not None:
        tools += TranscriptTools(transcript).tools()
    if cron is not None:
        tools += CronTools(cron[0], agent_id=cron[1]).tools()
    return ToolRunner(tools, errors_shown=view.hide_host if view is not None else None)
