"""The gateway's agents: one AgentRuntime per agent, each turn run in a worker thread, events sent back
to the event loop in order.

AgentRuntime is synchronous (SQLite, the embedding model, HTTP to the provider), so a turn runs in its
own daemon thread and the loop only awaits its result. Daemon threads rather than the loop's default
executor: at shutdown a turn blocked in a provider call that ignores its cancel token must not hold
the process open; the gateway marks such a turn interrupted in its transcript itself and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from hermit.agent.loop import AgentEvent
from hermit.agent.runtime import AgentRuntime
from hermit.agent.turn import TurnResult
from hermit.errors import ConfigError, HermitError, SessionError
from hermit.gateway.state import HowRun
from hermit.messages import FiledFile, ImagePart, Sender
from hermit.models.cancel import CancelToken
from hermit.sessions.keys import agent_id_of

log = logging.getLogger("hermit.gateway")

T = TypeVar("T")
EventCallback = Callable[[AgentEvent], None]


def _settle(fut: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)  # type: ignore[arg-type]


async def in_daemon_thread(fn: Callable[[], T], name: str) -> T:
    """Run `fn` in a new daemon thread and await its result on the running loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine as is
            error = e
        # RuntimeError: the loop is closed, the gateway exited while this turn was stuck.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, fut, value, error)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await fut


@dataclass
class RunningTurn:
    agent_id: str
    session_key: str
    cancel: CancelToken = field(default_factory=CancelToken)
    finished: threading.Event = field(default_factory=threading.Event)


class AgentHost:
    """The runtimes by agent id, and the turns running in them now."""

    def __init__(self, runtimes: Mapping[str, AgentRuntime]) -> None:
        self.runtimes = dict(runtimes)
        self.running: dict[int, RunningTurn] = {}
        self._ids = itertools.count(1)

    def runtime(self, agent_id: str) -> AgentRuntime:
        try:
            return self.runtimes[agent_id]
        except KeyError:
            raise ConfigError(f"no agent {agent_id!r} in this gateway (agents: {', '.join(self.runtimes)})",
                              f"add it under agents.list and restart the gateway: {HowRun.this_process().restart()}") from None

    def holder(self, key: str, agent: str | None) -> str:
        """The agent whose session `key` is, for a session the web chat chose with the agent it resolved (`agent`).
        A key naming an agent must name that one; a key naming none (a CLI session `notes`) is that agent's, and
        without an agent it must be in exactly one agent's store: never the first of several, which ran the
        owner's words for one agent in another's workspace and memory."""
        named = agent_id_of(key)
        agent_id = agent or named
        if named is not None and agent_id != named:
            raise SessionError(f"session {key!r} belongs to agent {named!r}, not {agent_id!r}",
                               "pick a session from sessions.list")
        if agent_id is None:
            holders = [a for a, r in self.runtimes.items() if r.store.get(key)]
            if len(holders) > 1:
                raise SessionError(f"session {key!r} is in the stores of agents {', '.join(sorted(holders))}",
                                   "say which agent's session is meant")
            agent_id = holders[0] if holders else None
        if agent_id is None or agent_id not in self.runtimes:
            raise SessionError(f"session {key!r} belongs to no agent of this gateway",
                               "pick a session from sessions.list")
        return agent_id

    async def run_turn(self, agent_id: str, session_key: str, text: str, *, heartbeat: bool = False,
                       on_event: EventCallback | None = None, sender: Sender | None = None,
                       ref: str | None = None, images: tuple[ImagePart, ...] = (),
                       files: tuple[FiledFile, ...] = ()) -> TurnResult:
        """One turn in a worker thread. `on_event` is called on the event loop, in the order the runtime
        emitted the events (call_soon_threadsafe keeps FIFO order)."""
        runtime = self.runtime(agent_id)
        loop = asyncio.get_running_loop()
        turn = RunningTurn(agent_id, session_key)
        turn_no = next(self._ids)
        self.running[turn_no] = turn

        def forward(event: AgentEvent) -> None:
            if on_event is not None:
                with contextlib.suppress(RuntimeError):  # loop closed at shutdown: nobody listens any more
                    loop.call_soon_threadsafe(on_event, event)

        def work() -> TurnResult:
            try:
                return runtime.run_turn(session_key, text, forward if on_event else None,
                                        stream=on_event is not None, heartbeat=heartbeat, cancel=turn.cancel,
                                        sender=sender,  # recorded in a group's transcript (agent/speakers.py)
                                        ref=ref,  # the platform's message id: a delete can retract it
                                        images=images,  # photos it brought, for a model that reads them
                                        files=files)  # what was filed for it: its delete removes them
            finally:
                turn.finished.set()

        try:
            return await in_daemon_thread(work, f"turn-{turn_no}")
        finally:
            self.running.pop(turn_no, None)

    def cancel_all(self) -> int:
        for turn in self.running.values():
            turn.cancel.cancel()
        return len(self.running)

    def mark_stuck_interrupted(self) -> list[str]:
        """For turns still blocked after their cancel token was cancelled (a call that does not
        return): write the `interrupted` entry the runtime would have written, so the transcript says
        the turn did not finish. Returns the affected session keys."""
        keys = []
        for turn in list(self.running.values()):
            if turn.finished.is_set():
                continue
            runtime = self.runtimes[turn.agent_id]
            try:
                record = runtime.store.get(turn.session_key)
                if record is not None:
                    runtime.store.open_transcript(record).append_custom(
                        "interrupted", {"reason": "the gateway stopped while the model call was still running"})
                    keys.append(turn.session_key)
            except HermitError as e:
                log.error("could not mark %s interrupted: %s", turn.session_key, e)
        return keys

    def close(self) -> None:
        for runtime in self.runtimes.values():
            runtime.close()
