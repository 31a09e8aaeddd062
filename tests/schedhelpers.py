"""Helpers for scheduler tests: a simulated clock, real runtimes on a FunctionModel, an in-memory channel,
and a loop that drives SchedulerService.tick through simulated time without sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import Target
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.messages import UserMessage
from hermit.models.base import ModelRequest
from hermit.scheduler import LocalHost, SchedulerService
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply


class SimClock:
    def __init__(self, now: datetime) -> None:
        self.now = now.astimezone(UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class MemoryChannel:
    """A channel that keeps what it is sent (the test's end of a delivery)."""

    sent: list[tuple[Target, str]] = field(default_factory=list)

    async def deliver(self, target: Target, text: str) -> None:
        self.sent.append((target, text))


def last_user_text(request: ModelRequest) -> str:
    for m in reversed(request.messages):
        if isinstance(m, UserMessage):
            return m.text
    return ""


def config(home: Path, *, defaults: dict[str, Any] | None = None,
           agents: list[dict[str, Any]] | None = None, owners: tuple[str, ...] = (),
           access: dict[str, Any] | None = None) -> LoadedConfig:
    """`access`: more of the account's fields (allow_from, groups, …): who, besides the owners, the jobs'
    targets may be (a job to someone not let in is skipped)."""
    raw = {"agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                   **(defaults or {})}, "list": agents or []},
           # what the jobs' targets deliver to
           "channels": {"telegram": {"accounts": {"default": {"owners": list(owners), **(access or {})}}}}}
    return build_config(raw, StatePaths(home))


def runtimes(loaded: LoadedConfig, clock: SimClock, reply: Callable[[ModelRequest], Reply],
             ) -> tuple[dict[str, AgentRuntime], dict[str, FunctionModel]]:
    models = {a.id: FunctionModel(reply) for a in loaded.agents}
    rts = {a.id: AgentRuntime(a, models[a.id], clock=clock, fsync=False, home=loaded.paths.home)
           for a in loaded.agents}
    return rts, models


@dataclass
class Rig:
    loaded: LoadedConfig
    clock: SimClock
    channel: MemoryChannel
    host: LocalHost
    service: SchedulerService
    models: dict[str, FunctionModel]


def rig(home: Path, start: datetime, reply: Callable[[ModelRequest], Reply] = lambda r: "done", *,
        defaults: dict[str, Any] | None = None, host_class: type[LocalHost] = LocalHost,
        owners: tuple[str, ...] = (), access: dict[str, Any] | None = None) -> Rig:
    loaded = config(home, defaults=defaults, owners=owners, access=access)
    clock = SimClock(start)
    channel = MemoryChannel()
    rts, models = runtimes(loaded, clock, reply)
    host = host_class(rts, channel.deliver, threaded=False)
    service = SchedulerService(home, loaded, host, clock=clock, fsync=False)
    return Rig(loaded, clock, channel, host, service, models)


def tick_once(service: SchedulerService, clock: SimClock, when: datetime) -> None:
    """Start `service` without its loop, move `clock` to `when`, run that tick's jobs to their end, stop."""
    async def run() -> None:
        await service.start(run_loop=False)
        try:
            clock.now = when
            await service.tick(when)
            await settle(service)
        finally:
            await service.stop()

    asyncio.run(run())


async def settle(service: SchedulerService, hung: Iterable[str] = ()) -> None:
    """Let started runs and heartbeats finish (they complete on the loop without real waiting); a run of a
    `hung` job is waited for only once it is being cancelled."""
    skip = set(hung)
    for _ in range(200):
        pending = [t for k, t in service.running_tasks().items() if k not in skip or t.cancelling()]
        pending += list(service.heartbeat_tasks().values())
        if not pending:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"runs still pending: {pending}")


async def simulate(r: Rig, until: datetime, hung: Iterable[str] = ()) -> int:
    """Tick from the clock's now to `until` (exclusive), jumping straight to each wake time."""
    ticks = 0
    while r.clock.now < until:
        await r.service.tick(r.clock.now)
        await settle(r.service, hung)
        wake = await r.service.tick(r.clock.now)  # re-plan after the runs that just ended
        await settle(r.service, hung)
        ticks += 1
        assert wake > r.clock.now, f"scheduler keeps waking at {r.clock.now}"
        r.clock.now = wake
    return ticks


def all_runs(service: SchedulerService, job_ids: Iterable[str]) -> list[tuple[str, str, str]]:
    """(UTC start HH:MM:SS, job id, status) of every logged run, in start order."""
    out = []
    for job_id in job_ids:
        for run in service.jobs.store.runs(job_id, limit=0):
            start = datetime.fromisoformat(run["started_at"]).astimezone(UTC)
            out.append((start.strftime("%m-%d %H:%M:%S"), job_id, run["status"]))
    return sorted(out)
