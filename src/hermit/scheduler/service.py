"""SchedulerService: the one timer that runs every agent's cron jobs and heartbeats inside the gateway.

One asyncio task sleeps until the earliest due job, heartbeat or run deadline (at most
`max_sleep_seconds`, so a job added by `hermit cron add` in another process, a clock jump or a resume
from suspend is noticed), then `tick()` starts what is due, each run in its own task. No thread per job.
Decisions are made on the injected clock, so tests drive `tick(now)` through a simulated week.

- A job never overlaps its previous run: while a run is in flight its slot waits; when the run ends,
  the next slot is computed from the end time. So after downtime a missed run fires once at start
  (trigger `catch-up`), not once per missed slot.
- A run past its job's `timeout_seconds` is cancelled and logged as `timeout`; the others keep firing.
- Failures push the next run back 30 s, 1 m, 5 m, 15 m, 60 m (jobs.py); a success resets that.
- `status()` lists each agent's next heartbeat and next job and the last tick, so a stopped ticker shows.
- A run is stored in its job's state while in flight (runner.py): one a crash left there — not started
  by this service — is finished first, from where it stopped, with its own trigger and run id: a reply
  sent (or being sent) is not sent again, a turn cut off is continued in its session, not restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from hermit.config.load import AgentConfig, LoadedConfig
from hermit.errors import ConfigError, HermitError, JobError
from hermit.redaction import mask
from hermit.scheduler.control import CronJobs, register_scheduler
from hermit.scheduler.heartbeat import BUSY as BEAT_BUSY
from hermit.scheduler.heartbeat import (
    AlertMemory,
    HeartbeatOutcome,
    heartbeat_target,
    run_heartbeat,
    withheld_from,
)
from hermit.scheduler.heartbeat_schedule import BEAT_TIMES_FILE, BUSY_RETRY, BeatTimes
from hermit.scheduler.host import SchedulerHost
from hermit.scheduler.jobs import InFlight, Job
from hermit.scheduler.runner import Mark, RunHandle, execute, finish, new_handle, session_starter
from hermit.scheduler.schedule import Zone, resolve_zone
from hermit.scheduler.store import JobFile, RunRecord, Trigger
from hermit.scheduler.targets import (
    NotLetIn,
    Refused,
    hint_then,
    not_let_in,
    not_let_in_fix,
    peer_kind_of,
    resolve_target,
)
from hermit.sessions.transcript import Clock, utc_now

log = logging.getLogger("hermit.scheduler")

HEARTBEAT_TIMEOUT = timedelta(minutes=10)
IDLE_WAKE = timedelta(days=1)


@dataclass
class _Heartbeat:
    agent: AgentConfig
    every: timedelta | None
    next: datetime | None = None
    started: datetime | None = None
    task: asyncio.Task[None] | None = None
    last: dict[str, object] | None = None


@dataclass
class _Run:
    handle: RunHandle
    task: asyncio.Task[None]
    job: Job


@dataclass
class _Plan:
    file: JobFile = field(default_factory=JobFile)
    signature: object = None
    error: str | None = None


class SchedulerService:
    """A gateway service: `start()`, `stop()`, `status()`; `jobs` is the CronJobs the cron tool uses."""

    name = "scheduler"

    def __init__(self, home: Path, loaded: LoadedConfig, host: SchedulerHost, *, clock: Clock = utc_now,
                 fsync: bool = True, max_sleep_seconds: float = 30.0,
                 config: Callable[[], LoadedConfig] | None = None, restart: str | None = None) -> None:
        self.loaded = loaded
        # The config in force (the gateway's: hermit.yaml re-read when it changes; ConfigError while it is
        # invalid), asked at each tick, before each heartbeat and cron run, and again before each delivery.
        self._config = config
        self.host = host
        self.clock = clock
        self.max_sleep = max_sleep_seconds
        self.jobs = CronJobs(home, loaded, clock=clock, fsync=fsync, wake=self.wake, current=self.config,
                             restart=restart)  # the gateway's restart words, for a target with no account
        self._start_session = session_starter(loaded, clock, fsync=fsync)
        self._alerts = AlertMemory(self.jobs.store.dir / "heartbeat-alerts.json")
        self._beat_times = BeatTimes(self.jobs.store.dir / BEAT_TIMES_FILE)  # the schedule outlives a restart
        self._plan = _Plan()
        self._runs: dict[str, _Run] = {}
        self._own: set[str] = set()  # the run ids this service started (any other in flight, a crash left)
        self._held: dict[str, Refused] = {}  # job id → why its target is not let in (said once in the log)
        self._heartbeats = {a.id: _Heartbeat(a, timedelta(minutes=a.settings.heartbeat.every_minutes)
                                             if a.settings.heartbeat.every_minutes > 0 else None)
                            for a in loaded.agents}
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_event: asyncio.Event | None = None
        self.started_at: datetime | None = None
        self.last_tick: datetime | None = None

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self, *, run_loop: bool = True) -> None:
        """Plan heartbeats and jobs from now; `run_loop=False` leaves ticking to the caller (tests)."""
        self._loop = asyncio.get_running_loop()
        self._wake_event = asyncio.Event()
        self._stopping = False
        now = self.clock()
        self.started_at = now
        for hb in self._heartbeats.values():
            hb.next = self._beat_times.next_due(hb.agent.id, hb.every, now) if hb.every else None
            self._say_target(hb)  # said once at start, not only at the first heartbeat half an hour later
        self._reload(force=True)
        register_scheduler(self.jobs.store.path, self)
        if run_loop:
            self._task = asyncio.create_task(self._run_forever(), name="hermit-scheduler")

    async def stop(self) -> None:
        self._stopping = True
        tasks = [r.task for r in self._runs.values()]
        tasks += [hb.task for hb in self._heartbeats.values() if hb.task is not None]
        if self._task is not None:
            tasks.append(self._task)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        register_scheduler(self.jobs.store.path, None)

    def wake(self) -> None:
        """Re-plan now (a job was added or changed); safe to call from any thread."""
        loop, event = self._loop, self._wake_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    async def _run_forever(self) -> None:
        assert self._wake_event is not None
        while not self._stopping:
            self._wake_event.clear()
            try:
                wake_at = await self.tick()
            except Exception:  # supervision boundary: the ticker must survive anything a tick hits
                log.exception("scheduler tick failed; retrying in 5 s")
                wake_at = self.clock() + timedelta(seconds=5)
            delay = min(max((wake_at - self.clock()).total_seconds(), 0.0), self.max_sleep)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that arrives as
            # the event is set, and stop() would wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake_event.wait()

    # ---- the config in force ---------------------------------------------------------------------

    def config(self) -> LoadedConfig:
        """The config in force, applied here first when it is new; raises ConfigError while it is invalid."""
        if self._config is None:
            return self.loaded
        new = self._config()
        if new is not self.loaded:
            self._apply(new)
        return new

    def _apply(self, new: LoadedConfig) -> None:
        """A changed config: the heartbeats' settings (target, interval, hours, prompt) and the jobs' checks go
        by it. An agent it adds has no runtime here until a restart; one it removes gets no heartbeat."""
        self.loaded = self.jobs.loaded = new
        now = self.clock()
        for agent_id, hb in self._heartbeats.items():
            agent = next((a for a in new.agents if a.id == agent_id), None)
            minutes = agent.settings.heartbeat.every_minutes if agent is not None else 0
            every = timedelta(minutes=minutes) if minutes > 0 else None
            if agent is not None:
                hb.agent = agent
            if every != hb.every:  # a new interval counts from the last beat; a heartbeat turned on starts now
                was, hb.every = hb.every, every
                if every is not None and was is None:
                    self._beat_times.set(agent_id, now)
                hb.next = self._beat_times.next_due(agent_id, every, now) if every is not None else None
            if hb.every:
                self._say_target(hb)

    def _say_target(self, hb: _Heartbeat) -> None:
        """Log a heartbeat target that names no account, or reaches someone who may not read its alerts."""
        if not hb.every:
            return
        try:
            target = heartbeat_target(hb.agent.settings.heartbeat, self.loaded.config.channels, hb.agent.id)
        except HermitError as e:
            log.error("%s (%s)", e.message, hint_then(e, self.jobs.restart))
        else:
            if (withheld := withheld_from(self.loaded, hb.agent, target)) is not None:
                log.warning("%s: its alerts will not be delivered — %s", *withheld)

    def _may_deliver(self, job: Job) -> None:
        """Before a run that delivers, and before its reply is sent: the config in force is valid, names the
        target's account (on), lets whoever the target is talk to the assistant now (targets.not_let_in: not a
        revoked or never approved contact, not a group taken off `groups`; else NotLetIn: the run is skipped,
        the job kept), and lets the job's replies go there (CronJobs.check_delivery)."""
        d = job.delivery
        if d.target() is not None:
            try:
                loaded = self.config()
            except ConfigError as e:
                raise JobError(f"not run: the config is invalid, so nothing scheduled is delivered: {e.message}",
                               "fix the config file; runs deliver again once it is valid") from None
            r = resolve_target(loaded.config.channels, d.channel or "", d.account, what=f"delivery of job {job.id}")
            self._let_in(job, not_let_in(loaded, r.channel, r.account, d.peer_kind, d.to or ""))
        self.jobs.check_delivery(job)

    def _let_in(self, job: Job, who: Refused | None) -> None:
        """NotLetIn when the job's target is not let in (`who` says why); the owner is told once in the log
        per job and reason (each skipped run is in the run log, `hermit cron list`/`runs` and doctor), and
        once more when the job delivers again."""
        if who is None:
            if self._held.pop(job.id, None) is not None:
                log.info("job %s delivers again: its target %s is let in now", job.label, job.delivery.describe())
            return
        kind = peer_kind_of(job.delivery.channel or "", job.delivery.peer_kind, job.delivery.to or "")
        fix = not_let_in_fix(job.id, kind, who, job.delivery.channel or "", job.delivery.account)
        if self._held.get(job.id) != who:
            self._held[job.id] = who
            log.warning("job %s: its runs are skipped, nothing delivered: %s is not let in to talk to the assistant "
                        "now — %s", job.label, who, fix)
        raise NotLetIn(f"{who} is not let in to talk to the assistant now", fix)

    # ---- the tick --------------------------------------------------------------------------------

    def _reload(self, *, force: bool = False) -> None:
        signature = self.jobs.store.signature()
        if not force and signature == self._plan.signature:
            return
        try:
            file = self.jobs.store.load()
        except HermitError as e:  # keep the last good plan; status() and doctor show the error
            if self._plan.error != e.message:
                log.error("cannot load jobs: %s", e)
            self._plan = _Plan(self._plan.file, signature, e.message)
            return
        for bad in file.invalid:
            log.warning("skipping invalid job: %s", bad.error)
        self._plan = _Plan(file, signature)

    async def tick(self, now: datetime | None = None) -> datetime:
        """Start everything due at `now` and cancel runs past their deadline; returns when to tick next."""
        now = now or self.clock()
        self.last_tick = now
        with contextlib.suppress(ConfigError):  # the live config logs it; runs that would deliver are refused
            self.config()
        self._reload()
        for run in list(self._runs.values()):
            if not run.task.done() and now >= run.handle.deadline and not run.handle.timed_out:
                log.warning("job %s timed out after %g s; cancelling it", run.job.id, run.job.timeout_seconds)
                run.handle.timed_out = True
                run.task.cancel()
        for job in self._plan.file.jobs:
            left = self._left_in_flight(job)
            if left is not None:
                self._start(job, left.trigger, now, left)
                continue
            trigger = self._due(job, now)
            if trigger is not None:
                self._start(job, trigger, now)
        for hb in self._heartbeats.values():
            self._heartbeat_tick(hb, now)
        await asyncio.sleep(0)  # let the new runs take their first step
        return self._next_wake(now)

    def _due(self, job: Job, now: datetime) -> Trigger | None:
        if job.id in self._runs:
            return None  # never overlap: the slot waits for the run in flight
        if job.state.run_requested:
            return "manual"
        nxt = job.state.next_run_at
        if not job.enabled or nxt is None or nxt > now:
            return None
        if self.started_at is not None and nxt < self.started_at:
            return "catch-up"
        return "retry" if job.state.consecutive_errors else "schedule"

    def _left_in_flight(self, job: Job) -> InFlight | None:
        """The job's run a crash (of this gateway's predecessor) left unfinished, to finish before anything."""
        left = job.state.in_flight
        if job.id in self._runs or left is None or left.run_id in self._own:
            return None
        return left

    def _start(self, job: Job, trigger: Trigger, now: datetime, resume: InFlight | None = None) -> None:
        handle = new_handle(job, now, trigger)
        if resume is not None:  # the same run, finished now: its id, and its start for the log and the text
            handle = dataclasses.replace(handle, run_id=resume.run_id, started_at=resume.started_at)
        self._own.add(handle.run_id)
        log.info("job %s: %s run %s%s", job.label, trigger, handle.run_id,
                 f" (left {resume.phase} by a restart: finishing it)" if resume is not None else "")
        task = asyncio.create_task(self._run_job(job, handle, resume), name=f"cron-{job.id}")
        self._runs[job.id] = _Run(handle, task, job)

    def _mark(self, job_id: str) -> Mark:
        def mark(flying: InFlight) -> None:
            try:
                self.jobs.store.update_job(job_id, lambda j: j.model_copy(
                    update={"state": j.state.model_copy(update={"in_flight": flying})}))
            except (HermitError, OSError) as e:  # a broken job file must not stop the jobs of the last good plan
                log.warning("job %s: could not store run %s as %s (%s); a crash now could repeat it",
                            job_id, flying.run_id, flying.phase, e)
        return mark

    def _current(self, job: Job) -> Job:
        """The job as stored now, to tell whether it was aimed elsewhere during its run (the job as the run
        started when it was removed or the file cannot be read: the run goes on as it began)."""
        try:
            return self.jobs.store.load().get(job.id)
        except (HermitError, OSError):
            return job

    async def _run_job(self, job: Job, handle: RunHandle, resume: InFlight | None = None) -> None:
        zone = self.jobs.zone(job)
        try:
            record = await execute(job, self.host, handle, zone, self._start_session,
                                   may_deliver=self._may_deliver, mark=self._mark(job.id), resume=resume,
                                   reopen=self._start_session.reopen, current=lambda: self._current(job))
        except asyncio.CancelledError:
            record = RunRecord(handle.run_id, job.id, handle.started_at.isoformat(), "", "error", handle.trigger,
                               error="interrupted: the scheduler stopped")
            self._finish(job, record, zone)
            raise
        finally:
            self._runs.pop(job.id, None)
        self._finish(job, record, zone)
        self.wake()

    def _finish(self, job: Job, record: RunRecord, zone: Zone) -> None:
        try:
            finish(self.jobs.store, job, record, self.clock(), zone)
        except (HermitError, OSError) as e:
            log.error("job %s: could not record run %s: %s", job.id, record.run_id, e)
        self._reload()

    def _heartbeat_tick(self, hb: _Heartbeat, now: datetime) -> None:
        if hb.task is not None and not hb.task.done():
            if hb.started is not None and now - hb.started >= HEARTBEAT_TIMEOUT:
                hb.task.cancel()
            return
        if hb.every is None or hb.next is None or hb.next > now:
            return
        # The next counts from this one (as after a restart: heartbeat_schedule.py): after a long sleep or a
        # gateway down past its slot, one heartbeat now and the next a whole interval later, not one per missed slot.
        hb.next = now + hb.every
        hb.started = now
        before = self._beat_times.last(hb.agent.id)
        self._beat_times.set(hb.agent.id, now)  # before the turn: a gateway killed mid-turn does not beat again
        hb.task = asyncio.create_task(self._heartbeat(hb, now, before), name=f"heartbeat-{hb.agent.id}")

    async def _heartbeat(self, hb: _Heartbeat, now: datetime, before: datetime | None = None) -> None:
        try:
            loaded = self.config()
        except ConfigError as e:  # fail closed: no main-session turn whose alert could go to the wrong person
            hb.last = HeartbeatOutcome("skipped", mask(f"the config is invalid: {e.message}")).to_dict(now)
            log.warning("heartbeat %s: skipped: the config is invalid", hb.agent.id)
            return
        zone = resolve_zone(None, hb.agent.settings.timezone)
        try:
            outcome = await run_heartbeat(hb.agent, self.host, now, zone, self._alerts, loaded, current=self.config)
        except asyncio.CancelledError:
            hb.last = HeartbeatOutcome("error", "cancelled (timed out or the scheduler stopped)").to_dict(now)
            raise
        except HermitError as e:  # masked: status() and the web app show it
            outcome = HeartbeatOutcome("error", mask(e.message))
        except Exception as e:  # supervision boundary: a failed heartbeat must not stop the next one
            log.warning("heartbeat of %s failed", hb.agent.id, exc_info=True)
            outcome = HeartbeatOutcome("error", mask(f"{type(e).__name__}: {e}"))
        hb.last = outcome.to_dict(now)
        log.info("heartbeat %s: %s %s", hb.agent.id, outcome.status, outcome.reason)
        if outcome.status == "skipped" and outcome.reason == BEAT_BUSY and hb.next is not None:
            # The owner's turn held the main session: not a beat. Tried again soon, not a whole interval later.
            self._beat_times.set(hb.agent.id, before)
            hb.next = min(hb.next, self.clock() + BUSY_RETRY)
            self.wake()

    def _next_wake(self, now: datetime) -> datetime:
        times = [now + IDLE_WAKE]
        times += [j.state.next_run_at for j in self._plan.file.jobs
                  if j.enabled and j.state.next_run_at is not None and j.id not in self._runs]
        times += [r.handle.deadline for r in self._runs.values() if not r.handle.timed_out]
        times += [hb.next for hb in self._heartbeats.values() if hb.next is not None]
        return max(min(times), now)

    # ---- introspection ---------------------------------------------------------------------------

    def running_tasks(self) -> dict[str, asyncio.Task[None]]:
        return {job_id: r.task for job_id, r in self._runs.items()}

    def heartbeat_tasks(self) -> dict[str, asyncio.Task[None]]:
        return {a: hb.task for a, hb in self._heartbeats.items() if hb.task is not None and not hb.task.done()}

    def status(self) -> dict[str, Any]:
        now = self.clock()
        alive = self._task is not None and not self._task.done()
        stale = self.last_tick is None or now - self.last_tick > timedelta(seconds=2 * self.max_sleep + 60)
        ticker = ("ok" if alive and not stale else
                  f"stopped (last tick {self.last_tick.isoformat() if self.last_tick else 'never'})")
        agents: dict[str, Any] = {}
        for agent_id, hb in self._heartbeats.items():
            mine = [j for j in self._plan.file.jobs
                    if j.agent_id == agent_id and j.enabled and j.state.next_run_at is not None]
            nxt = min(mine, key=lambda j: j.state.next_run_at or now, default=None)
            cfg = hb.agent.settings.heartbeat
            target = heartbeat_target(cfg)
            agents[agent_id] = {
                "next_job": ({"id": nxt.id, "name": nxt.name, "at": self.jobs.describe(nxt)["next_run_at"]}
                             if nxt else None),
                "heartbeat": {
                    "every_minutes": cfg.every_minutes,
                    "next": hb.next.isoformat() if hb.next else None,
                    "active_hours": f"{cfg.active_hours.start}-{cfg.active_hours.end}" if cfg.active_hours else None,
                    "target": f"{target.channel}:{target.account_id}:{target.peer_id}" if target else None,
                    "last": hb.last,
                },
            }
        return {"ticker": ticker, "started_at": self.started_at.isoformat() if self.started_at else None,
                "last_tick": self.last_tick.isoformat() if self.last_tick else None,
                "jobs": len(self._plan.file.jobs), "invalid_jobs": len(self._plan.file.invalid),
                "job_file_error": self._plan.error,
                "running": sorted(self._runs), "agents": agents}


class GatewayContext(Protocol):
    """What the gateway hands a service factory (its ServiceContext), as far as the scheduler reads it."""

    @property
    def host(self) -> SchedulerHost: ...

    @property
    def loaded(self) -> LoadedConfig: ...

    @property
    def state_dir(self) -> Path: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> Callable[[], LoadedConfig] | None: ...

    @property
    def restart(self) -> str | None: ...


def gateway_service(ctx: GatewayContext) -> SchedulerService:
    """The gateway's service factory entry: the scheduler with the gateway's bus as its host (turns go
    through each session's queue, so a job never interleaves with the user's messages there)."""
    epoch = ctx.clock

    def clock() -> datetime:
        return datetime.fromtimestamp(epoch(), UTC)

    return SchedulerService(ctx.state_dir, ctx.loaded, ctx.host, clock=clock, config=ctx.config, restart=ctx.restart)
