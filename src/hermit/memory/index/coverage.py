"""What the index covers, by where it comes from (MEMORY.md, memory/**, each extra path, sessions), and
the Markdown files in the workspace it does not cover.

Notes written outside `memory/` used to be silently not indexed: a search found nothing and nothing said
why. `memory status`/`index` show the covered sources, and an empty search counts the Markdown files
lying elsewhere in the workspace (a bounded walk: at most MAX_ENTRIES directory entries) so it can point
at `memory_search.extra_paths`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
# Workspace files that are instructions, not notes: never suggested for indexing.
BOOTSTRAP_FILES = frozenset({"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "HEARTBEAT.md",
                             "BOOTSTRAP.md"})
MAX_ENTRIES = 20_000  # directory entries looked at, at most, when counting Markdown files outside memory
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "inbox"})


def _extra_roots(workspace: Path, extra_paths: Iterable[str]) -> list[tuple[str, Path]]:
    roots = []
    for raw in extra_paths:
        p = Path(raw).expanduser()
        roots.append((raw, p if p.is_absolute() else workspace / p))
    return roots


def indexed_sources(paths: Iterable[tuple[str, str]], workspace: Path, extra_paths: Iterable[str]
                    ) -> dict[str, object]:
    """Indexed files per origin, from (stored path, source) pairs: `{"MEMORY.md": n, "memory/": n,
    "extra_paths": {raw: n}, "sessions": n}`."""
    roots = _extra_roots(workspace, extra_paths)
    top = memory_dir = sessions = 0
    extras = {raw: 0 for raw, _ in roots}
    for path, source in paths:
        if source == "sessions":
            sessions += 1
        elif path == MEMORY_FILE:
            top += 1
        elif path.startswith(f"{MEMORY_DIR}/"):
            memory_dir += 1
        else:
            full = Path(path) if os.path.isabs(path) else workspace / path
            for raw, root in roots:
                if full == root or root in full.parents:
                    extras[raw] += 1
                    break
    return {MEMORY_FILE: top, f"{MEMORY_DIR}/": memory_dir, "extra_paths": extras, "sessions": sessions}


def describe_sources(sources: dict[str, object], sessions_enabled: bool) -> str:
    """One line: `MEMORY.md (1 file), memory/** (12), extra path notes/ (3), sessions (off)`."""
    parts = [f"MEMORY.md ({sources.get(MEMORY_FILE, 0)})", f"memory/** ({sources.get(f'{MEMORY_DIR}/', 0)})"]
    extras = sources.get("extra_paths") or {}
    assert isinstance(extras, dict)
    parts += [f"extra path {raw} ({n})" for raw, n in extras.items()]
    parts.append(f"sessions ({sources.get('sessions', 0)})" if sessions_enabled else "sessions (off)")
    return ", ".join(parts)


@dataclass
class Uncovered:
    """Markdown files in the workspace that no source covers (bootstrap files aside)."""

    count: int = 0
    examples: list[str] = field(default_factory=list)
    folders: dict[str, int] = field(default_factory=dict)  # top-level folder (or "." for the root) -> files
    capped: bool = False  # the walk stopped at MAX_ENTRIES: there may be more

    def hint(self) -> str:
        """How to index them: the folders to add to extra_paths."""
        top = sorted(self.folders.items(), key=lambda kv: -kv[1])[:3]
        names = [f"{f}/" if f != "." else "the workspace's top-level .md files" for f, _ in top]
        example = next((f for f, _ in top if f != "."), "notes")
        return (f"{self.count}{'+' if self.capped else ''} Markdown file{'s' if self.count != 1 else ''} in the "
                f"workspace {'are' if self.count != 1 else 'is'} not indexed (in {', '.join(names)}): only "
                f"MEMORY.md, memory/** and memory_search.extra_paths are — set agents.defaults.memory_search."
                f"extra_paths: [{example}] in the config to index them, or move the notes into memory/")


def uncovered_markdown(workspace: Path, extra_paths: Iterable[str], *, max_entries: int = MAX_ENTRIES,
                       examples: int = 3) -> Uncovered:
    """Count the workspace's Markdown files outside MEMORY.md, memory/ and the extra paths (symlinks and
    hidden folders are not followed; at most `max_entries` entries are looked at)."""
    covered = [root for _, root in _extra_roots(workspace, extra_paths)]
    found = Uncovered()
    seen = 0
    stack = [workspace]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for ent in entries:
            seen += 1
            if seen > max_entries:
                found.capped = True
                return found
            if ent.name.startswith(".") or ent.is_symlink():
                continue
            path = Path(ent.path)
            if path == workspace / MEMORY_DIR or any(path == c or c in path.parents for c in covered):
                continue
            if ent.is_dir():
                if ent.name not in SKIP_DIRS:
                    stack.append(path)
                continue
            if not ent.name.lower().endswith(".md") or not ent.is_file():
                continue
            rel = path.relative_to(workspace)
            if len(rel.parts) == 1 and (ent.name == MEMORY_FILE or ent.name in BOOTSTRAP_FILES):
                continue
            found.count += 1
            folder = rel.parts[0] if len(rel.parts) > 1 else "."
            found.folders[folder] = found.folders.get(folder, 0) + 1
            if len(found.examples) < examples:
                found.examples.append(rel.as_posix())
    return found
