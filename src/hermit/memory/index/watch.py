"""Watch memory files and re-index what changed, debounced (1.5 s by default), surviving churn.

watchfiles (Rust notify) is imported lazily. Events are filtered to MEMORY.md, memory/**/*.md and the
configured extra paths; a burst of writes becomes one sync once it has been quiet for the debounce
window, and sync itself re-lists files, so files appearing, vanishing or being renamed mid-sync are
simply picked up next time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hermit.memory.index.sync import SyncReport

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
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Block, calling `on_change` (a sync) after each debounced batch of relevant file events.
    `on_ready` is called once the files are being watched: a change made after it is seen."""
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
    # Hermit debounces itself: watchfiles hands over events within ~50 ms and wakes the loop every
    # 100 ms even when nothing happened, so a sync starts `debounce_ms` after the LAST change of a
    # burst (±100 ms), not after watchfiles' own, coarser grouping.
    quiet = max(debounce_ms, 0) / 1000
    pending = False
    last_change = 0.0
    ready = on_ready
    for changes in watch(*roots, watch_filter=accept, debounce=200, step=50, rust_timeout=100,
                         yield_on_timeout=True, stop_event=stop, recursive=True, raise_interrupt=False):
        now = time.monotonic()
        if ready is not None:  # the first yield comes after the watcher is set up (or its first events)
            ready()
            ready = None
        if changes:
            log.debug("memory changes: %s", changes)
            pending, last_change = True, now
            continue
        if not pending or now - last_change < quiet:
            continue
        pending = False
        try:
            report = on_change()
        except Exception:  # noqa: BLE001 - supervision boundary: a failed sync must not kill the watcher
            log.exception("memory sync after a file change failed; will retry on the next change")
            continue
        if report is not None and on_report is not None:
            on_report(report)
