"""Health of scheduled work for `hermit doctor`: the job file and each job are valid, every enabled
heartbeat has something to check (HEARTBEAT.md is not just headings), and every delivery target names a
channel account that exists."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from hermit.config.load import LoadedConfig
from hermit.errors import HermitError
from hermit.scheduler.control import CronJobs
from hermit.scheduler.heartbeat import (
    HEARTBEAT_FILE,
    HeartbeatFileError,
    heartbeat_file_is_empty,
    heartbeat_target,
    read_heartbeat_file,
    withheld_from,
)
from hermit.scheduler.targets import hint_then, not_let_in_fix, peer_kind_of, resolve_target

# (status, detail, fix): one doctor line.
Health = tuple[Literal["ok", "warn", "fail"], str, str]


def jobs_health(home: Path, loaded: LoadedConfig) -> Health:
    jobs = CronJobs(home, loaded)
    try:
        file = jobs.load()
    except HermitError as e:
        return ("fail", e.message, e.hint)
    problems = [bad.error for bad in file.invalid]
    for job in file.jobs:
        try:
            loaded.agent(job.agent_id)
            jobs.zone(job)
            if job.enabled:
                jobs.next_times(job, 1)
        except HermitError as e:
            problems.append(f"job {job.label}: {e.message}")
    if problems:
        return ("fail", "; ".join(problems),
                "fix them with `hermit cron edit <id> …` or remove them with `hermit cron remove <id>`")
    enabled = sum(1 for j in file.jobs if j.enabled)
    return ("ok", f"{len(file.jobs)} jobs ({enabled} enabled) in {jobs.store.path}", "")


def heartbeat_health(loaded: LoadedConfig) -> Health:
    """Fails when a heartbeat was configured on purpose but HEARTBEAT.md is empty, so every heartbeat is
    skipped; the default heartbeat with the empty template is fine (it costs nothing until used)."""
    lines: list[str] = []
    failed: list[str] = []
    hints: list[str] = []
    for agent in loaded.agents:
        cfg = agent.settings.heartbeat
        if cfg.every_minutes == 0:
            lines.append(f"{agent.id}: off")
            continue
        try:
            text = read_heartbeat_file(agent.workspace)
        except HeartbeatFileError as e:
            failed.append(f"{agent.id}: {e.message}")
            hints.append(e.hint)
            continue
        empty = text is None or heartbeat_file_is_empty(text)
        if empty and "heartbeat" in agent.settings.model_fields_set:
            failed.append(f"{agent.id}: every {cfg.every_minutes} min, but {agent.workspace / HEARTBEAT_FILE} is "
                          "empty (only blank lines and headings), so every heartbeat is skipped")
            hints.append(f"add checklist items to {HEARTBEAT_FILE}, or set heartbeat.every_minutes: 0")
        elif empty:
            lines.append(f"{agent.id}: every {cfg.every_minutes} min, idle until {HEARTBEAT_FILE} has items")
        else:
            t = cfg.target
            dest = f"alerts to {t.channel}:{t.account}:{t.to}" if t else "alerts stay in the transcript (no target)"
            lines.append(f"{agent.id}: every {cfg.every_minutes} min, {dest}")
    if failed:
        return ("fail", "; ".join(failed), "; ".join(dict.fromkeys(hints)))
    return ("ok", "; ".join(lines), "")


def target_problems(home: Path, loaded: LoadedConfig, then: str | None = None) -> tuple[list[str], int]:
    """(what is wrong with each delivery target, how many targets there are): announcing jobs and
    heartbeat targets. An unreadable job file is jobs_health's to report. `then`: the gateway's restart (or start)
    in words for how it runs, for a target whose channel has no account (targets.NoAccount)."""
    problems: list[str] = []
    count = 0
    for agent in loaded.agents:
        t = agent.settings.heartbeat.target
        if t is not None and agent.settings.heartbeat.every_minutes > 0:
            count += 1
            try:
                resolve_target(loaded.config.channels, t.channel, t.account, what=f"heartbeat target of {agent.id}")
            except HermitError as e:
                problems.append(f"{e.message} — {hint_then(e, then)}")
    try:
        jobs = CronJobs(home, loaded).load().jobs
    except HermitError:
        jobs = ()
    for job in jobs:
        d = job.delivery
        if d.mode == "announce" and d.channel and job.enabled:
            count += 1
            try:
                resolve_target(loaded.config.channels, d.channel, d.account, what=f"job {job.label}")
            except HermitError as e:
                problems.append(f"{e.message} — {hint_then(e, then)}")
    return problems, count


def targets_health(home: Path, loaded: LoadedConfig, then: str | None = None) -> Health:
    problems, count = target_problems(home, loaded, then)
    if problems:
        return ("fail", "; ".join(problems),
                "fix the job with `hermit cron edit <id> --announce CHANNEL:ACCOUNT:PEER`, the heartbeat under "
                "agents.*.heartbeat.target, or add the account under channels.<name>.accounts")
    return ("ok", f"{count} target{'' if count == 1 else 's'}, each naming a configured channel account"
            if count else "no job or heartbeat delivers to a channel", "")


def let_in_health(home: Path, loaded: LoadedConfig) -> Health:
    """Warn of each enabled job aimed at someone the account does not let in now (revoked, never approved, a
    group not under `groups`): its runs are skipped, nothing delivered, until they are let in again; and of each
    heartbeat whose alerts are shared with such a target (heartbeat.withheld_from: not delivered either)."""
    try:
        cron = CronJobs(home, loaded)
        jobs = cron.load().jobs
    except HermitError:
        jobs = ()  # an unreadable job file is jobs_health's to report
    held: list[str] = []
    hints: list[str] = []
    for job in jobs:
        if (warning := cron.not_let_in(job)) is not None:
            held.append(warning.text.split(" — ", 1)[0])
            d = job.delivery
            hints.append(not_let_in_fix(job.id, peer_kind_of(d.channel or "", d.peer_kind, d.to or ""), warning,
                                        d.channel or "", d.account))
    for agent in loaded.agents:
        hb = agent.settings.heartbeat
        if hb.every_minutes <= 0 or hb.target is None or not hb.share_alerts_with_target:
            continue  # not shared: an alert for anyone but an owner is withheld anyway (doctor's access check)
        try:
            target = heartbeat_target(hb, loaded.config.channels, agent.id)
        except HermitError:
            continue  # no such account: targets_health's to report
        if (withheld := withheld_from(loaded, agent, target)) is not None:
            held.append(f"agents {agent.id}: {withheld[0]}: its alerts are not delivered")
            hints.append(withheld[1])
    if held:
        return ("warn", "; ".join(held), "; ".join(dict.fromkeys(hints)))
    return ("ok", "every job that delivers is aimed at someone let in" if jobs else "no jobs", "")
