"""Cancelling a model call from another thread or an asyncio task: CancelToken and run_cancellable.

Model calls are synchronous (the gateway runs turns in worker threads), so cancelling the asyncio task
that awaits a turn does not by itself stop the thread blocked on the provider's socket. A CancelToken
travels with the request (ModelRequest.cancel); the transport registers a callback on it that shuts
the in-flight socket down, so the blocked read returns at once and the call raises `Cancelled`.
Ctrl-C in the terminal needs none of this: the signal interrupts the main thread's read directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class CancelToken:
    """Set once; callbacks registered with `on_cancel` run when it is (or at once if it already was)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks = list(self._callbacks.values())
        for callback in callbacks:
            callback()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when cancelled meanwhile (a retry backoff that ends early)."""
        return self._event.wait(seconds)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register `callback`; returns the function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                key = self._next
                self._next += 1
                self._callbacks[key] = callback
                return lambda: self._callbacks.pop(key, None) and None
        callback()
        return lambda: None


async def run_cancellable(fn: Callable[[CancelToken], T]) -> T:
    """`fn(token)` in a worker thread. Cancelling the awaiting task cancels the token and waits for the
    thread to wind down (so the transcript records the cancellation before shutdown goes on), then
    re-raises CancelledError."""
    token = CancelToken()
    task = asyncio.ensure_future(asyncio.to_thread(fn, token))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        token.cancel()
        with contextlib.suppress(BaseException):  # the thread's own error (Cancelled) is expected here
            await task
        raise
