"""memory_get's path rules: MEMORY.md, memory/**, configured extra paths; .md only; no symlinks; no escape —
and who besides the owner could change what an extra path holds."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hermit.config.paths import not_own_file, unsafe_parent
from hermit.errors import PathPolicyError
from hermit.messages import valid_text

RULES = "memory_get reads MEMORY.md, files under memory/ and configured extra paths (.md only, no symlinks)"


def _within(p: Path, root: Path) -> bool:
    try:
        p.relative_to(root)
        return True
    except ValueError:
        return False


def unsafe_extra_path(workspace: Path, raw: str) -> str | None:
    """Why `raw` may not be an extra memory path, or None. An empty entry, `.`, the workspace itself or
    a folder holding it would make every workspace file memory (AGENTS.md, SOUL.md… readable through
    memory_get and indexed): config validation refuses the ones it can see, this refuses them at use."""
    if not raw or not raw.strip():
        return "an empty entry would index the whole workspace"
    p = Path(raw).expanduser()
    root = (p if p.is_absolute() else workspace / p).resolve()
    ws = workspace.resolve()
    if root == ws or _within(ws, root):
        return "it names the workspace itself (or a folder holding it), so every workspace file would be memory"
    return None


MAX_JUDGED = 10_000  # entries of an extra folder judged by `extra_path_writers` (a doctor check, not a sync)


def extra_path_writers(workspace: Path, raw: str) -> str | None:
    """Who besides the owner could change what the extra memory path `raw` holds, in words ("/srv/notes
    belongs to another user (uid 1007)"), or None. They could put text into the owner's memory (searched
    and quoted as the owner's notes), or swap its folders for links and plant folder trees for the watcher.

    The rule of hermit.config.paths for folders that hold the owner's notes, applied to the path, every
    folder and note in it (walked without following links, at most MAX_JUDGED entries) and every folder
    above it: the path and what it holds must be the current user's and not writable by every user
    (`not_own_file`; group write is accepted, as with a umask of 002, for a group no other user is in); each
    folder above it the user's or root's and not writable by every user (or such a group) unless sticky
    (`not_safe_parent`: /tmp is fine, a folder another user made in it is not). A path that does not exist yet
    is judged by the folders above it."""
    p = Path(raw).expanduser()
    p = p if p.is_absolute() else workspace / p
    if p.is_symlink():
        return None  # not followed: the sync skips it and says so
    real = p.parent.resolve() / p.name
    if (above := unsafe_parent(real)) is not None:
        return f"{above[0]} (above it) {above[1]}"
    judged = 0
    todo = [str(real)]
    while todo and judged < MAX_JUDGED:
        path = todo.pop()
        try:
            st = os.lstat(path)
        except OSError:
            continue
        judged += 1
        if (why := not_own_file(st)) is not None:
            return f"{path} {why}"
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(path) as it:
                    todo.extend(e.path for e in it if e.is_dir(follow_symlinks=False)
                                or e.name.lower().endswith(".md"))
            except OSError:
                continue  # unreadable: the sync says it cannot list it
    return None


def safe_extra_roots(workspace: Path, extra_paths: list[str]) -> list[Path]:
    """The resolved roots of the configured extra paths that may be memory (see `unsafe_extra_path`)."""
    ws = workspace.resolve()
    out = []
    for e in extra_paths:
        if unsafe_extra_path(workspace, e) is None:
            ep = Path(e).expanduser()
            out.append((ep if ep.is_absolute() else ws / ep).resolve())
    return out


def absolute_refused(raw: str) -> PathPolicyError:
    """The answer to an absolute path memory_get does not take: the same words for every such path."""
    return PathPolicyError(f"absolute path refused: {raw}",
                           "pass a workspace-relative path such as memory/2026-01-20.md; " + RULES)


def _checked_real(cand: Path, raw: str, ws: Path, extras: list[Path]) -> Path:
    """`cand` resolved, refusing a symlink anywhere on the way from the workspace (or extra root) to it."""
    probe = cand
    root_for = ws if _within(Path(os.path.normpath(cand)), ws) else None
    while True:
        if probe.is_symlink():
            raise PathPolicyError(f"symlinks are not followed: {raw}", RULES)
        if probe == ws or probe.parent == probe or (root_for is None and probe in extras):
            break
        probe = probe.parent
    return cand.resolve()


def resolve_memory_path(workspace: Path, raw: str, extra_paths: list[str]) -> tuple[Path, str]:
    """(absolute path, display path) for `raw`, or PathPolicyError naming the rule it breaks."""
    if not raw or not raw.strip():
        raise PathPolicyError("empty path", RULES)
    if "\x00" in raw:
        raise PathPolicyError("path contains a NUL byte", RULES)
    if valid_text(raw) != raw:
        raise PathPolicyError("path is not valid text (a lone surrogate)", RULES)
    ws = workspace.resolve()
    extras = safe_extra_roots(workspace, extra_paths)
    given = Path(raw).expanduser()
    if given.is_absolute():
        cand = given
        if not any(_within(Path(os.path.normpath(cand)), root) for root in extras):
            raise absolute_refused(raw)
    else:
        if ".." in given.parts:
            raise PathPolicyError(f"path escapes the workspace: {raw}", "'..' is not allowed; " + RULES)
        cand = ws / given
    if not cand.name.lower().endswith(".md"):
        raise PathPolicyError(f"not a Markdown file: {raw}", "only .md files are memory; " + RULES)
    try:
        real = _checked_real(cand, raw, ws, extras)
    except OSError as e:  # a name too long, a loop: its reason, never the host path the OS error names
        raise PathPolicyError(f"cannot use this path ({e.strerror or type(e).__name__}): {raw}", RULES) from None
    rel = None
    if _within(real, ws):
        rel = real.relative_to(ws).as_posix()
        allowed = rel == "MEMORY.md" or rel.startswith("memory/") or any(_within(real, r) for r in extras)
        if not allowed:
            raise PathPolicyError(f"not a memory file: {raw}", RULES)
    elif not any(_within(real, r) for r in extras):
        raise PathPolicyError(f"path is outside the workspace: {raw}", RULES)
    return real, rel or real.as_posix()
