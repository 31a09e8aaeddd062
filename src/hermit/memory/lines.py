"""A range of a memory file's lines, as memory_get reads it: 1-based, and a start past the last line an error.

A start past the end read as an empty success, so a model took the lines it asked for as blank. The error names
how many lines there are. (memory/service.get slices the same way for the CLI and the web app, which still answer
such a start with empty text.)
"""

from __future__ import annotations

from hermit.errors import PathPolicyError


def line_range(shown: str, text: str, from_line: int | None, lines: int | None) -> str:
    """`lines` lines of `text` (the file `shown`) from line `from_line` (1-based; all of them when None)."""
    all_lines = text.split("\n")
    count = len(all_lines) - 1 if text.endswith("\n") else len(all_lines)
    start = (from_line or 1) - 1
    if start >= max(count, 1):
        raise PathPolicyError(f"line {start + 1} is past the end of {shown} ({count} line{'s' if count != 1 else ''})",
                              f"ask for a line from 1 to {max(count, 1)}, or omit from/startLine for the whole file")
    end = len(all_lines) if lines is None else start + lines
    return "\n".join(all_lines[start:end])
