"""Test helpers for channel adapters: a real asyncio-queue sink standing in for the gateway's bus."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from hermit.channels.base import InboundMessage, PublishOutcome
from hermit.channels.webhook import ASGIApp
from hermit.retry import RetryPolicy

T = TypeVar("T")

# Four attempts with waits of at most 50 ms (a platform's Retry-After shortened to that, as the default does
# to a minute), so retry tests run in milliseconds.
FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05, max_retry_after=0.05, long_wait="cap")


class QueueSink:
    """Implements InboundSink: every published message goes on a real queue; the outcome is chosen per test."""

    def __init__(self, outcome: PublishOutcome = "queued") -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.outcome: PublishOutcome = outcome
        self.published: list[InboundMessage] = []

    async def publish(self, msg: InboundMessage) -> PublishOutcome:
        self.published.append(msg)
        await self.queue.put(msg)
        return self.outcome

    async def next(self, timeout: float = 10.0) -> InboundMessage:
        return await asyncio.wait_for(self.queue.get(), timeout)


async def until(cond: Callable[[], object], timeout: float = 20.0) -> None:
    """Wait, on the running loop, until `cond()` is true (polled every 10 ms); AssertionError after `timeout` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def run(main: Callable[[], Awaitable[T]], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(main(), timeout)
    return asyncio.run(bounded())


@asynccontextmanager
async def serve_asgi(app: ASGIApp, port: int = 0) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1:`port` (0: an ephemeral one); yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()
