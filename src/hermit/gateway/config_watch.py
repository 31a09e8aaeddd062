"""The gateway's watch on hermit.yaml: the config is reloaded as soon as the file is saved, not at the next look.

LiveConfig (live_config.py) reloads when one of its readers asks (`current()`: every admission, routing decision
and scheduled delivery), which is all revocation needs. What changes without anyone asking — a raised
`max_concurrent_turns` while turns wait for a slot, and no new message — is told by its listeners (`listen`), so
the file is watched: each change to a config file's name in the state dir (an edit in place, a replace by
rename, a new or removed file) calls `current()`, which reloads and tells them.

Only the state dir itself is watched, not recursively (inotify on one folder; watchfiles, imported lazily), and
only the config files' names pass the filter; when hermit.yaml is a symlink (a dotfiles checkout), the folder of
the file it names too, for that file (a save there changes nothing in the state dir). A watch that fails (an inotify limit reached, the folder gone) is
started again after `backoff` seconds, doubling up to `max_backoff` while it keeps failing: meanwhile the config
is still reloaded at each reader's look, only not on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveConfig

log = logging.getLogger("hermit.gateway")


class ConfigWatcher:
    """A gateway service (services.py): watches the state dir's config files and reloads `live` when they change."""

    name = "config-watch"

    def __init__(self, live: LiveConfig, *, backoff: float = 1.0, max_backoff: float = 300.0) -> None:
        self.live = live
        self._folder = live.started.paths.home
        self._names = frozenset(p.name for p in live.started.paths.config_candidates)
        self._targets: frozenset[Path] = frozenset()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = (backoff, max_backoff)
        self._error: str | None = None
        self.restarts = 0
        self.watching = threading.Event()  # set once changes are seen (tests wait on it, not on time)
        self.seen = threading.Event()  # set after each change was looked at (the reload done, or failed)

    async def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _accepts(self, change: Any, path: str) -> bool:
        return Path(path).name in self._names or Path(path) in self._targets

    def _linked(self) -> frozenset[Path]:
        """The files the config names in the state dir are links to (a dotfiles checkout): a save there changes
        nothing in the state dir, and every reader's look stats through the link."""
        out: set[Path] = set()
        for name in self._names:
            link = self._folder / name
            if link.is_symlink():
                with contextlib.suppress(OSError, RuntimeError):
                    out.add(link.resolve())
        return frozenset(out)

    def _run(self) -> None:
        from watchfiles import watch

        base, cap = self._backoff
        delay = base
        while not self._stop.is_set():
            try:
                self._targets = self._linked()
                linked = sorted({t.parent for t in self._targets if t.parent.is_dir()})
                folders = dict.fromkeys([self._folder, *linked])
                # yield_on_timeout: the first (empty) yield says the watch is set up; a save after it is seen.
                for changes in watch(*folders, watch_filter=self._accepts, debounce=200, step=20,
                                     rust_timeout=200, yield_on_timeout=True, stop_event=self._stop,
                                     recursive=False, raise_interrupt=False, ignore_permission_denied=True):
                    self._error, delay = None, base
                    self.watching.set()
                    if changes:
                        self._look()
                        if self._linked() != self._targets:
                            break  # a link made, removed or pointed elsewhere: watch where it leads now
                else:
                    if self._stop.is_set():
                        return
                    raise RuntimeError("the watch ended by itself")
                continue
            except Exception as e:  # noqa: BLE001 - supervision boundary: the config is still read at each look
                self._error = f"{type(e).__name__}: {e}"
                self.restarts += 1
                log.warning("the watch on %s stopped (%s); the config is still reloaded at each message; "
                            "watching again in %g s", self._folder, self._error, delay)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, cap)

    def _look(self) -> None:
        try:
            self.live.current()  # reloads, and tells the listeners, when the file changed
        except ConfigError:
            pass  # invalid: LiveConfig logged it, and keeps failing closed until it is fixed
        finally:
            self.seen.set()

    async def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)

    def status(self) -> dict[str, Any]:
        return {"running": self._thread is not None and self._thread.is_alive(), "error": self._error,
                "restarts": self.restarts}

