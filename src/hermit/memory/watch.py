"""Watch memory files and re-index what changed, debounced (1.5 s by default), surviving churn.

watchfiles (Rust notify) is imported lazily. Events are filtered to MEMORY.md, memory/**/*.md and the
configured extra paths; a burst of writes within the debounce window becomes one sync, and sync itself
re-lists files, so files appearing, vanishing or being renamed mid-sync are simply picked up next time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from hermit.memory.sync import SyncReport

log = logging.getLogger(__name__)


def _relevant(workspace: Path, extra_roots: list[Path]) -> Callable[[object, str], bool]:
    ws = workspace.resolve()

    def accept(_change: object, path: str) -> bool:
        p = Path(path)
        if not p.name.lower().endswith(".md"):
            # a deleted/renamed directory under memory/ also matters
            return p == ws / "memory" or (ws / "memory") in p.parents
        try:
            rel = p.resolve().relative_to(ws).as_posix() if p.exists() else p.relative_to(ws).as_posix()
        except ValueError:
            return any(root == p or root in p.parents for root in extra_roots)
        return rel == "MEMORY.md" or rel.startswith("memory/") or any(
            root == p or root in p.parents for root in extra_roots)

    return accept


def watch_memory(
    workspace: Path,
    extra_paths: list[str],
    on_change: Callable[[], SyncReport | None],
    *,
    debounce_ms: int = 1500,
    stop: threading.Event | None = None,
    on_report: Callable[[SyncReport], None] | None = None,
) -> None:
    """Block, calling `on_change` (a sync) after each debounced batch of relevant file events."""
    from watchfiles import watch

    roots = [workspace]
    extra_roots: list[Path] = []
    for raw in extra_paths:
        p = Path(raw).expanduser()
        p = p if p.is_absolute() else workspace / p
        extra_roots.append(p.resolve())
        if p.exists() and not (p.resolve() == workspace.resolve() or workspace.resolve() in p.resolve().parents):
            roots.append(p)
    accept = _relevant(workspace, extra_roots)
    # step = the quiet period that ends a burst (the debounce); debounce = the longest a burst can be held.
    quiet = max(debounce_ms, 10)
    for changes in watch(*roots, watch_filter=accept, debounce=max(quiet * 4, 6000), step=quiet,
                         stop_event=stop, recursive=True, raise_interrupt=False):
        log.debug("memory changes: %s", changes)
        try:
            report = on_change()
        except Exception:  # noqa: BLE001 - supervision boundary: a failed sync must not kill the watcher
            log.exception("memory sync after a file change failed; will retry on the next change")
            continue
        if report is not None and on_report is not None:
            on_report(report)
