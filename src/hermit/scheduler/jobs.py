"""The job model: what a scheduled job is (schedule, target, delivery, state) and how its next run is found.

A job file entry (docs/guide.md, "Scheduled jobs and the heartbeat", shows a full example):

    {"id": "j-3f9a1c", "name": "morning brief", "agent_id": "main", "enabled": true,
     "schedule": {"kind": "cron", "expr": "0 8 * * 1-5", "tz": "Europe/Berlin"},
     "session_target": "isolated", "message": "Summarise today's calendar.",
     "delivery": {"mode": "announce", "channel": "telegram", "account": "default", "to": "12345"},
     "delete_after_run": null, "timeout_seconds": 600,
     "created_at": "...", "updated_at": "...",
     "state": {"next_run_at": "...", "last_run_at": null, "last_status": null, "last_error": null,
               "consecutive_errors": 0, "run_requested": false, "in_flight": null}}

Schedules: `{"kind": "at", "at": ISO}`, `{"kind": "every", "every_ms": N, "anchor": ISO?}`,
`{"kind": "cron", "expr": "...", "tz": "Area/City"?}`.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hermit.channels.base import Target
from hermit.errors import JobError
from hermit.scheduler.schedule import (
    MIN_EVERY_MS,
    Zone,
    check_cron_expr,
    cron_next,
    every_next,
    format_duration,
    load_zone,
    parse_at,
)

# Failing recurring jobs wait at least this long before their next run (SPEC §16); the last repeats.
BACKOFF_SECONDS = (30, 60, 300, 900, 3600)
# A failed one-shot (`at`) job is retried this many times with the same backoff, then disabled.
AT_RETRIES = 3
DEFAULT_TIMEOUT_SECONDS = 600.0

RunStatus = Literal["ok", "error", "timeout", "skipped"]
Trigger = Literal["schedule", "catch-up", "manual", "retry"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class AtSchedule(_Strict):
    kind: Literal["at"] = "at"
    at: str  # ISO; without an offset, wall-clock time in the job's zone

    def instant(self, zone: Zone) -> datetime:
        return parse_at(self.at, zone.tz)

    def describe(self) -> str:
        return f"at {self.at}"


class EverySchedule(_Strict):
    kind: Literal["every"] = "every"
    every_ms: int = Field(ge=MIN_EVERY_MS)
    anchor: str | None = None  # ISO; default: the job's creation time

    def describe(self) -> str:
        return f"every {format_duration(self.every_ms)}" + (f" from {self.anchor}" if self.anchor else "")


class CronSchedule(_Strict):
    kind: Literal["cron"] = "cron"
    expr: str
    tz: str | None = None  # IANA; default: the user's configured zone, else the host's

    @field_validator("expr")
    @classmethod
    def _valid_expr(cls, v: str) -> str:
        try:
            return check_cron_expr(v)
        except JobError as e:  # pydantic reports ValueErrors with the field's path
            raise ValueError(e.message) from e

    @field_validator("tz")
    @classmethod
    def _valid_tz(cls, v: str | None) -> str | None:
        if v:
            try:
                load_zone(v)
            except JobError as e:
                raise ValueError(f"{e.message} ({e.hint})") from e
        return v or None

    def describe(self) -> str:
        return f"cron '{self.expr}'" + (f" {self.tz}" if self.tz else "")


Schedule = Annotated[AtSchedule | EverySchedule | CronSchedule, Field(discriminator="kind")]


class Delivery(_Strict):
    """Where an isolated run's reply goes: `announce` sends it to a channel peer through the gateway."""

    mode: Literal["announce", "none"] = "none"
    channel: str | None = None
    account: str | None = None  # the channel account id; "default" when unset
    to: str | None = None  # the peer id (a user for dm, a chat/channel for group)
    peer_kind: Literal["dm", "group"] = "dm"
    # Set when the agent's cron tool chose (or last changed) the job while it had this target: it was
    # accepted as reaching only the owner of the job's agent, and is checked again before every run, so a
    # config change that makes it someone else's fails the run instead of delivering. The owner's own
    # choice of a target (`hermit cron`, the web app) clears it.
    owner_only: bool = False
    # The owner's explicit opt-in (`hermit cron add|edit --share-main-text`, or in a job spec the owner gives
    # the web app's cron.add) that a main-session job's replies — which can quote MEMORY.md and owner-only notes — may go to a
    # target that is not an owner of the job's agent (a group, a contact, another agent's owner). Without
    # it such a job is refused when made or aimed, and not run. Given for one target and session: a change
    # of either clears it unless the change sets it again. The cron tool can never set it.
    shares_main: bool = False

    @model_validator(mode="after")
    def _announce_needs_a_peer(self) -> Delivery:
        if self.mode == "announce" and not (self.channel and self.to):
            raise ValueError("delivery mode 'announce' needs a channel and a 'to' peer id")
        return self

    def target(self) -> Target | None:
        if self.mode != "announce" or not self.channel or not self.to:
            return None
        return Target(self.channel, self.account or "default", self.peer_kind, self.to)

    def describe(self) -> str:
        if self.mode != "announce":
            return "none"
        return f"{self.channel}:{self.account or 'default'}:{self.to}"


