"""One run of one job: its turn (isolated in a fresh `cron:<jobId>` session, or a system event in the main
session), the delivery of the reply, the run-log line, and the job's state afterwards (next run, backoff,
deletion of a finished one-shot job).

The turn text names the job and the current time in the job's own zone, so a manual run and a scheduled
run see the same local time (the original read UTC on manual runs, SPEC §14.14).

A crash (kill -9, power loss) in the middle of a run must not make the user get a reminder twice or a
job's tools run twice. The scheduler stores the run in the job's state before its turn (`InFlight`: run
id, session, the turn's exact text) and moves it on before each step that must not repeat: `answered`
after the turn, `delivering` before the reply is sent. A restart finds the run there and finishes it
(`execute(resume=...)`): a run that was answered or delivering is logged without running or sending
again; a run cut off mid-turn is continued in the same session with the same text, which the agent loop
recognises as its unfinished turn (agent/loop.py `unfinished_turn`: the tools that ran are not run
again); a turn the transcript shows answered is not run again either.

A continued run is judged by the session its text is made in, not by what the job says now: a main-session
key (or one that does not parse) gets the main session's delivery rules (an owner, or the owner's opt-in
for that target). And a run whose job was aimed elsewhere while it was in flight — its target, its session
or its agent changed (`InFlight.aim`), before a crash, while Hermit was down or during the turn — delivers
nothing: its reply was made for the old aim, and the run log says why (`not_delivered`).

What stays open: a kill while the reply is being sent — it is recorded as sent first, so it is never sent
twice by the scheduler, but it may not have arrived; and a channel's own send is at least once (Telegram
may retry a send whose answer it did not hear).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from hermit.agent.context import is_silent, load_history
from hermit.config.load import LoadedConfig
from hermit.errors import HermitError
from hermit.messages import AssistantMessage, Message, UserMessage
from hermit.redaction import mask
from hermit.scheduler.host import SchedulerHost
from hermit.scheduler.jobs import InFlight, Job, JobState, RunStatus
from hermit.scheduler.schedule import Zone
from hermit.scheduler.store import JobStore, RunRecord, Trigger
from hermit.scheduler.targets import NotLetIn
from hermit.sessions.keys import SessionKind, classify_session_key, cron_session_key, main_session_key
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import Clock

log = logging.getLogger("hermit.scheduler")

REPLY_PREVIEW_CHARS = 500


def job_session_key(job: Job) -> str:
    return main_session_key(job.agent_id) if job.session_target == "main" else cron_session_key(job.id)


def job_aim(job: Job) -> str:
    """Where a run of the job is made and where its reply goes: its agent, its session and its target."""
    t = job.delivery.target()
    to = f"{t.channel}:{t.account_id}:{t.peer_kind}:{t.peer_id}" if t is not None else "nowhere"
    return f"agent {job.agent_id}, {job.session_target} session, to {to}"


def made_in(job: Job, session_key: str) -> Job:
    """The job as judged for a reply made in `session_key`: isolated only in a cron session; any other key,
    or one that does not parse, counts as the main session (fail closed: MEMORY.md may be in its text)."""
    kind = classify_session_key(session_key)
    return job.model_copy(update={"session_target": "isolated" if kind is SessionKind.CRON else "main"})


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


StartSession = Callable[[Job, str], str | None]  # starts the isolated run's session; returns its id
Mark = Callable[[InFlight], None]  # stores the run in flight in the job's state (durably, before going on)
Reopen = Callable[[Job, InFlight], str | None]  # takes a crashed run's session back; returns its reply if any


class CronSessions:
    """The isolated runs' sessions: `self(job, key)` starts a fresh one (a new session id and transcript
    under `cron:<jobId>` in the agent's session store, whose id it returns); `reopen` takes back the
    session of a run a crash cut off. The store is file-based and locked, so the runtime that then runs the
    turn, in this process or the gateway's, simply finds it."""

    def __init__(self, loaded: LoadedConfig, clock: Clock, *, fsync: bool = True) -> None:
        self.loaded = loaded
        self.clock = clock
        self.fsync = fsync

    def _store(self, agent_id: str) -> SessionStore:
        agent = self.loaded.agent(agent_id)
        return SessionStore(agent.sessions_dir, clock=self.clock, cwd=agent.workspace, fsync=self.fsync)

    def __call__(self, job: Job, session_key: str) -> str:
        return self._store(job.agent_id).new_session(session_key).record.session_id

    def reopen(self, job: Job, run: InFlight) -> str | None:
        """Before a crashed run's turn is continued: the reply its session's last turn gave, when that turn
        is the run's and was answered (the crash came after the turn, before the scheduler recorded it),
        else None. An isolated run's own session is touched first: the reset policy counts from the last
        activity, and a restart after the idle time or the daily hour must not start a fresh session under
        the turn it continues (a main-session run is a heartbeat-like turn, which no reset touches)."""
        store = self._store(run.agent_id or job.agent_id)
        record = store.get(run.session_key)
        if record is None:
            return None
        if run.session_id is not None and record.session_id == run.session_id:
            record = store.update(run.session_key)
        return answered_reply(load_history(store.open_transcript(record)).messages, UserMessage(run.text))


