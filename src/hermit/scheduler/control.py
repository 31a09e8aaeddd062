"""CronJobs: the one service over the job file that `hermit cron`, the agent's cron tool and the scheduler
share — add, update, remove, list, queue a run, read run logs — with every time shown in the job's zone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from hermit.channels.platforms import accounts
from hermit.config.allowlist import is_username, matches
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError, JobError
from hermit.scheduler.jobs import AtSchedule, Job, build_job, patch_job
from hermit.scheduler.schedule import Zone, resolve_zone
from hermit.scheduler.store import JobFile, JobStore
from hermit.scheduler.targets import (
    NoAccount,
    Refused,
    not_let_in,
    not_let_in_fix,
    not_the_owner,
    peer_kind_of,
    resolve_target,
)
from hermit.sessions.transcript import Clock, utc_now

log = logging.getLogger("hermit.scheduler")

# An `at` time further in the past than this when a job is added is almost surely a typo (date or zone).
AT_PAST_TOLERANCE = timedelta(minutes=1)


class RunningScheduler(Protocol):
    def wake(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


# The scheduler running in this process (the gateway's), by job file: any CronJobs over the same file —
# the cron tool of a gateway runtime — wakes it at once and reports its status. Other processes (the CLI)
# find none; the scheduler then notices their changes at its next look at the file (≤ 30 s).
_RUNNING: dict[Path, RunningScheduler] = {}


def register_scheduler(job_file: Path, scheduler: RunningScheduler | None) -> None:
    key = job_file.resolve()
    if scheduler is None:
        _RUNNING.pop(key, None)
    else:
        _RUNNING[key] = scheduler


# What the cron tool may change of a job whose replies go to someone other than an owner.
WHEN_ONLY = frozenset({"enabled", "schedule", "timeout_seconds"})


def _one_agents(status: dict[str, Any], agent_id: str | None, job_ids: set[str]) -> dict[str, Any]:
    """The scheduler's status as one agent's cron tool may see it: the ticker, and that agent's heartbeat, next
    job and running jobs — not another agent's (its next job's name and time, its heartbeat target and outcome:
    what another owner scheduled). `agent_id` None (the owner's CLI and web app): all of it."""
    if agent_id is None:
        return status
    agents = status.get("agents")
    return {**{k: v for k, v in status.items() if k not in ("invalid_jobs", "job_file_error")},
            "jobs": len(job_ids), "running": [j for j in status.get("running", ()) if j in job_ids],
            "agents": {a: v for a, v in agents.items() if a == agent_id} if isinstance(agents, dict) else {}}


class CronJobs:
    def __init__(self, home: Path, loaded: LoadedConfig, *, clock: Clock = utc_now, fsync: bool = True,
                 wake: Callable[[], None] | None = None, for_model: bool = False,
                 current: Callable[[], LoadedConfig] | None = None,
                 restart: str | Callable[[], str] | None = None) -> None:
        self.loaded = loaded
        # The gateway's restart in words for how it runs ("restart the gateway: `systemctl --user restart …`"), from
        # a composition root that can tell: a target naming a channel with no account ends its hint with them
        # (targets.NoAccount); a function when they can change while this lives (`hermit chat`: a gateway may start or
        # stop meanwhile). None: the hint's default words (the CLI puts its own in: cli/main._gateway_words).
        self._restart = restart
        # Who a delivery reaches is judged by `current()`: the config in force. In the gateway that is
        # hermit.yaml as it is now (re-read when it changes; a ConfigError while it is invalid, so no run
        # that delivers and no target the model picks passes); elsewhere the config this process loaded.
        self.current: Callable[[], LoadedConfig] = current or (lambda: self.loaded)
        # The agent's cron tool: the model, not the owner, is choosing where a job's replies go.
        self.for_model = for_model
        self.store = JobStore(home, fsync=fsync)
        self.clock = clock
        self.wake = wake  # the scheduler that owns this CronJobs: re-plan at once after a change

    def _scheduler(self) -> RunningScheduler | None:
        return _RUNNING.get(self.store.path.resolve())

    # ---- zones and times -------------------------------------------------------------------------

    def zone(self, job: Job) -> Zone:
        try:
            configured = self.loaded.agent(job.agent_id).settings.timezone
        except ConfigError:  # an unknown agent is reported by add/doctor; times use the defaults' zone
            configured = self.loaded.defaults.timezone
        return resolve_zone(job.job_tz(), configured)

    def next_times(self, job: Job, count: int = 3, *, after: datetime | None = None) -> list[datetime]:
        zone = self.zone(job)
        now = after or self.clock()
        first = job.first_run(now, zone)
        out: list[datetime] = []
        while first is not None and len(out) < count:
            out.append(first.astimezone(zone.tz))
            first = job.next_after(first, zone)
        return out

    def describe(self, job: Job) -> dict[str, Any]:
        zone = self.zone(job)

        def local(at: datetime | None) -> str | None:
            return at.astimezone(zone.tz).isoformat() if at is not None else None

        s = job.state
        return {"id": job.id, "name": job.name, "agent_id": job.agent_id, "enabled": job.enabled,
                "schedule": job.schedule.model_dump(), "timezone": zone.describe(),
                "session_target": job.session_target, "message": job.message,
                "delivery": job.delivery.model_dump(exclude_defaults=True),
                "next_run_at": local(s.next_run_at) if job.enabled else None, "last_run_at": local(s.last_run_at),
                "last_status": s.last_status, "last_error": s.last_error,
                "consecutive_errors": s.consecutive_errors, "run_requested": s.run_requested}

    # ---- reading ---------------------------------------------------------------------------------

    def load(self) -> JobFile:
        return self.store.load()

    def get(self, job_id: str) -> Job:
        return self.store.load().get(job_id)

    def list_jobs(self, agent_id: str | None = None) -> dict[str, Any]:
        """Every job, or only `agent_id`'s (what that agent's cron tool may see: agents are isolated)."""
        file = self.store.load()
        out: dict[str, Any] = {"jobs": [self.describe(j) for j in file.jobs if agent_id in (None, j.agent_id)]}
        if file.invalid and agent_id is None:
            out["invalid"] = [{"index": b.index, "error": b.error} for b in file.invalid]
        return out

    def runs(self, job_id: str, limit: int = 20) -> dict[str, Any]:
        self.get(job_id)
        return {"id": job_id, "runs": self.store.runs(job_id, limit)}

    def status(self, agent_id: str | None = None) -> dict[str, Any]:
        file = self.store.load()
        jobs = [j for j in file.jobs if agent_id in (None, j.agent_id)]
        enabled = [j for j in jobs if j.enabled and j.state.next_run_at is not None]
        nxt = min(enabled, key=lambda j: j.state.next_run_at or datetime.max, default=None)
        out: dict[str, Any] = {"jobs": len(jobs), "enabled": len([j for j in jobs if j.enabled]),
                               "invalid": len(file.invalid) if agent_id is None else 0,
                               "next": ({"id": nxt.id, "name": nxt.name, "at": self.describe(nxt)["next_run_at"]}
                                        if nxt else None)}
        running = self._scheduler()
        out["scheduler"] = (_one_agents(running.status(), agent_id, {j.id for j in jobs}) if running is not None
                            else "not running in this process")
        return out

    # ---- changing --------------------------------------------------------------------------------

    def _planned(self, job: Job) -> Job:
        """The job with its next run computed from now (a new job, or a changed schedule)."""
        self.loaded.agent(job.agent_id)  # an unknown agent fails here, with the configured ids in the hint
        zone = self.zone(job)
        now = self.clock()
        first = job.first_run(now, zone) if job.enabled else None
        if isinstance(job.schedule, AtSchedule) and first is not None and first < now - AT_PAST_TOLERANCE:
            raise JobError(f"{job.schedule.at} ({first.astimezone(zone.tz).isoformat()} in {zone.describe()}) "
                           "has already passed", "give a future time, with a date, in the job's time zone")
        return job.model_copy(update={"state": job.state.model_copy(
            update={"next_run_at": first, "consecutive_errors": 0})})

    def _with_target(self, job: Job) -> Job:
        """The job with its delivery checked against the configured channels: the channel in lower case,
        the account written in when it was inferred (the only one there is); raises JobError otherwise."""
        d = job.delivery
        if d.mode != "announce" or not d.channel:
            return job
        try:
            t = resolve_target(self.current().config.channels, d.channel, d.account, what=f"delivery of job {job.id}")
        except NoAccount as e:
            if self.restart is not None:
                e.hint = e.hint_then(self.restart)
            raise
        account = t.account if (d.account or t.explicit) else None
        if (t.channel, account) == (d.channel, d.account):
            return job
        return job.model_copy(update={"delivery": d.model_copy(update={"channel": t.channel, "account": account})})

    @property
    def restart(self) -> str | None:
        """The gateway's restart (or start) in words, as they are now."""
        return self._restart() if callable(self._restart) else self._restart

    @restart.setter
    def restart(self, words: str | Callable[[], str] | None) -> None:
        self._restart = words

    def not_the_owner(self, job: Job) -> str | None:
        """Who the job's replies reach when that is not only the owner of the job's agent, else None."""
        d = job.delivery
        if d.target() is None:
            return None
        return not_the_owner(self.current(), job.agent_id, d.channel or "", d.account, d.peer_kind, d.to or "")

    def not_let_in(self, job: Job) -> Refused | None:
        """When the job's target may not talk to the assistant now (a revoked or never approved contact, a group
        not under `groups`): a warning saying its runs will be skipped until they are let in, else None. Not an
        error: the owner may set up a job before approving its contact, and nothing reaches them meanwhile."""
        d = job.delivery
        if d.target() is None or not job.enabled:
            return None
        try:
            who = not_let_in(self.current(), d.channel or "", d.account, d.peer_kind, d.to or "")
        except ConfigError:
            return None  # the config in force is invalid: runs that deliver are refused anyway, and say why
        if who is None:
            return None
        kind = peer_kind_of(d.channel or "", d.peer_kind, d.to or "")
        return who.reworded(f"job {job.label}: {who} is not let in to talk to the assistant now, so its runs are "
                            "skipped and nothing is delivered until they are — "
                            f"{not_let_in_fix(job.id, kind, who, d.channel or '', d.account)}")

    def _model_delivers_to_owners(self, job: Job) -> Job:
        """The model may aim a job's replies at the owner of the job's agent only. A main-session run
        answers with what the main session knows (MEMORY.md, owner-only notes), and an isolated run says
        what its message asks — a message the model writes from that same knowledge ("say exactly: the PIN
        is …"). So whatever else the model was led to ask for is refused — a contact, a group, or the owner
        of an account that the bindings give to another agent; the owner can still choose any target with
        `hermit cron` or the web app (a main-session job only with their opt-in, `shares_main`, which the
        model can never set). An accepted target is marked `owner_only`: each run checks it again
        (`check_delivery`)."""
        d = job.delivery
        if not self.for_model or d.target() is None:
            return job
        risk = self.not_the_owner(job)
        if risk is None:  # the model's choice now: checked before every run, and no opt-in of the owner's
            return job.model_copy(update={"delivery": d.model_copy(update={"owner_only": True,
                                                                           "shares_main": False})})
        channel, account = (d.channel or "").lower(), d.account or "default"
        kind = peer_kind_of(channel, d.peer_kind, d.to or "")
        acc = self.current().config.channels.accounts_of(channel).get(account) if channel != "webchat" else None
        owners = (f"that account's owners: {', '.join(acc.owners)}" if acc is not None and acc.owners else
                  f"no owners are listed under channels.{channel}.accounts.{account}.owners")
        # An owner of the account whose DMs reach another agent, or a web chat that opens another agent.
        elsewhere = channel == "webchat" or (acc is not None and kind == "dm"
                                             and matches(channel, acc.owners, d.to or ""))
        why = f"is not one ({risk})" if elsewhere else "is not one of that account's owners"
        if elsewhere:
            mine = self._owner_targets(job)
            owners = (f"this agent's owners: {', '.join(mine)}" if mine else
                      f"no account's owners reach agent {job.agent_id}")
        raise JobError(f"job {job.label}: the cron tool delivers replies only to an owner of agent {job.agent_id} "
                       "(they can quote what this chat knows: MEMORY.md, owner-only notes), and "
                       f"{d.describe()} ({kind}) {why}",
                       f"deliver to an owner's DM ({owners}) or to the web chat (channel webchat, to owner) when "
                       "they reach this agent; the owner can set any other target with `hermit cron add "
                       "--announce …` or in the web app")

    def _model_sets_no_opt_in(self, job_id: str, fields: dict[str, Any]) -> None:
        """The owner's opt-in to share main-session text (`delivery.shares_main`) is never the model's."""
        given = fields.get("delivery")
        if self.for_model and isinstance(given, dict) and given.get("shares_main"):
            raise JobError(f"job {job_id}: only the owner can let a job's replies share main-session text "
                           "(delivery.shares_main)", "leave shares_main out; the owner can set it with `hermit "
                           "cron edit ID --share-main-text`")

    def _owner_targets(self, job: Job, limit: int = 5) -> list[str]:
        """CHANNEL:ACCOUNT:ID of the owners (by id) whose DMs reach the job's agent, for the hint."""
        out: list[str] = []
        loaded = self.current()
        for channel, account, acc in accounts(loaded.config.channels):
            for owner in acc.owners if acc.enabled else ():
                if len(out) < limit and not is_username(owner) and not_the_owner(
                        loaded, job.agent_id, channel, account, "dm", owner) is None:
                    out.append(f"{channel}:{account}:{owner}")
        return out

    def main_text_reaches(self, job: Job) -> str | None:
        """Who a main-session job's replies reach when that is not only the owner of its agent and the owner
        did not opt in (`delivery.shares_main`), else None. Such a job is refused when it is made or aimed
        (by the owner; the cron tool has its own, stricter rule) and is not run (`check_delivery`)."""
        if job.session_target != "main" or job.delivery.shares_main:
            return None
        return self.not_the_owner(job)

    def _owner_shares_main_text(self, job: Job) -> Job:
        """The owner's main-session job may reach someone else only if the owner said so: otherwise a JobError
        naming who it would reach, and the ways out."""
        risk = None if self.for_model else self.main_text_reaches(job)
        if risk is None:
            return job
        raise JobError(f"job {job.label} runs in agent {job.agent_id}'s main session, so its replies can quote "
                       f"MEMORY.md and owner-only notes, and they would go to {risk}",
                       "drop --main (an isolated run sees only shared notes), aim it at an owner, or, if they may "
                       "read main-session text, confirm with --share-main-text (in a job spec: "
                       "delivery.shares_main: true)")

    def check_delivery(self, job: Job) -> None:
        """Before a run and again before its reply is sent, against the config in force (`current`: in the
        gateway, hermit.yaml as it is at that moment): a job the cron tool aimed at the owner must still
        reach only the owner of its agent (a changed `owners` list or binding can make it someone else's),
        and a main-session job reaches someone else only with the owner's opt-in (`delivery.shares_main`; a
        job file edited by hand, or made before the rule, may lack it). Fails closed (JobError, one warning
        in the log, no text of the job's; a ConfigError while the config is invalid): the run does not
        happen, or its reply is not sent."""
        if job.delivery.owner_only and (risk := self.not_the_owner(job)) is not None:
            log.warning("job %s not run: the cron tool aimed its replies at the owner of agent %s, and the config "
                        "now sends them to %s", job.label, job.agent_id, risk)
            raise JobError(f"not run: the cron tool aimed this job's replies at the owner of agent "
                           f"{job.agent_id}, and the config now sends them to {risk}",
                           f"aim it at an owner again (`hermit cron edit {job.id} --announce "
                           f"CHANNEL:ACCOUNT:PEER`), or remove it (`hermit cron remove {job.id}`)")
        if (risk := self.main_text_reaches(job)) is not None:
            log.warning("job %s not run: a main-session job of agent %s would deliver to %s (%s), and the owner "
                        "did not opt in (delivery.shares_main)", job.label, job.agent_id, job.delivery.describe(),
                        risk)
            raise JobError(f"not run: this job runs in agent {job.agent_id}'s main session (MEMORY.md, owner-only "
                           f"notes) and its replies would go to {risk}, without the owner's opt-in",
                           f"run it isolated (`hermit cron edit {job.id} --isolated`), aim it at an owner, or "
                           f"confirm (`hermit cron edit {job.id} --share-main-text`)")

    def _owner_aims(self, old: Job, new: Job, patch: dict[str, Any]) -> Job:
        """After the owner's change (`hermit cron edit`, the web app): an opt-in holds for the target and
        session it was given with. A new target clears the cron tool's `owner_only` (the owner chose it)
        and the owner's `shares_main` (given for the old one), unless the change sets them; a job that
        no longer runs in the main session, or delivers nowhere, keeps no `shares_main`."""
        d, given = new.delivery, patch.get("delivery")
        given = given if isinstance(given, dict) else {}
        moved = d.target() != old.delivery.target()
        owner_only = d.owner_only and not (moved and "owner_only" not in given)
        shares = d.shares_main and new.session_target == "main" and d.target() is not None and not (
            (moved or new.session_target != old.session_target or new.agent_id != old.agent_id)
            and "shares_main" not in given)
        if shares:
            owner_only = False
        changed = {k: v for k, v in (("owner_only", owner_only), ("shares_main", shares)) if getattr(d, k) != v}
        return new.model_copy(update={"delivery": d.model_copy(update=changed)}) if changed else new

    def _changed(self) -> None:
        running = self._scheduler()
        if self.wake is not None:
            self.wake()
        elif running is not None:
            running.wake()

    def add(self, spec: dict[str, Any]) -> dict[str, Any]:
        self._model_sets_no_opt_in(str(spec.get("id") or "(new)"), spec)
        job = self._with_target(build_job(spec, now=self.clock()))
        if not self.for_model:
            job = self._owner_aims(job, job, spec)
        job = self._planned(self._owner_shares_main_text(self._model_delivers_to_owners(job)))

        def append(file: JobFile) -> JobFile:
            if any(j.id == job.id for j in file.jobs):
                raise JobError(f"a job with id {job.id!r} exists", "choose another id, or leave it out")
            self.store.set_aside_runs(job.id)  # an earlier job's runs are not this one's
            return JobFile((*file.jobs, job), file.invalid)

        self.store.mutate(append)
        self._changed()
        out: dict[str, Any] = {"job": self.describe(job),
                               "next_runs": [t.isoformat() for t in self.next_times(job)]}
        if (warning := self.not_let_in(job)) is not None:
            out["warning"] = warning.text
        return out

    def update(self, job_id: str, patch: dict[str, Any]) -> dict[str, Any]:
        def change(job: Job) -> Job:
            new = patch_job(job, patch, now=self.clock())
            if new.delivery != job.delivery:
                new = self._with_target(new)
            # The model may retime, pause or resume any job; any other change (its message above all:
            # "say exactly: the PIN is …" in the owner's job that posts to a group) leaves a job it may
            # change only if its replies reach an owner alone.
            if not set(patch) <= WHEN_ONLY or new.delivery != job.delivery:
                new = self._model_delivers_to_owners(new)
            if not self.for_model:
                new = self._owner_aims(job, new, patch)
                aim = (new.session_target, new.delivery, new.agent_id)
                if aim != (job.session_target, job.delivery, job.agent_id) or (new.enabled and not job.enabled):
                    new = self._owner_shares_main_text(new)
            if new.schedule != job.schedule or new.enabled != job.enabled or new.agent_id != job.agent_id:
                new = self._planned(new)
            if new.agent_id != job.agent_id:
                self.store.set_aside_runs(job_id)  # its runs so far are the other agent's text
            if (new.delivery.target(), new.agent_id) != (job.delivery.target(), job.agent_id):
                first[:] = self._retire_first(job)
            return new

        first: list[str] = []  # what the retire before the save moved (`_retire_first`)

        self._model_sets_no_opt_in(job_id, patch)
        old = self.get(job_id)
        updated = self.store.update_job(job_id, change)
        self._changed()
        assert updated is not None
        out: dict[str, Any] = {"job": self.describe(updated)}
        if (warning := self.not_let_in(updated)) is not None:
            out["warning"] = warning.text
        if (updated.delivery.target(), updated.agent_id) != (old.delivery.target(), old.agent_id):
            retired = first + self._retire(old, "re-aimed")
            if retired:
                out["retired"] = retired
        return out

    def remove(self, job_id: str) -> dict[str, Any]:
        old = self.get(job_id)

        def gone(job: Job) -> None:
            self._retire_first(job)

        self.store.update_job(job_id, gone)
        self._changed()
        self._retire(old, "removed")
        return {"removed": job_id}

    def _retire_first(self, old: Job) -> list[str]:
        """Retire what the job's runs kept before its new aim (or its removal) is saved, under the job file's lock: a
        Hermit killed between the save and `_retire` left the job aimed at its new audience with the old one's notes
        and room. Killed after this, the job keeps its old aim with nothing kept (fail closed); `_retire` after the
        save takes what a run wrote in between."""
        # Imported here: it needs memory's policy modules, which `cron list` does not.
        from hermit.scheduler.reaim import retire_job_audience

        try:
            return retire_job_audience(self.loaded, old.agent_id, old.id, self.clock())
        except OSError as e:
            raise JobError(f"job {old.label} was not changed: what its runs kept for its audience (notes, its room) "
                           f"could not be made owner-only first: {e}", "fix the cause, then try again") from e

    def _retire(self, old: Job, why: str) -> list[str]:
        """What the job's runs kept for its old audience becomes owner-only (scheduler/reaim.py), after the
        change is saved: a run in flight then delivers nothing (its aim changed), and what it writes meanwhile
        is retired too. A failure is the owner's to hear: the job's next run could read what it kept."""
        from hermit.scheduler.reaim import retire_job_audience

        try:
            retired = retire_job_audience(self.loaded, old.agent_id, old.id, self.clock())
        except OSError as e:
            raise JobError(f"job {old.label} was {why}, but what its runs kept for its old audience (notes, its "
                           f"room) could not be made owner-only: {e}",
                           f"fix the cause, then `hermit cron edit {old.id}` again (or disable it) before it runs"
                           ) from e
        if retired:
            log.info("job %s %s: retired %s", old.label, why, ", ".join(retired))
        return retired

    def request_run(self, job_id: str) -> dict[str, Any]:
        """Queue a run for the scheduler (the gateway); it starts within seconds when one is running."""
        self.get(job_id)
        self.store.update_job(job_id, lambda job: job.model_copy(
            update={"state": job.state.model_copy(update={"run_requested": True})}))
        self._changed()
        note = ("queued; it starts now" if self.wake is not None or self._scheduler() is not None else
                "queued; it runs when the gateway is running (`hermit gateway run`), or now with "
                f"`hermit cron run {job_id}`")
        return {"queued": job_id, "note": note}
