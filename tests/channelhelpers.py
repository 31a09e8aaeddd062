"""Test helpers for channel adapters: a real asyncio-queue sink standing in for the gateway's bus."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hermit.channels.base import InboundMessage, PublishOutcome
from hermit.channels.retry import RetryPolicy

T = TypeVar("T")

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


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


def run(main: Callable[[], Awaitable[T]], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(main(), timeout)
    return asyncio.run(bounded())
