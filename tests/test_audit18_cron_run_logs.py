"""Run logs are kept per job id (`<state>/cron/runs/<id>.jsonl`, each run's first 500 characters of reply) and
outlive the job: a one-shot job is removed after it runs, and `hermit cron runs ID` still shows what it said.
The cron tool took the id its model gave in `add`. Agent family's owner (a relative on the family bot, whose
model obeys them) had it add a job named like one of agent main's — `brief`, an id main's owner chose with
`hermit cron add --id` — and then asked for that job's `runs`: main's morning brief, read out of main's
MEMORY.md, came back. A live job's id was told too ("a job with id 'brief' exists"). Now a job the cron tool
adds always gets a new id of Hermit's making; the owner's own `--id` (CLI, web app) is unchanged.

Real parts: the config loader, the real scheduler running main's job through an agent runtime, the run logs it
writes, and family's agent runtime calling the real cron tool from a scripted model."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.scheduler import CronJobs, LocalHost, SchedulerService
from hermit.sessions.keys import main_session_key
from hermit.testing import ScriptedModel
from schedhelpers import MemoryChannel, SimClock, runtimes, tick_once

NOW = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
CANARY = "BRIEF-CANARY-5517: the divorce lawyer at 10, PIN 4711"
EVERY_HOUR = {"kind": "every", "every_ms": 3_600_000}


def two_agents(home: Path) -> LoadedConfig:
    return build_config({
        "agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"}},
                   "list": [{"id": "main", "default": True}, {"id": "family"}]},
        "channels": {"telegram": {"accounts": {"personal": {"owners": ["42"]}, "familybot": {"owners": ["77"]}}}},
        "bindings": [{"match": {"channel": "telegram", "account_id": "personal"}, "agent_id": "main"},
                     {"match": {"channel": "telegram", "account_id": "familybot"}, "agent_id": "family"}]},
        StatePaths(home))


def family_calls(home: Path, loaded: LoadedConfig, clock: SimClock, calls: list[dict[str, Any]]) -> list[str]:
    """What agent family's cron tool answered to `calls`, made by its model in family's main session."""
    model = ScriptedModel([step for c in calls for step in ({"tool_calls": [{"name": "cron", "arguments": c}]}, "ok")])
    family = AgentRuntime(loaded.agent("family"), model, clock=clock, fsync=False, home=home,
                          cron=CronJobs(home, loaded, clock=clock, fsync=False, for_model=True))
    try:
        out = []
        for _ in calls:
            result = family.run_turn(main_session_key("family"), "do it")
            out += [str(c.result) for c in result.tool_calls]
        return out
    finally:
        family.close()


def run_mains_brief(home: Path, loaded: LoadedConfig, clock: SimClock) -> None:
    """main's owner: a one-shot brief in main's main session, to their own DM, with an id they chose; it runs
    and is removed, its run log kept."""
    CronJobs(home, loaded, clock=clock, fsync=False).add(
        {"id": "brief", "name": "brief", "message": "brief me from MEMORY.md", "agent_id": "main",
         "session_target": "main", "schedule": {"kind": "at", "at": (NOW + timedelta(minutes=5)).isoformat()},
         "delivery": {"mode": "announce", "channel": "telegram", "account": "personal", "to": "42"}})
    rts, _ = runtimes(loaded, clock, lambda r: CANARY)
    channel = MemoryChannel()
    service = SchedulerService(home, loaded, LocalHost(rts, channel.deliver, threaded=False), clock=clock,
                               fsync=False)
    try:
        tick_once(service, clock, NOW + timedelta(minutes=6))
    finally:
        for rt in rts.values():
            rt.close()
    assert [t.peer_id for t, text in channel.sent if CANARY in text] == ["42"]  # main's owner got it
    jobs = CronJobs(home, loaded, clock=clock, fsync=False)
    assert jobs.list_jobs()["jobs"] == []  # the one-shot job is gone, its run log kept
    assert CANARY in json.dumps(jobs.store.runs("brief"))


def test_another_agents_tool_cannot_read_a_removed_jobs_run_log_by_reusing_its_id(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = two_agents(home)
    clock = SimClock(NOW)
    run_mains_brief(home, loaded, clock)
    jobs = CronJobs(home, loaded, clock=clock, fsync=False)
    answers = family_calls(home, loaded, clock, [
        {"action": "add", "job": {"id": "brief", "message": "hi", "schedule": EVERY_HOUR}},
        {"action": "list"}])
    ids = [j["id"] for j in json.loads(answers[1])["jobs"]]
    assert len(ids) == 1
    answers += family_calls(home, loaded, clock, [{"action": "runs", "id": i} for i in (*ids, "brief")])
    assert not any(CANARY in a or "4711" in a for a in answers), answers
    assert ids != ["brief"]  # family's job got an id of Hermit's making
    assert CANARY in json.dumps(jobs.store.runs("brief"))  # main's history is intact


def test_another_agents_tool_is_not_told_a_live_jobs_id(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = two_agents(home)
    clock = SimClock(NOW)
    CronJobs(home, loaded, clock=clock, fsync=False).add(
        {"id": "lawyer", "name": "call the divorce lawyer", "message": "remind me", "agent_id": "main",
         "schedule": EVERY_HOUR})
    answers = family_calls(home, loaded, clock, [
        {"action": "add", "job": {"id": "lawyer", "message": "hi", "schedule": EVERY_HOUR}}])
    assert "exists" not in answers[0] and "lawyer" not in answers[0], answers
    jobs = CronJobs(home, loaded, clock=clock, fsync=False).list_jobs()["jobs"]
    assert sorted((j["agent_id"], j["id"] == "lawyer") for j in jobs) == [("family", False), ("main", True)]


def test_the_owners_chosen_id_still_holds(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = two_agents(home)
    out = CronJobs(home, loaded, clock=SimClock(NOW), fsync=False).add(
        {"id": "chores", "message": "remind the kids", "agent_id": "family", "schedule": EVERY_HOUR})
    assert out["job"]["id"] == "chores"


def test_another_agents_tool_can_aim_no_job_at_main_or_its_owner(tmp_path: Path) -> None:
    """Guard (held before): family's tool may not make a job of main's, aim one at main's owner's DM (their
    account, bound to main) or main's group, nor move its own job there."""
    home = tmp_path / "home"
    loaded = two_agents(home)
    clock = SimClock(NOW)
    to_main_owner = {"mode": "announce", "channel": "telegram", "account": "personal", "to": "42"}
    to_main_group = {"mode": "announce", "channel": "telegram", "account": "personal", "to": "-100200"}
    own = {"mode": "announce", "channel": "telegram", "account": "familybot", "to": "77"}
    answers = family_calls(home, loaded, clock, [
        {"action": "add", "job": {"message": "hi", "schedule": EVERY_HOUR, "agent_id": "main",
                                  "session_target": "main"}},
        {"action": "add", "job": {"message": "hi", "schedule": EVERY_HOUR, "delivery": to_main_owner}},
        {"action": "add", "job": {"message": "hi", "schedule": EVERY_HOUR, "session_target": "main",
                                  "delivery": to_main_group}},
        {"action": "add", "job": {"message": "hi", "schedule": EVERY_HOUR, "session_target": "main",
                                  "delivery": own}}])
    assert [a.startswith("error:") for a in answers] == [True, True, True, False], answers
    mine = json.loads(answers[3])["job"]["id"]
    answers = family_calls(home, loaded, clock, [
        {"action": "update", "id": mine, "job": {"agent_id": "main"}},
        {"action": "update", "id": mine, "job": {"delivery": to_main_owner}},
        {"action": "update", "id": mine, "job": {"delivery": {"to": "-100200", "account": "personal"}}}])
    assert all(a.startswith("error:") for a in answers), answers
    [job] = CronJobs(home, loaded, clock=clock, fsync=False).list_jobs()["jobs"]
    assert (job["agent_id"], job["delivery"]["account"], job["delivery"]["to"]) == ("family", "familybot", "77")