class InFlight(BaseModel):
    """A run that started and was not finished yet, stored before its turn (runner.py): what a restart after
    a crash needs to finish it without repeating what it did. `phase` moves on before each step that must
    not happen twice: `running` (the turn; a restart continues it in the same session, so the tools it
    already ran are not run again), `answered` (the turn is done; nothing to send), `delivering` (stored
    before the reply is sent: a restart finishes the run without sending it again)."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    run_id: str
    trigger: Trigger
    started_at: datetime
    session_key: str
    session_id: str | None = None  # the isolated run's cron session (a main-session job: None)
    text: str  # the turn's message, exactly: a continued turn is recognised by it (agent/loop.py)
    phase: Literal["running", "answered", "delivering"] = "running"
    agent_id: str | None = None  # the agent whose session holds the turn (None: a record without it)
    # where the job was aimed when the run started (runner.job_aim); a run whose job is aimed elsewhere
    # when its reply is ready (or that has no aim recorded) delivers nothing
    aim: str | None = None


class JobState(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_status: RunStatus | None = None
    last_error: str | None = None
    consecutive_errors: int = 0
    run_requested: bool = False  # a manual run asked for by the cron tool; the scheduler picks it up
    in_flight: InFlight | None = None  # the scheduler's run in progress (see InFlight)


class Job(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    name: str = ""
    agent_id: str = "main"
    enabled: bool = True
    schedule: Schedule
    message: str = Field(min_length=1)
    session_target: Literal["isolated", "main"] = "isolated"
    delivery: Delivery = Delivery()
    delete_after_run: bool | None = None  # None: true for `at` jobs, which are one-shot
    timeout_seconds: float = Field(DEFAULT_TIMEOUT_SECONDS, gt=0, le=86_400)
    created_at: datetime
    updated_at: datetime
    state: JobState = JobState()

    @property
    def label(self) -> str:
        return f"{self.id} ({self.name})" if self.name else self.id

    @property
    def deletes_after_success(self) -> bool:
        return self.delete_after_run if self.delete_after_run is not None else self.schedule.kind == "at"

    def job_tz(self) -> str | None:
        return self.schedule.tz if isinstance(self.schedule, CronSchedule) else None

    def next_after(self, after: datetime, zone: Zone) -> datetime | None:
        """The schedule's next fire time strictly after `after` (None: a one-shot that has fired)."""
        s = self.schedule
        if isinstance(s, AtSchedule):
            at = s.instant(zone)
            return at if at > after else None
        if isinstance(s, EverySchedule):
            anchor = parse_at(s.anchor, zone.tz) if s.anchor else self.created_at
            return every_next(s.every_ms, anchor, after)
        return cron_next(s.expr, after, zone.tz)

    def first_run(self, now: datetime, zone: Zone) -> datetime | None:
        """When a new (or rescheduled) job first fires: an `at` job at its time even if that has passed
        (it then fires at once), the others at their next slot after now."""
        if isinstance(self.schedule, AtSchedule):
            return self.schedule.instant(zone)
        return self.next_after(now, zone)

    def after_run(self, status: RunStatus, ended: datetime, zone: Zone) -> datetime | None:
        """The next run after one that ended at `ended` with `status`: the normal next slot, pushed back
        by the backoff after consecutive failures."""
        errors = self.state.consecutive_errors
        if isinstance(self.schedule, AtSchedule):
            if status == "ok" or status == "skipped" or errors > AT_RETRIES:
                return None
            return ended + timedelta(seconds=backoff_seconds(errors))
        normal = self.next_after(ended, zone)
        if status in ("error", "timeout") and normal is not None and errors > 0:
            return max(normal, ended + timedelta(seconds=backoff_seconds(errors)))
        return normal


def backoff_seconds(consecutive_errors: int) -> int:
    """30 s after the first failure, then 1 m, 5 m, 15 m, and 60 m from the fifth on."""
    return BACKOFF_SECONDS[min(max(consecutive_errors, 1), len(BACKOFF_SECONDS)) - 1]


def new_job_id() -> str:
    return "j-" + secrets.token_hex(4)


FIX_STORED = "fix the job (`hermit cron edit`), or remove it (`hermit cron remove`)"
FIX_INPUT = ("schedules look like {kind: cron, expr: '0 9 * * 1-5', tz?}, {kind: every, every_ms: 3600000} or "
             "{kind: at, at: '2026-06-01T09:30'}; cron fields: [second] minute hour day month weekday")


def parse_job(raw: Any, where: str = "job", hint: str = FIX_STORED) -> Job:
    try:
        return Job.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(job)'}: "
                             f"{err['msg'].removeprefix('Value error, ')}" for err in e.errors())
        raise JobError(f"invalid {where}: {problems}", hint) from e


def build_job(spec: dict[str, Any], *, now: datetime, job_id: str | None = None) -> Job:
    """A new job from user input (CLI, the cron tool): id and timestamps filled in, everything validated."""
    data = {k: v for k, v in spec.items() if k not in ("id", "created_at", "updated_at", "state")}
    data.update(id=job_id or spec.get("id") or new_job_id(), created_at=now.isoformat(), updated_at=now.isoformat())
    return parse_job(data, hint=FIX_INPUT)


def patch_job(job: Job, patch: dict[str, Any], *, now: datetime) -> Job:
    """The job with `patch`'s fields replaced (nested mappings merged); state and id are kept."""
    forbidden = {"id", "created_at", "updated_at", "state"} & set(patch)
    if forbidden:
        raise JobError(f"cannot change {', '.join(sorted(forbidden))} of a job", "change the schedule, message, "
                       "target, delivery, name, enabled or timeout_seconds")
    data = job.model_dump(mode="json")
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "schedule":
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    data["updated_at"] = now.isoformat()
    return parse_job(data, f"change to job {job.id}", FIX_INPUT)
