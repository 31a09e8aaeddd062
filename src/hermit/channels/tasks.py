"""Background tasks a channel owns: cancelling one cleanly, and per-conversation typing indicators."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from hermit.channels.base import Target


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` and wait until it has finished unwinding."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class TypingIndicators:
    """Platforms show "typing…" for a few seconds per call: while a turn runs, repeat the call per target.

    Best effort: a failed call ends that target's indicator quietly. Each indicator stops by itself after
    `limit_seconds`, in case the turn's end never arrives.
    """

    def __init__(self, send_once: Callable[[Target], Awaitable[None]], every: float,
                 limit_seconds: float = 600.0) -> None:
        self._send_once = send_once
        self._every = every
        self._rounds = max(1, int(limit_seconds / every))
        self._tasks: dict[Target, asyncio.Task[None]] = {}

    def set(self, target: Target, on: bool) -> None:
        old = self._tasks.pop(target, None)
        if old is not None:
            old.cancel()
        if on:
            self._tasks[target] = asyncio.create_task(self._loop(target))

    def stop_all(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        self._tasks.clear()

    async def _loop(self, target: Target) -> None:
        with contextlib.suppress(Exception):
            for _ in range(self._rounds):
                await self._send_once(target)
                await asyncio.sleep(self._every)