def test_a_job_the_owner_makes_with_a_used_id_shows_none_of_the_earlier_jobs_runs(tmp_path: Path) -> None:
    """The owner re-uses a readable id for another agent (`hermit --agent family cron add --id brief` after main's
    `brief` ran and was removed): family's tool asked for its runs and got main's briefs."""
    home = tmp_path / "home"
    loaded = two_agents(home)
    clock = SimClock(NOW)
    run_mains_brief(home, loaded, clock)
    clock.now = NOW + timedelta(hours=1)
    jobs = CronJobs(home, loaded, clock=clock, fsync=False)
    jobs.add({"id": "brief", "message": "remind the kids", "agent_id": "family", "schedule": EVERY_HOUR})
    answers = family_calls(home, loaded, clock, [{"action": "runs", "id": "brief"}])
    assert not any(CANARY in a or "4711" in a for a in answers), answers
    assert json.loads(answers[0])["runs"] == []
    assert jobs.runs("brief")["runs"] == []  # `hermit cron runs brief`: the job of that id now, not the earlier
    [aside] = [p.name for p in jobs.store.runs_dir.iterdir() if p.name != "brief.jsonl"]
    assert aside.startswith("brief.before-")  # the earlier job's runs are kept, under a name no job id has
    assert CANARY in json.dumps(jobs.store.runs(aside.removesuffix(".jsonl")))


def test_a_job_the_owner_moves_to_another_agent_takes_none_of_its_earlier_runs(tmp_path: Path) -> None:
    """The owner moves main's job to family (the web app's cron.update with `agent_id`): its earlier runs — main's
    text — are set aside, not shown to family's cron tool as the job's."""
    home = tmp_path / "home"
    loaded = two_agents(home)
    clock = SimClock(NOW)
    jobs = CronJobs(home, loaded, clock=clock, fsync=False)
    jobs.add({"id": "brief", "message": "brief me", "agent_id": "main", "schedule": EVERY_HOUR,
              "delivery": {"mode": "announce", "channel": "telegram", "account": "personal", "to": "42"}})
    rts, _ = runtimes(loaded, clock, lambda r: CANARY)
    service = SchedulerService(home, loaded, LocalHost(rts, MemoryChannel().deliver, threaded=False), clock=clock,
                               fsync=False)
    try:
        tick_once(service, clock, NOW + timedelta(hours=1, minutes=1))
    finally:
        for rt in rts.values():
            rt.close()
    assert CANARY in json.dumps(jobs.runs("brief"))
    jobs.update("brief", {"agent_id": "family", "delivery": {"account": "familybot", "to": "77"}})
    answers = family_calls(home, loaded, clock, [{"action": "runs", "id": "brief"}])
    assert not any(CANARY in a or "4711" in a for a in answers), answers
    assert json.loads(answers[0])["runs"] == []
