"""What the scheduler needs from its host (the gateway, or the CLI for `hermit cron run`): run a turn in a
session, tell whether a session is busy, deliver text to a channel peer.

`LocalHost` is the in-process host: it runs the agents' AgentRuntimes itself and hands deliveries to a
callback (the CLI prints them; tests give a channel). The gateway provides its own host, which queues
turns with the user's messages and delivers through its channels.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from hermit.agent.turn import TurnResult
from hermit.channels.base import Target
from hermit.errors import ConfigError

if TYPE_CHECKING:  # the doctor's job health reads SchedulerHost's module without loading the runtime
    from hermit.agent.runtime import AgentRuntime


class TurnOutcome(Protocol):
    """The part of a turn's result the scheduler reads (AgentRuntime's TurnResult has it)."""

    @property
    def reply(self) -> str: ...

    @property
    def delivered(self) -> bool: ...  # False for a silent (NO_REPLY) or empty reply

    @property
    def session_id(self) -> str: ...


class SchedulerHost(Protocol):
    async def run_turn(self, agent_id: str, session_key: str, text: str, *,
                       heartbeat: bool = False) -> TurnOutcome:
        """Run one turn; `heartbeat` marks a background turn (no reset, no flush, no activity refresh)."""

    def busy(self, session_key: str) -> bool:
        """A turn is running or queued in the session (the heartbeat then skips its slot)."""

    async def deliver(self, target: Target, text: str) -> None:
        """Send text to a channel peer; raises ChannelError (or another HermitError) when it cannot."""


Deliver = Callable[[Target, str], Awaitable[None]]


class LocalHost:
    """Runs turns on in-process runtimes. `threaded=False` runs them on the event loop itself, which a
    short-lived CLI run or a simulated-clock test wants (deterministic order, no worker threads)."""

    def __init__(self, runtimes: Mapping[str, AgentRuntime], deliver: Deliver, *, threaded: bool = True) -> None:
        self.runtimes = dict(runtimes)
        self._deliver = deliver
        self.threaded = threaded
        self._busy: dict[tuple[str, str], int] = {}

    def runtime(self, agent_id: str) -> AgentRuntime:
        try:
            return self.runtimes[agent_id]
        except KeyError:
            raise ConfigError(f"no agent {agent_id!r} here (agents: {', '.join(self.runtimes)})",
                              "add it under agents.list, or change the job's agent_id") from None

    async def run_turn(self, agent_id: str, session_key: str, text: str, *,
                       heartbeat: bool = False) -> TurnResult:
        runtime = self.runtime(agent_id)
        key = (agent_id, session_key)
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            if self.threaded:
                return await asyncio.to_thread(runtime.run_turn, session_key, text, heartbeat=heartbeat)
            return runtime.run_turn(session_key, text, heartbeat=heartbeat)
        finally:
            self._busy[key] -= 1

    def busy(self, session_key: str) -> bool:
        if any(n > 0 for (_, key), n in self._busy.items() if key == session_key):
            return True
        return any(runtime.session_busy(session_key) for runtime in self.runtimes.values())

    async def deliver(self, target: Target, text: str) -> None:
        await self._deliver(target, text)
