"""Watch memory files and re-index what changed, debounced (1.5 s by default), surviving churn and hostile folders.

watchfiles (Rust notify) is imported lazily, and never asked to watch a tree: notify's recursive watch
follows symlinked directories (watchfiles 1.3 has no option against it), so another user who may write an
extra path could link `/usr` or `/` into it and have the gateway take an inotify watch on every directory
below (15,503 for /usr, all from the owner's per-uid limit). Instead the folders are listed here the way
the sync lists notes — each opened O_NOFOLLOW from its parent's descriptor, so a link is never entered
— and each real folder is watched on its own (non-recursively), at most MAX_WATCHED_DIRS of them:

- the workspace itself (for MEMORY.md and memory/ appearing or going), every folder under memory/ and
  under each extra folder, the folder of each extra file;
- for a root that does not exist yet, the nearest folder above it that does, so its creation is seen.

A folder that cannot be read (mode 000, another user's) is left out with one warning naming it and the
rest is watched; the sync cannot list its notes either and says so. When a folder appears, goes or
changes its mode, the folders are listed again and the watch restarted on the new list (a folder that
vanished between the listing and the watch is listed again too), and a sync runs: it re-lists files, so
notes written while the watch was being restarted are indexed. A burst of writes becomes one sync once
it has been quiet for the debounce window; files appearing, vanishing or being renamed mid-sync are
simply picked up next time.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hermit.memory.index.sync import SyncReport
from hermit.memory.policy.paths import unsafe_extra_path

log = logging.getLogger(__name__)

MAX_WATCHED_DIRS = 4096  # one inotify watch each; the owner's uid has ~8k-500k in all, shared by every program
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SETUP_RETRIES = 5  # a folder vanishing between the listing and the watch, again and again: give up (restarted)


@dataclass
class WatchPlan:
    """What to watch: `dirs` (each on its own), the `trees` whose every note or folder event matters, and
    the `names` that matter in the other watched folders; `unreadable` folders (path -> why) are left out."""

    dirs: list[str] = field(default_factory=list)
    trees: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    unreadable: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    _listed: set[str] = field(default_factory=set)

    def add_dir(self, path: str) -> bool:
        if path in self._listed:
            return True
        if len(self.dirs) >= MAX_WATCHED_DIRS:
            self.truncated = True
            return False
        self._listed.add(path)
        self.dirs.append(path)
        return True

    def accepts(self, _change: object, path: str) -> bool:
        """watchfiles' filter: a change that may need a sync (or a new list of folders)."""
        if path in self.names or path in self.trees:
            return True
        if os.path.dirname(path) not in self.trees:
            return False
        # a note, or a folder (appearing, going, changing mode): not other files beside the notes
        return path.lower().endswith(".md") or not os.path.isfile(path)


def _walk_dirs(root: str, plan: WatchPlan) -> None:
    """Add `root` and every real folder below it to `plan` (never through a symlink), noting unreadable ones."""
    def visit(name: str, path: str, parent: int | None) -> None:
        try:
            fd = os.open(name, _DIR_OPEN, dir_fd=parent)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):  # gone, or a link now: not ours
                plan.unreadable[path] = e.strerror or str(e)
            return
        try:
            with os.scandir(fd) as it:
                subdirs = sorted(ent.name for ent in it if ent.is_dir(follow_symlinks=False))
        except OSError as e:
            plan.unreadable[path] = e.strerror or str(e)
            os.close(fd)
            return
        try:
            if not plan.add_dir(path):
                return
            plan.trees.add(path)
            for sub in subdirs:
                visit(sub, path + os.sep + sub, fd)
        finally:
            os.close(fd)

    visit(root, root, None)


def _nearest_existing(path: Path) -> tuple[str, str] | None:
    """(the nearest real folder above `path` that exists, the child of it on the way to `path`)."""
    child = path
    for parent in path.parents:
        if os.path.isdir(parent) and not os.path.islink(parent):
            return str(parent), str(child)
        child = parent
    return None


