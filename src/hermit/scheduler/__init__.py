"""Scheduled work: cron jobs (store, schedule math, runs) and the heartbeat, run by one timer in the gateway.

`SchedulerService` is the gateway service; `CronJobs` the job service shared by `hermit cron` and the
agent's cron tool; `SchedulerHost` what the scheduler needs from its host, `LocalHost` an in-process one.

Names are resolved on first use (PEP 562), as in hermit.config: `hermit cron list` and the doctor load the job
service without the host's agent runtime (the model clients, the tools, numpy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.lazy import names_from

if TYPE_CHECKING:
    from hermit.scheduler.control import CronJobs
    from hermit.scheduler.host import LocalHost, SchedulerHost, TurnOutcome
    from hermit.scheduler.jobs import Job
    from hermit.scheduler.service import SchedulerService
    from hermit.scheduler.store import JobStore

_WHERE = {
    "CronJobs": "control", "LocalHost": "host", "SchedulerHost": "host", "TurnOutcome": "host", "Job": "jobs",
    "SchedulerService": "service", "JobStore": "store",
}

__getattr__ = names_from(__name__, _WHERE)


__all__ = ["CronJobs", "Job", "JobStore", "LocalHost", "SchedulerHost", "SchedulerService", "TurnOutcome"]
