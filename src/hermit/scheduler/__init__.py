"""Scheduled work: cron jobs (store, schedule math, runs) and the heartbeat, run by one timer in the gateway.

`SchedulerService` is the gateway service; `CronJobs` the job service shared by `hermit cron` and the
agent's cron tool; `SchedulerHost` what the scheduler needs from its host, `LocalHost` an in-process one.
"""

from hermit.scheduler.control import CronJobs
from hermit.scheduler.host import LocalHost, SchedulerHost, TurnOutcome
from hermit.scheduler.jobs import Job
from hermit.scheduler.service import SchedulerService
from hermit.scheduler.store import JobStore

__all__ = ["CronJobs", "Job", "JobStore", "LocalHost", "SchedulerHost", "SchedulerService", "TurnOutcome"]
