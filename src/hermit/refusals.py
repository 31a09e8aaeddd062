"""Refusal warnings, rate-limited per kind: anyone who reaches the port can make the gateway refuse, so a
flood of refusals must not fill the log and rotate its history out.

Each kind (a foreign Host, a refused Origin, a wrong token, a challenge for another address, an oversized
frame, …) logs its first `limit` lines of a window (a minute); the rest are counted, and one line says how
many when the window closes (or, without a running event loop, before the next line of that kind). A
sustained flood writes at most `limit + 1` lines a minute per kind. logs.py puts the same limit on
uvicorn's per-connection lines, which anyone can cause too.

`clip` cuts what a client sent (a path, a header) to a length worth logging; log it with %r.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncio is imported where a refusal is counted (channels.access is in every `cron list`)
    import asyncio

LIMIT = 10
WINDOW_SECONDS = 60.0
CLIP_CHARS = 200
SUMMARY = "hermit_rate_summary"  # set on the count's own record (`extra`), which no limit applies to
REFUSED = "%d more %s refused in the last %.0f s (only the first %d are logged)"


def clip(text: str | None, limit: int = CLIP_CHARS) -> str | None:
    """`text` cut to `limit` characters, with a note of how many were left off."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"


@dataclass
class _Window:
    start: float
    logged: int = 0
    dropped: int = 0
    timer: asyncio.TimerHandle | None = None


class RefusalLog:
    """At most `limit` lines a `window` per kind, then one warning `summary % (count, kind, window, limit)`."""

    def __init__(self, log: logging.Logger, *, limit: int = LIMIT, window: float = WINDOW_SECONDS,
                 summary: str = REFUSED, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.limit = limit
        self.window = window
        self.summary = summary
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        self._lock = threading.RLock()

    def warning(self, kind: str, msg: str, *args: object) -> None:
        """Log `msg % args` unless `kind` (what was refused, plural: "requests with a foreign Host") has had
        its `limit` lines this window; then count it."""
        if self.admit(kind):
            self.log.warning(msg, *args)

    def admit(self, kind: str) -> bool:
        """Whether a line of `kind` may be logged now (False: it is counted for the window's summary)."""
        with self._lock:
            now = self.clock()
            w = self._windows.get(kind)
            if w is not None and now - w.start >= self.window:
                self._close(kind, w)
                w = None
            if w is None:
                w = self._windows[kind] = _Window(now)
            if w.logged < self.limit:
                w.logged += 1
                return True
            w.dropped += 1
            if w.timer is None:
                w.timer = self._schedule(kind, w)
            return False

    def _schedule(self, kind: str, w: _Window) -> asyncio.TimerHandle | None:
        import asyncio  # already loaded wherever an event loop runs

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a thread): the count is logged before the kind's next line
            return None
        return loop.call_later(max(0.0, w.start + self.window - self.clock()), self._on_timer, kind, w)

    def _on_timer(self, kind: str, w: _Window) -> None:
        w.timer = None
        with self._lock:
            if self._windows.get(kind) is w:
                self._close(kind, w)

    def _close(self, kind: str, w: _Window) -> None:
        """End `kind`'s window `w`, saying how many lines it did not log (the caller holds the lock)."""
        del self._windows[kind]
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w.dropped:
            self.log.warning(self.summary, w.dropped, kind, self.window, self.limit, extra={SUMMARY: True})
