"""The jobs a revoke holds: enabled jobs aimed at the contact just revoked, whose runs are now skipped
(scheduler/targets.not_let_in: no turn, nothing sent, kept until they are let in again). `hermit pairing revoke`
and the web app's Revoke (gateway `pairing.revoke`) both name them, in the same words (`held_note`).
"""

from __future__ import annotations

from hermit.channels.pairing import ApprovedSender, printable
from hermit.config.allowlist import sender_key
from hermit.config.load import LoadedConfig
from hermit.errors import HermitError
from hermit.scheduler.control import CronJobs
from hermit.scheduler.targets import peer_kind_of, resolve_target


def jobs_held(cron: CronJobs, loaded: LoadedConfig, gone: ApprovedSender) -> list[str]:
    """The enabled jobs whose replies go to the sender just revoked and are now skipped, as `id (name)`; none
    when the config still lets them in (an owner, allow_from, dm_policy open) or the jobs cannot be read. A
    one-shot (`at`) job is not held: skipped at its one time, it is disabled (runner.one_shot_skipped), so its
    entry says so."""
    try:
        jobs = cron.load().jobs
    except HermitError:
        return []  # an unreadable job file is `hermit doctor`'s to report
    who = sender_key(gone.channel, gone.sender_id)
    held = []
    for job in jobs:
        d = job.delivery
        if d.target() is None or peer_kind_of(d.channel or "", d.peer_kind, d.to or "") == "group":
            continue
        try:
            t = resolve_target(loaded.config.channels, d.channel or "", d.account)
        except HermitError:
            continue  # a job to an account that is gone: `hermit doctor` names it
        if (t.channel, t.account, sender_key(t.channel, d.to or "")) == (gone.channel, gone.account_id, who) and \
                cron.not_let_in(job) is not None:
            once = f" — one-shot {job.schedule.describe()}: if that time comes first it is skipped and disabled, " \
                "not run later" if job.schedule.kind == "at" else ""
            held.append(printable(job.label, 200) + once)
    return held


def held_note(held: list[str]) -> str:
    """What a revoke says of the jobs it holds ('' for none)."""
    if not held:
        return ""
    jobs = "scheduled job aimed at them" if len(held) == 1 else "scheduled jobs aimed at them"
    return (f"{len(held)} {jobs} will be skipped until they are approved again: {', '.join(held)} (re-aim one with "
            "`hermit cron edit ID --announce CHANNEL:ACCOUNT:PEER`, or remove it with `hermit cron remove ID`)")
