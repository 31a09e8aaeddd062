"""`hermit memory get`: a memory file (or a line range of it) read as the owner's memory_get reads it, without the
memory service. Building the service opened the index (and its vector extension), imported the embedding code and
numpy, and in a new state dir created the index file — about half a second of CPU for reading one Markdown file.

The rules are memory/service.MemoryService.get's for the owner, from the same functions: the path policy
(resolve_memory_path: inside the workspace or an extra path, Markdown, no symlink), a regular file (read_regular),
not binary, decoded as the index decodes it, a file whose origin markers broke gets the same note, and session
transcripts are rendered as the index holds them. A range is the agent's memory_get's (memory/lines.line_range):
a start past the last line is an error naming how many lines there are, not an empty success.
tests/test_s20_cli_memory_get.py holds the two to the same answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermit.config.load import AgentConfig
from hermit.errors import PathPolicyError
from hermit.memory.lines import line_range

# memory.index.session_source.SESSIONS_PREFIX, without importing the transcript renderer for every file (the test
# holds the two equal).
SESSIONS = "sessions/"


def read_memory(agent: AgentConfig, path: str, from_line: int | None, lines: int | None) -> dict[str, Any]:
    """The memory_get result {"path", "text"[, "note"]} of `path` for the owner of `agent`'s memory."""
    from hermit.memory.policy.audience import is_private_path
    from hermit.memory.policy.paths import resolve_memory_path
    from hermit.memory.policy.provenance import damaged_note, marker_damage
    from hermit.textfile import NotRegularFile, decode_text, read_regular

    cfg = agent.settings.memory_search
    if from_line is not None and from_line < 1:
        raise PathPolicyError("'from' is 1-based", "pass from ≥ 1")
    if lines is not None and lines < 1:
        raise PathPolicyError("'lines' must be ≥ 1", "omit it to read to the end of the file")
    if path.startswith(SESSIONS):
        from hermit.memory.index.session_source import read_transcript

        text = read_transcript(agent.sessions_dir if "sessions" in cfg.sources else None, path)
        return {"path": path, "text": _range(path, text, from_line, lines)}
    real, shown = resolve_memory_path(agent.workspace, path, cfg.extra_paths)
    try:
        data = read_regular(Path(real))
    except FileNotFoundError:
        raise PathPolicyError(f"no such memory file: {shown}", "use a path from memory_search results") from None
    except NotRegularFile as e:
        raise PathPolicyError(f"{shown} is {e.kind}, not a memory file",
                              "memory files are regular Markdown files; use a path from memory_search results") from None
    except OSError as e:
        raise PathPolicyError(f"cannot read {shown}: {e.strerror or e}", "check the file's permissions") from e
    if b"\x00" in data[:8192]:
        raise PathPolicyError(f"{shown} looks binary", "memory files must be text")
    text = decode_text(data).text
    damage = None if is_private_path(shown) else marker_damage(text)
    extra = {"note": damaged_note(shown, damage)} if damage is not None else {}
    return {"path": shown, "text": _range(shown, text, from_line, lines), **extra}


def _range(shown: str, text: str, from_line: int | None, lines: int | None) -> str:
    return text if from_line is None and lines is None else line_range(shown, text, from_line, lines)
