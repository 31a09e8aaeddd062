"""memory_search and memory_get: the agent's face over MemoryService, with SPEC §4's names and wording.

The result objects are exactly MemoryService's (`{"results": [...], "provider", "model"}` and
`{"path", "text"}`); this module only maps the wire parameter names (`maxResults`, `minScore`,
`from`, `lines`) and turns a refused path into an error result naming the rule. memory_get also takes the
`startLine`/`endLine` a search result gives (a model passes back the names it read): both kinds at once, lines
backwards, a line below 1 or a non-integer (`true`, `2.5`) are refused, and so is a start past the end of the file
(memory/lines.py). The MCP server's memory_get is this method (its schema is this signature), so both faces make the
one service call with the one set of checks.

The tools act for a reader (memory/policy/audience.py): the owner in the main private session, the
session's audience anywhere else. A reader other than the owner gets only what it may see — shared
notes and its own chat's — and never MEMORY.md: its hits are dropped from search results and memory_get
refuses it, so the "main session only" rule of SPEC §3 cannot be bypassed by a tool call in a group
chat (the failure of §14.8). MEMORY.md is recognised by file identity, so a hard link to it (and any
hard-linked memory file) is withheld the same way (memory/policy/privacy.py). Session transcripts (the
`sessions` source) hold the same private conversations, so they are withheld too. The search itself
drops what the reader may not see before ranking (memory/search/hybrid.py); the check here is a second one.
memory_get answers such a reader alike for a missing file and one it may see nothing of
(MemoryService.get): a chat cannot test which of the owner's notes exist.

Such a reader names memory by workspace-relative paths (or as /workspace/…, how a room shows its workspace);
every other absolute path, `~` included, gets one answer. The files of an extra path outside the workspace are
the owner's whole and never shown to it, and the precise answers the owner gets there ("file not found:
/home/<login>/vault/x.md", "not a Markdown file") told a right guess at where the owner keeps notes from a wrong
one, and spelled out `~` as the owner's home (their login name).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from hermit.errors import PathPolicyError, ToolError
from hermit.memory.index.session_source import SESSIONS_PREFIX
from hermit.memory.lines import line_range
from hermit.memory.policy.audience import OWNER_READER, UNKNOWN, Reader, is_private_path
from hermit.memory.policy.paths import absolute_refused, resolve_memory_path
from hermit.memory.policy.privacy import is_hard_linked, is_long_term
from hermit.memory.service import WITHHELD_NOTICE, MemoryService
from hermit.tools.base import Tool, make_tool
from hermit.tools.sandbox import PRIVACY_RULE
from hermit.tools.views import ROOM_ROOT
from hermit.workspace import MEMORY_FILE

MEMORY_SEARCH_DESCRIPTION = (
    "Mandatory recall step: search MEMORY.md + memory/*.md (and session transcripts when enabled) before "
    "answering questions about prior work, decisions, dates, people, preferences, or todos."
)
MEMORY_GET_DESCRIPTION = (
    "Read specific lines of a memory file (MEMORY.md or memory/*.md) after memory_search, keeping "
    "context small; the whole file when neither from nor lines is given."
)


def _not_a_bool(value: Any) -> Any:
    """pydantic takes `true` for 1: a line number that is a boolean is a mistaken call, refused like `2.5`."""
    if isinstance(value, bool):
        raise ValueError("a line number must be an integer, not true/false")
    return value


LineNumber = Annotated[int | None, BeforeValidator(_not_a_bool)]


def lines_wanted(from_line: int | None, lines: int | None, start_line: int | None, end_line: int | None
                 ) -> tuple[int | None, int | None]:
    """memory_get's (from, lines): `from`/`lines`, or the `startLine`/`endLine` memory_search gives (inclusive)."""
    if start_line is None and end_line is None:
        return from_line, lines
    if from_line is not None or lines is not None:
        raise ToolError("give either from/lines or startLine/endLine, not both",
                        "startLine/endLine as a memory_search result names them, or from (first line) and lines")
    first = 1 if start_line is None else start_line
    if end_line is not None and end_line < first:
        raise ToolError(f"endLine {end_line} is before startLine {first}",
                        "give the lines as memory_search named them (startLine ≤ endLine)")
    return first, None if end_line is None else end_line - first + 1


