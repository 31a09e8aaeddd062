"""The agent's `cron` tool: status, list, add, update, remove, run and runs of scheduled jobs.

One tool with an `action` keeps the schema small (it is in every main-session request). The jobs live
in the scheduler (an outer layer), so this module only declares what it needs as `CronBackend`; the
composition root hands the scheduler's implementation to the runtime, which offers the tool in the
main session only (never in group, channel, cron or sub-agent sessions). `run` only asks for a run:
the scheduler starts it outside this turn, so a job aimed at the main session cannot deadlock on it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from hermit.errors import ToolError
from hermit.tools.base import Tool, make_tool

CRON_DESCRIPTION = (
    "Scheduled jobs: status, list, add, update, remove, run (queue now), runs (history). add/update take "
    "`job`: {name, message, schedule: {kind: at, at: ISO} | {kind: every, every_ms} | {kind: cron, expr "
    "(5 fields, or 6 with seconds first), tz?}, session_target: isolated|main, delivery: {mode: "
    "announce|none, channel, to, account?}}. No tz = the user's timezone."
)

Action = Literal["status", "list", "add", "update", "remove", "run", "runs"]


class CronBackend(Protocol):
    def status(self, agent_id: str | None = None) -> dict[str, Any]: ...

    def list_jobs(self, agent_id: str | None = None) -> dict[str, Any]: ...

    def add(self, spec: dict[str, Any]) -> dict[str, Any]: ...

    def update(self, job_id: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def remove(self, job_id: str) -> dict[str, Any]: ...

    def request_run(self, job_id: str) -> dict[str, Any]: ...

    def runs(self, job_id: str, limit: int = 20) -> dict[str, Any]: ...


class CronTools:
    def __init__(self, backend: CronBackend, *, agent_id: str) -> None:
        self.backend = backend
        self.agent_id = agent_id

    def tools(self) -> list[Tool]:
        return [make_tool(self.cron, name="cron", description=CRON_DESCRIPTION)]

    def cron(
        self,
        action: Action,
        id: Annotated[str | None, Field(description="Job id (update, remove, run, runs)")] = None,
        job: Annotated[dict[str, Any] | None, Field(description="Job fields (add, update)")] = None,
    ) -> dict[str, Any]:
        # Agents are isolated: an agent's tool sees and changes its own jobs only (another agent's main-session
        # job would run with that agent's MEMORY.md).
        if action == "status":
            return self.backend.status(self.agent_id)
        if action == "list":
            return self.backend.list_jobs(self.agent_id)
        if job and job.get("agent_id", self.agent_id) != self.agent_id:
            raise ToolError(f"jobs of agent {job['agent_id']!r} are not this agent's to {action}",
                            "leave agent_id out: this agent's jobs run as this agent; the owner can set up "
                            "another agent's job with `hermit --agent ID cron add`")
        if action == "add":
            if not job:
                raise ToolError("add needs `job`", "give at least message and schedule")
            # The id is Hermit's to make: run logs (`cron/runs/<id>.jsonl`, replies in them) outlive their job, and
            # a job of this agent named like another agent's — removed or live — read its runs or learnt its id.
            return self.backend.add({**{k: v for k, v in job.items() if k != "id"}, "agent_id": self.agent_id})
        if not id:
            raise ToolError(f"{action} needs the job's `id`", "find it with action=list")
        if not any(j.get("id") == id for j in self.backend.list_jobs(self.agent_id)["jobs"]):
            raise ToolError(f"no job with id {id!r}", "find this agent's jobs with action=list")
        if action == "update":
            if not job:
                raise ToolError("update needs `job` with the fields to change", "e.g. {\"enabled\": false}")
            return self.backend.update(id, job)
        if action == "remove":
            return self.backend.remove(id)
        if action == "run":
            return self.backend.request_run(id)
        return self.backend.runs(id)