def session_starter(loaded: LoadedConfig, clock: Clock, *, fsync: bool = True) -> CronSessions:
    return CronSessions(loaded, clock, fsync=fsync)


def answered_reply(history: Sequence[Message], user: UserMessage) -> str | None:
    """The reply ending `history` when its last turn is `user`'s message answered (no tool call pending,
    no error): the counterpart of agent/loop.py's `unfinished_turn`, for a turn that did finish."""
    for start in range(len(history) - 1, -1, -1):
        if isinstance(history[start], UserMessage):
            break
    else:
        return None
    last = history[-1]
    if history[start].to_dict() != user.to_dict() or not isinstance(last, AssistantMessage):
        return None
    return last.text if not last.tool_calls and last.stop_reason != "error" else None


def _finished_before(job: Job, handle: RunHandle, resume: InFlight) -> RunRecord:
    """The record of a run a restart found past its turn: logged, not run or sent again."""
    sent = resume.phase == "delivering"
    note = ("its reply was being sent when Hermit stopped: not sent again (it may not have arrived)" if sent
            else "its turn had finished when Hermit stopped: not run again")
    log.warning("job %s: run %s %s", job.id, handle.run_id, note)
    return RunRecord(run_id=handle.run_id, job_id=job.id, started_at=handle.started_at.isoformat(), ended_at="",
                     status="ok", trigger=handle.trigger, delivered=sent, session_key=resume.session_key,
                     session_id=resume.session_id, extra={"resumed": note})


def _not_continued(job: Job, handle: RunHandle, resume: InFlight) -> RunRecord | None:
    """The record of a run a restart found and does not run on: past its turn, or its job paused."""
    if resume.phase != "running":
        return _finished_before(job, handle, resume)
    if not job.enabled:  # paused while Hermit was down: not continued
        return RunRecord(run_id=handle.run_id, job_id=job.id, started_at=handle.started_at.isoformat(), ended_at="",
                         status="error", trigger=handle.trigger, session_key=resume.session_key,
                         session_id=resume.session_id,
                         error="interrupted: Hermit stopped during this run; not continued (the job is disabled)")
    return None


def _aimed_elsewhere(job: Job, run: InFlight, now: Job) -> str | None:
    """Why the run's reply is not delivered when its job was aimed elsewhere while it was in flight."""
    if run.aim is None:
        note = "its record does not say where the job was aimed when it started"
    elif run.aim != job_aim(now):
        note = f"the job was changed while it was in flight (from {run.aim}; now {job_aim(now)})"
    else:
        return None
    log.warning("job %s: run %s: reply not delivered: %s", job.id, run.run_id, note)
    return f"not delivered: {note}"


def _held_at_delivery(job: Job, run: InFlight, key: str, current: Callable[[], Job] | None,
                      may_deliver: Callable[[Job], None] | None) -> tuple[str | None, RunStatus | None]:
    """Why a reply about to be sent is not, and the run's status then (None: as it was): its job was aimed
    elsewhere during the run; its target is no longer let in (revoked, taken off `groups`: skipped); or
    `may_deliver` refuses it now for another reason (the config in force changed during the turn: error)."""
    if current is not None and (held := _aimed_elsewhere(job, run, current())) is not None:
        return held, None
    if may_deliver is None:
        return None, None
    try:
        may_deliver(made_in(job, key))
    except NotLetIn as e:  # said once in the log by the scheduler; the reply stays in the record and session
        return e.message, "skipped"
    except HermitError as e:
        log.warning("job %s: run %s: reply not delivered: %s", job.id, run.run_id, e.message)
        return f"not delivered: {e.message}", "error"
    return None, None


