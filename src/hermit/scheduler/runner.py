"""One run of one job: its turn (isolated in a fresh `cron:<jobId>` session, or a system event in the main
session), the delivery of the reply, the run-log line, and the job's state afterwards (next run, backoff,
deletion of a finished one-shot job).

The turn text names the job and the current time in the job's own zone, so a manual run and a scheduled
run see the same local time (the original read UTC on manual runs, SPEC §14.14).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from hermit.config.load import LoadedConfig
from hermit.errors import HermitError
from hermit.scheduler.host import SchedulerHost
from hermit.scheduler.jobs import Job, JobState, RunStatus
from hermit.scheduler.schedule import Zone
from hermit.scheduler.store import JobStore, RunRecord, Trigger
from hermit.sessions.keys import cron_session_key, main_session_key
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import Clock

log = logging.getLogger("hermit.scheduler")

REPLY_PREVIEW_CHARS = 500


def job_session_key(job: Job) -> str:
    return main_session_key(job.agent_id) if job.session_target == "main" else cron_session_key(job.id)


def local_time_text(at: datetime, zone: Zone) -> str:
    local = at.astimezone(zone.tz)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({zone.name})"


def job_turn_text(job: Job, at: datetime, zone: Zone, trigger: Trigger) -> str:
    name = f' "{job.name}"' if job.name else ""
    head = "System event from scheduled job" if job.session_target == "main" else "Scheduled job"
    return f"[{head} {job.id}{name} · {local_time_text(at, zone)} · {trigger} run]\n{job.message}"


@dataclass
class RunHandle:
    """A run in flight; the scheduler sets `timed_out` before cancelling it at its deadline."""

    run_id: str
    job_id: str
    started_at: datetime
    deadline: datetime
    trigger: Trigger
    timed_out: bool = False


StartSession = Callable[[Job, str], None]


def session_starter(loaded: LoadedConfig, clock: Clock, *, fsync: bool = True) -> StartSession:
    """Starts a fresh session for an isolated run: a new session id (and transcript) under `cron:<jobId>`
    in the agent's session store. The store is file-based and locked, so the runtime that then runs the
    turn, in this process or the gateway's, simply finds it."""

    def start(job: Job, session_key: str) -> None:
        agent = loaded.agent(job.agent_id)
        SessionStore(agent.sessions_dir, clock=clock, cwd=agent.workspace, fsync=fsync).new_session(session_key)

    return start


async def execute(job: Job, host: SchedulerHost, handle: RunHandle, zone: Zone, start_session: StartSession, *,
                  deliver: bool = True, may_deliver: Callable[[Job], None] | None = None) -> RunRecord:
    """Run the job's turn and deliver its reply (unless `deliver` is off: `hermit cron run` prints it).
    `may_deliver` checks the target before the turn (a JobError fails the run: nothing runs, nothing is
    delivered). Never raises for the job's failure (a supervision boundary): the error is in the record. A
    cancellation after `timed_out` becomes status timeout. The record holds the whole reply; `finish`
    logs its start."""
    key = job_session_key(job)
    status: RunStatus = "ok"
    error: str | None = None
    delivered = False
    reply: str | None = None
    session_id: str | None = None
    try:
        if deliver and may_deliver is not None:
            may_deliver(job)
        if job.session_target == "isolated":
            start_session(job, key)
        # A system event in the main session is a background turn like the heartbeat: it must not count
        # as the user's activity, reset the session or start a memory flush.
        outcome = await host.run_turn(job.agent_id, key, job_turn_text(job, handle.started_at, zone, handle.trigger),
                                      heartbeat=job.session_target == "main")
        session_id = outcome.session_id
        reply = outcome.reply
        target = job.delivery.target()
        if deliver and target is not None and outcome.delivered and outcome.reply.strip():
            await host.deliver(target, outcome.reply)
            delivered = True
    except asyncio.CancelledError:
        if not handle.timed_out:
            raise
        status, error = "timeout", f"timed out after {job.timeout_seconds:g} s"
    except HermitError as e:
        status, error = "error", e.message
    except Exception as e:  # supervision boundary: a job's bug must not stop the scheduler
        log.warning("job %s failed", job.id, exc_info=True)
        status, error = "error", f"{type(e).__name__}: {e}"
    return RunRecord(run_id=handle.run_id, job_id=job.id, started_at=handle.started_at.isoformat(),
                     ended_at="", status=status, trigger=handle.trigger, error=error, delivered=delivered,
                     session_key=key, session_id=session_id, reply=reply)


def new_handle(job: Job, started: datetime, trigger: Trigger) -> RunHandle:
    return RunHandle("r-" + secrets.token_hex(4), job.id, started,
                     started + timedelta(seconds=job.timeout_seconds), trigger)


def finish(store: JobStore, job: Job, record: RunRecord, ended: datetime, zone: Zone,
           on_state: Callable[[Job | None], None] | None = None) -> RunRecord:
    """Append the run to the job's log and store the job's new state (or delete a finished one-shot).

    A manual run is out of band: it is logged and shown as the last run, but leaves the schedule, the
    backoff and a pending one-shot alone."""
    record = dataclasses.replace(record, ended_at=ended.isoformat())
    preview = record.reply[:REPLY_PREVIEW_CHARS] if record.reply is not None else None
    store.append_run(dataclasses.replace(record, reply=preview))

    def change(current: Job) -> Job | None:
        if record.trigger == "manual":
            state = current.state.model_copy(update={
                "last_run_at": datetime.fromisoformat(record.started_at), "last_status": record.status,
                "last_error": record.error, "run_requested": False})
            return current.model_copy(update={"state": state})
        errors = 0 if record.status in ("ok", "skipped") else current.state.consecutive_errors + 1
        counted = current.model_copy(update={"state": current.state.model_copy(update={"consecutive_errors": errors})})
        if record.status == "ok" and current.deletes_after_success:
            return None
        nxt = counted.after_run(record.status, ended, zone)
        state = JobState(next_run_at=nxt, last_run_at=datetime.fromisoformat(record.started_at),
                         last_status=record.status, last_error=record.error, consecutive_errors=errors,
                         run_requested=current.state.run_requested and record.trigger != "manual")
        # A one-shot that has nothing left to do stays in the file, disabled, so its error can be read.
        enabled = current.enabled and not (nxt is None and current.schedule.kind == "at")
        return current.model_copy(update={"state": state, "enabled": enabled})

    updated = store.update_job(job.id, change)
    if on_state is not None:
        on_state(updated)
    return record