class MemoryTools:
    """memory_search and memory_get for one reader. `private` is the older switch: True is the owner,
    False a reader of shared notes only; a `reader` given wins."""

    def __init__(self, service: MemoryService, *, private: bool = True, reader: Reader | None = None) -> None:
        self.service = service
        self.reader = reader if reader is not None else OWNER_READER if private else Reader(UNKNOWN)
        self.private = self.reader.owner

    def tools(self) -> list[Tool]:
        return [
            make_tool(self.memory_search, name="memory_search", description=MEMORY_SEARCH_DESCRIPTION),
            make_tool(self.memory_get, name="memory_get", description=MEMORY_GET_DESCRIPTION),
        ]

    def memory_search(
        self,
        query: Annotated[str, Field(description="What to look for, in natural words")],
        max_results: Annotated[int | None, Field(alias="maxResults", ge=1, le=50,
                                                 description="Default 6")] = None,
        min_score: Annotated[float | None, Field(alias="minScore", ge=0, le=1,
                                                 description="Default 0.35")] = None,
    ) -> dict[str, Any]:
        result = self.service.search(query, max_results, min_score, reader=self.reader)
        if not self.private:
            # The same notice whatever was dropped (see WITHHELD_NOTICE): never a per-query signal.
            kept = [r for r in result.get("results", []) if r.get("source") != "sessions" and not self._private_hit(r)]
            result = {**result, "results": kept, "withheld": f"{WITHHELD_NOTICE} ({PRIVACY_RULE})"}
        return result

    def memory_get(
        self,
        path: Annotated[str, Field(description="Workspace-relative path from memory_search")],
        from_line: Annotated[LineNumber, Field(alias="from", ge=1, description="First line (1-based)")] = None,
        lines: Annotated[LineNumber, Field(ge=1, description="Number of lines")] = None,
        start_line: Annotated[LineNumber, Field(alias="startLine", ge=1,
                                                description="Or: first line, as memory_search names it")] = None,
        end_line: Annotated[LineNumber, Field(alias="endLine", ge=1,
                                              description="With startLine: last line, as memory_search names it")] = None,
    ) -> dict[str, Any]:
        from_line, lines = lines_wanted(from_line, lines, start_line, end_line)
        if not self.private:
            path = self._chat_path(path)
        if not self.private and self._names_long_term(path):
            raise PathPolicyError(f"{MEMORY_FILE} is not available in this session", PRIVACY_RULE)
        if not self.private and path.startswith(SESSIONS_PREFIX):
            raise PathPolicyError("session transcripts are not available in this session", PRIVACY_RULE)
        got = self.service.get(path, reader=self.reader)
        if from_line is None and lines is None:
            return got
        return {**got, "text": line_range(str(got["path"]), str(got["text"]), from_line, lines)}

    @staticmethod
    def _chat_path(path: str) -> str:
        """The workspace-relative path a chat's `path` names (`/workspace/x` is `x`), or the one refusal every
        other absolute path gets (module docstring)."""
        if path.startswith(ROOM_ROOT + "/"):
            path = path[len(ROOM_ROOT) + 1:]
        if path.startswith("~") or os.path.isabs(path) or path == ROOM_ROOT:
            raise absolute_refused(path)
        return path

    def _private_hit(self, hit: dict[str, Any]) -> bool:
        path = str(hit.get("path", ""))
        if is_private_path(path):
            return True
        real = self.service.workspace / path
        return is_long_term(real, self.service.workspace) or is_hard_linked(real)

    def _names_long_term(self, path: str) -> bool:
        """The path names MEMORY.md (decided on the name alone). A memory file that is MEMORY.md by identity
        or hard-linked is refused by the service with the answer a missing file gets: saying why here
        would tell a chat that the file exists."""
        ws = self.service.workspace
        try:
            real, _ = resolve_memory_path(ws, path, self.service.cfg.extra_paths)
        except PathPolicyError:
            return False  # service.get will refuse it with the precise rule
        # No symlink on the way (resolve_memory_path refuses them), so this compares names only.
        return os.path.normpath(real) == os.path.normpath(ws.resolve() / MEMORY_FILE)