def _failed(e: HermitError) -> RunStatus:
    """A run stopped by `e`: skipped when its target may not talk to the assistant now (no turn, nothing sent,
    the job kept on its schedule), else an error."""
    return "skipped" if isinstance(e, NotLetIn) else "error"


async def execute(job: Job, host: SchedulerHost, handle: RunHandle, zone: Zone, start_session: StartSession, *,
                  deliver: bool = True, may_deliver: Callable[[Job], None] | None = None,
                  mark: Mark | None = None, resume: InFlight | None = None,
                  reopen: Reopen | None = None, current: Callable[[], Job] | None = None) -> RunRecord:
    """Run the job's turn and deliver its reply (unless `deliver` is off: `hermit cron run` prints it).
    `may_deliver` checks the target before the turn (a JobError fails the run: nothing runs, nothing is
    delivered) and again before the reply is sent (the config may have changed meanwhile: a JobError then
    fails the run, its reply kept in the record and the session, not sent). A target no longer let in
    (targets.NotLetIn: revoked, taken off `groups`) makes the run `skipped` instead, at either point. Never raises for the job's
    failure (a supervision boundary): the error is in the record. A cancellation after `timed_out` becomes
    status timeout. The record holds the whole reply; `finish` logs its start.

    `mark` stores the run in flight before each step that must not repeat (the scheduler's runs; see the
    module docstring); `resume` is such a run a restart found unfinished: it is finished from where it
    stopped, its turn continued in its own session and agent (`reopen` takes it back and tells a turn that
    had finished), its delivery judged by that session's kind. `current` reads the job as stored now: a
    reply whose job was aimed elsewhere since the run started (or, resumed, since it was recorded) is not
    delivered."""
    if resume is not None and (done := _not_continued(job, handle, resume)) is not None:
        return done
    key = resume.session_key if resume is not None else job_session_key(job)
    text = resume.text if resume is not None else job_turn_text(job, handle.started_at, zone, handle.trigger)
    agent_id = (resume.agent_id or job.agent_id) if resume is not None else job.agent_id
    held = _aimed_elsewhere(job, resume, job) if resume is not None else None
    in_main = made_in(job, key).session_target == "main"
    status: RunStatus = "ok"
    error: str | None = None
    delivered = False
    reply: str | None = None
    session_id: str | None = resume.session_id if resume is not None else None
    extra: dict[str, object] = {}
    try:
        if deliver and may_deliver is not None and held is None:  # a held reply goes nowhere: nothing to check
            may_deliver(made_in(job, key))
        if resume is None and job.session_target == "isolated":
            session_id = start_session(job, key)
        marker = resume or InFlight(run_id=handle.run_id, trigger=handle.trigger, started_at=handle.started_at,
                                    session_key=key, session_id=session_id, text=text, agent_id=agent_id,
                                    aim=job_aim(job))
        if mark is not None and resume is None:
            mark(marker)
        earlier = reopen(job, resume) if resume is not None and reopen is not None else None
        if resume is not None:
            extra["resumed"] = ("its turn had finished when Hermit stopped: not run again" if earlier is not None
                                else "continued after Hermit stopped during its turn")
        if earlier is not None:
            reply, will_send = earlier, bool(earlier.strip()) and not is_silent(earlier)
        else:
            # A system event in the main session is a background turn like the heartbeat: it must not count
            # as the user's activity, reset the session or start a memory flush.
            outcome = await host.run_turn(agent_id, key, text, heartbeat=in_main)
            session_id = outcome.session_id
            reply, will_send = outcome.reply, outcome.delivered and bool(outcome.reply.strip())
        target = job.delivery.target()
        sending = deliver and target is not None and will_send
        if sending and held is None:
            held, failed = _held_at_delivery(job, marker, key, current, may_deliver)
            status, error = (failed, mask(held or "")) if failed is not None else (status, error)
        if sending and held is not None:
            extra["not_delivered"], sending = held, False
        if mark is not None:
            mark(marker.model_copy(update={"phase": "delivering" if sending else "answered"}))
        if sending:
            assert target is not None
            await host.deliver(target, reply)
            delivered = True
    except asyncio.CancelledError:
        if not handle.timed_out:
            raise
        status, error = "timeout", f"timed out after {job.timeout_seconds:g} s"
    except HermitError as e:
        status, error = _failed(e), mask(e.message)
    except Exception as e:  # supervision boundary: a job's bug must not stop the scheduler
        log.warning("job %s failed", job.id, exc_info=True)
        status, error = "error", mask(f"{type(e).__name__}: {e}")
    return RunRecord(run_id=handle.run_id, job_id=job.id, started_at=handle.started_at.isoformat(),
                     ended_at="", status=status, trigger=handle.trigger, error=error, delivered=delivered,
                     session_key=key, session_id=session_id, reply=reply, extra=extra)


