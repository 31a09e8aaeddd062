"""The cron tool's `status` in one agent's main session showed the running scheduler's status whole: every other
agent's next job (its id, name and time), heartbeat target and last outcome, and the ids of their running jobs.
Agent family's owner (a relative on the family bot) learnt what agent main's owner had scheduled ("call the
divorce lawyer", when). `list` and `runs` were already this agent's own; `status` is now too."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.scheduler import CronJobs, LocalHost, SchedulerService
from hermit.sessions.keys import main_session_key
from hermit.testing import ScriptedModel
from schedhelpers import MemoryChannel, SimClock, runtimes

NOW = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
SECRET_NAME = "call the divorce lawyer"


def test_the_cron_tools_status_shows_only_this_agents_jobs_and_heartbeat(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = build_config({
        "agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"}},
                   "list": [{"id": "main", "default": True,
                             "heartbeat": {"target": {"channel": "telegram", "account": "personal", "to": "42"}}},
                            {"id": "family"}]},
        "channels": {"telegram": {"accounts": {"personal": {"owners": ["42"]}, "familybot": {"owners": ["77"]}}}},
        "bindings": [{"match": {"channel": "telegram", "account_id": "personal"}, "agent_id": "main"},
                     {"match": {"channel": "telegram", "account_id": "familybot"}, "agent_id": "family"}]},
        StatePaths(home))
    clock = SimClock(NOW)
    CronJobs(home, loaded, clock=clock, fsync=False).add(
        {"name": SECRET_NAME, "message": "remind me", "agent_id": "main", "session_target": "isolated",
         "schedule": {"kind": "every", "every_ms": 3_600_000}})
    rts, _ = runtimes(loaded, clock, lambda r: "done")
    channel = MemoryChannel()
    service = SchedulerService(home, loaded, LocalHost(rts, channel.deliver, threaded=False), clock=clock, fsync=False)
    model = ScriptedModel([{"tool_calls": [{"name": "cron", "arguments": {"action": "status"}}]}, "ok"])
    family = AgentRuntime(loaded.agent("family"), model, clock=clock, fsync=False, home=home,
                          cron=CronJobs(home, loaded, clock=clock, fsync=False, for_model=True))

    async def turn() -> str:
        await service.start(run_loop=False)
        try:
            result = await asyncio.to_thread(family.run_turn, main_session_key("family"), "what is planned?")
            return str(result.tool_calls[0].result)
        finally:
            await service.stop()

    try:
        out = asyncio.run(turn())
    finally:
        family.close()
        for rt in rts.values():
            rt.close()
    status = json.loads(out)
    assert isinstance(status["scheduler"], dict), out  # the gateway's scheduler answered
    assert SECRET_NAME not in out and "telegram:personal:42" not in out
    assert set(status["scheduler"]["agents"]) == {"family"}
    assert status["jobs"] == 0 and status["scheduler"]["jobs"] == 0