def plan_watch(workspace: Path, extra_paths: list[str]) -> WatchPlan:
    """The folders to watch for `workspace`'s memory and its extra paths (see the module docstring)."""
    ws = workspace.resolve()  # the owner's config may name it through a link: followed here, once
    plan = WatchPlan()
    roots: list[Path] = [ws / "memory"]
    files: list[Path] = [ws / "MEMORY.md"]
    for raw in extra_paths:
        if unsafe_extra_path(workspace, raw) is not None:
            continue  # the sync says why
        p = Path(raw).expanduser()
        p = p if p.is_absolute() else ws / p
        p = p.parent.resolve() / p.name  # the folders above it as the config names them; it, never
        (files if os.path.isfile(p) and not os.path.islink(p) else roots).append(p)
    if ws.is_dir():
        plan.add_dir(str(ws))
    for f in files:
        plan.names.add(str(f))
        if f.parent.is_dir():
            plan.add_dir(str(f.parent))
    for root in roots:
        plan.names.add(str(root))
        if os.path.isdir(root) and not os.path.islink(root):
            _walk_dirs(str(root), plan)
            if str(root) in plan.trees:
                continue
        # missing, unreadable or a symlink (never followed): watch the folder where it would change
        if (anchor := _nearest_existing(root)) is not None:
            plan.add_dir(anchor[0])
            plan.names.add(anchor[1])
    return plan


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
    from watchfiles import Change, watch

    stop = stop or threading.Event()
    warned: dict[str, str] = {}
    # Hermit debounces itself: watchfiles hands over events within ~50 ms and wakes the loop every
    # 100 ms even when nothing happened, so a sync starts `debounce_ms` after the LAST change of a
    # burst (±100 ms), not after watchfiles' own, coarser grouping.
    quiet = max(debounce_ms, 0) / 1000
    pending = False
    last_change = 0.0
    ready = on_ready
    failures = 0
    plan: WatchPlan | None = None
    while not stop.is_set():
        plan = plan or plan_watch(workspace, extra_paths)
        _warn_unwatched(plan, warned)
        replan: WatchPlan | None = None
        events = watch(*plan.dirs, watch_filter=plan.accepts, debounce=200, step=50,
                       rust_timeout=100, yield_on_timeout=True, stop_event=stop, recursive=False,
                       raise_interrupt=False, ignore_permission_denied=True)
        try:
            for changes in events:
                failures = 0
                now = time.monotonic()
                if ready is not None:  # the first yield comes after the watcher is set up (or its first events)
                    ready()
                    ready = None
                if changes:
                    log.debug("memory changes: %s", changes)
                    pending, last_change = True, now
                    if any(c != Change.modified or not p.lower().endswith(".md") for c, p in changes):
                        replan = _replan(workspace, extra_paths, plan)
                        if replan is not None:
                            break  # watch the new list of folders; the pending sync runs there
                    continue
                if not pending or now - last_change < quiet:
                    continue
                pending = False
                _sync(on_change, on_report)
        except OSError as e:  # a folder gone (or made unreadable) between the listing and the watch
            failures += 1
            if failures > _SETUP_RETRIES:
                raise
            log.debug("memory watch setup failed (%s); listing the folders again", e)
            pending, last_change = True, time.monotonic()
        finally:
            events.close()
        if replan is None and failures == 0:
            return  # stopped
        plan = replan  # None after a failed setup: listed again


def _replan(workspace: Path, extra_paths: list[str], plan: WatchPlan) -> WatchPlan | None:
    """The new plan when the folders to watch changed since `plan` (a folder appeared, went, or changed
    its mode), else None."""
    new = plan_watch(workspace, extra_paths)
    return new if set(new.dirs) != set(plan.dirs) or new.unreadable != plan.unreadable else None


def _warn_unwatched(plan: WatchPlan, warned: dict[str, str]) -> None:
    """One warning per folder left out (until it can be read again), and one when there are too many."""
    for path in [p for p in warned if p not in plan.unreadable and p != "*"]:
        log.info("memory watch: %s can be read again and is watched", path)
        del warned[path]
    for path, why in plan.unreadable.items():
        if path not in warned:
            warned[path] = why
            log.warning("memory watch: cannot watch %s (%s); the rest is watched, and notes in it are not "
                        "indexed until it can be read", path, why)
    if plan.truncated and "*" not in warned:
        warned["*"] = "too many folders"
        log.warning("memory watch: over %d folders under the memory paths; only the first are watched, "
                    "the rest are indexed by the next sync (on search or session start)", MAX_WATCHED_DIRS)


def _sync(on_change: Callable[[], SyncReport | None], on_report: Callable[[SyncReport], None] | None) -> None:
    try:
        report = on_change()
    except Exception:  # noqa: BLE001 - supervision boundary: a failed sync must not kill the watcher
        log.exception("memory sync after a file change failed; will retry on the next change")
        return
    if report is not None and on_report is not None:
        on_report(report)