def new_handle(job: Job, started: datetime, trigger: Trigger) -> RunHandle:
    return RunHandle("r-" + secrets.token_hex(4), job.id, started,
                     started + timedelta(seconds=job.timeout_seconds), trigger)


def one_shot_skipped(job_id: str, why: str | None) -> str:
    """What a one-shot job skipped at its time says (cron list, doctor): it is disabled, not held until its target
    is let in again (a reminder delivered late could be wrong), and how to run it after all."""
    return (f"{why or 'skipped'}; a one-shot job has one time, so it is now disabled and will not run when they are "
            f"let in again — once they are, `hermit cron edit {job_id} --at WHEN --enable` sets it again "
            "(WHEN: a time, or 10m for ten minutes from now)")


def finish(store: JobStore, job: Job, record: RunRecord, ended: datetime, zone: Zone,
           on_state: Callable[[Job | None], None] | None = None) -> RunRecord:
    """Append the run to the job's log and store the job's new state (or delete a finished one-shot).

    A manual run is out of band: it is logged and shown as the last run, but leaves the schedule, the
    backoff and a pending one-shot alone."""
    record = dataclasses.replace(record, ended_at=ended.isoformat())
    preview = record.reply[:REPLY_PREVIEW_CHARS] if record.reply is not None else None
    # a run finished after a restart may have been logged already (the crash came between log and state)
    if not (record.extra.get("resumed") and any(r.get("run_id") == record.run_id for r in store.runs(job.id, 3))):
        store.append_run(dataclasses.replace(record, reply=preview))

    def change(current: Job) -> Job | None:
        # this run's in-flight mark goes; another's (a gateway run while `hermit cron run` ends) stays
        flying = current.state.in_flight
        in_flight = flying if flying is not None and flying.run_id != record.run_id else None
        if record.trigger == "manual":
            state = current.state.model_copy(update={
                "last_run_at": datetime.fromisoformat(record.started_at), "last_status": record.status,
                "last_error": record.error, "run_requested": False, "in_flight": in_flight})
            return current.model_copy(update={"state": state})
        errors = 0 if record.status in ("ok", "skipped") else current.state.consecutive_errors + 1
        counted = current.model_copy(update={"state": current.state.model_copy(update={"consecutive_errors": errors})})
        if record.status == "ok" and current.deletes_after_success:
            return None
        nxt = counted.after_run(record.status, ended, zone)
        state = JobState(next_run_at=nxt, last_run_at=datetime.fromisoformat(record.started_at),
                         last_status=record.status, last_error=record.error, consecutive_errors=errors,
                         run_requested=current.state.run_requested and record.trigger != "manual",
                         in_flight=in_flight)
        # A one-shot that has nothing left to do stays in the file, disabled, so its error can be read.
        enabled = current.enabled and not (nxt is None and current.schedule.kind == "at")
        if record.status == "skipped" and current.enabled and not enabled:
            state = state.model_copy(update={"last_error": one_shot_skipped(current.id, record.error)})
        return current.model_copy(update={"state": state, "enabled": enabled})

    updated = store.update_job(job.id, change)
    if on_state is not None:
        on_state(updated)
    return record
