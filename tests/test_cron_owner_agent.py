"""Whose owner a job's replies may reach: the owner of the job's own agent, not an owner of an account the
bindings give to another agent (audit F1). Agent main's cron tool used to announce a main-session job to
the owner of the family bot, which is bound to agent family (a relative's own agent): main's MEMORY.md
text reached them. Checked where the model chooses the target (the cron tool, in a real turn), again
before every run of a job it aimed (the real scheduler, delivering through a channel: a config change
must not make it someone else's), and in `hermit doctor` for heartbeat targets and main-session jobs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.models.base import ModelRequest
from hermit.scheduler import CronJobs, LocalHost, SchedulerService
from hermit.sessions.keys import main_session_key
from hermit.testing import ScriptedModel
from hermit.testing.scripted import Reply
from prochelpers import PROC_TIMEOUT
from schedhelpers import MemoryChannel, SimClock, last_user_text, runtimes, tick_once

NOW = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
EVERY_HOUR = {"kind": "every", "every_ms": 3_600_000}
TELEGRAM_OWNERS = {"personal": {"owners": ["42"]}, "familybot": {"owners": ["77"]}}
BY_ACCOUNT = [{"match": {"channel": "telegram", "account_id": "personal"}, "agent_id": "main"},
              {"match": {"channel": "telegram", "account_id": "familybot"}, "agent_id": "family"}]


def two_agents(home: Path, bindings: list[dict[str, Any]] = BY_ACCOUNT,
               channels: dict[str, Any] | None = None) -> LoadedConfig:
    return build_config({
        "agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"}},
                   "list": [{"id": "main", "default": True}, {"id": "family"}]},
        "channels": channels or {"telegram": {"accounts": TELEGRAM_OWNERS}},
        "bindings": bindings}, StatePaths(home))


def call(**arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": "cron", "arguments": arguments}]}


def announce(channel: str, to: str, account: str | None = None) -> dict[str, str]:
    return {"mode": "announce", "channel": channel, "to": to, **({"account": account} if account else {})}


def tool_turn(loaded: LoadedConfig, agent_id: str, jobs: list[dict[str, Any]]) -> list[str]:
    """One main-session turn of `agent_id` in which the model adds `jobs` with its cron tool."""
    home = loaded.paths.home
    cron = CronJobs(home, loaded, clock=SimClock(NOW), fsync=False, for_model=True)
    model = ScriptedModel([*(call(action="add", job=j) for j in jobs), "Done."])  # type: ignore[list-item]
    rt = AgentRuntime(loaded.agent(agent_id), model, clock=SimClock(NOW), fsync=False, home=home, cron=cron)
    try:
        return [r.result for r in rt.run_turn(main_session_key(agent_id), "set up the reminders").tool_calls]
    finally:
        rt.close()


def main_job(delivery: dict[str, str], **extra: object) -> dict[str, Any]:
    return {"message": "Remind me of the bank details", "session_target": "main", "schedule": EVERY_HOUR,
            "delivery": delivery, **extra}


def test_the_cron_tool_delivers_only_to_the_owner_of_its_own_agent(tmp_path: Path) -> None:
    loaded = two_agents(tmp_path / "home")
    outs = tool_turn(loaded, "main", [
        main_job(announce("telegram", "77", "familybot")),  # the family bot's owner: agent family's
        main_job(announce("telegram", "77", "familybot"), session_target="isolated"),
        main_job(announce("telegram", "42", "personal")),  # main's own owner
    ])
    for refused in outs[:2]:
        assert "the cron tool delivers replies only to an owner of agent main" in refused
        assert "telegram:familybot:77 (dm) is not one (telegram/familybot dm 77, an owner of that account " \
               "whose DMs the bindings route to agent family, not main" in refused
        assert "hint: deliver to an owner's DM (this agent's owners: telegram:personal:42)" in refused
    accepted = json.loads(outs[2])["job"]
    assert accepted["delivery"] == {**announce("telegram", "42", "personal"), "owner_only": True}
    jobs = CronJobs(loaded.paths.home, loaded).load().jobs
    assert [(j.agent_id, j.delivery.to) for j in jobs] == [("main", "42")]  # nothing for 77 was written
    # The family agent's own tool may of course reach its own owner.
    [family] = tool_turn(loaded, "family", [main_job(announce("telegram", "77", "familybot"))])
    assert json.loads(family)["job"]["agent_id"] == "family"


def test_peer_team_and_web_chat_bindings_decide_whose_owner_it_is(tmp_path: Path) -> None:
    """The route of the owner's DM is what counts, with every kind of binding: a peer binding that gives the
    owner's own DMs to another agent, a Slack team binding (a Slack DM carries its workspace, unknown here,
    so any team a binding names must lead to the job's agent), and the web chat bound to another agent."""
    bindings = [*BY_ACCOUNT,
                {"match": {"channel": "telegram", "peer": {"kind": "dm", "id": "tg:42"}}, "agent_id": "family"},
                {"match": {"channel": "slack", "account_id": "corp"}, "agent_id": "main"},
                {"match": {"channel": "slack", "team_id": "t0123"}, "agent_id": "family"},
                {"match": {"channel": "webchat"}, "agent_id": "family"}]
    channels = {"telegram": {"accounts": TELEGRAM_OWNERS}, "slack": {"accounts": {"corp": {"owners": ["U1"]}}}}
    loaded = two_agents(tmp_path / "home", bindings, channels)
    outs = tool_turn(loaded, "main", [main_job(announce("telegram", "42", "personal")),
                                      main_job(announce("slack", "U1", "corp")),
                                      main_job(announce("webchat", "owner"))])
    assert "telegram/personal dm 42, an owner of that account whose DMs the bindings route to agent family" in outs[0]
    assert "slack/corp dm U1, an owner of that account whose DMs the bindings route to agent family from some " \
           "workspaces or servers, not only to main" in outs[1]
    assert "the web chat, which the bindings give to agent family, not main" in outs[2]
    assert CronJobs(loaded.paths.home, loaded).load().jobs == ()
    [web] = tool_turn(loaded, "family", [main_job(announce("webchat", "owner"))])
    assert json.loads(web)["job"]["delivery"]["owner_only"] is True


def test_a_run_checks_the_target_again_and_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Jobs the cron tool aimed at main's owner, then the config changes: the personal bot is given to
    agent family. The scheduler does not run them (no model call, nothing delivered) and logs why; the
    owner's own job to that peer (`hermit cron add`, not the model) still runs, as does a tool job whose
    target still qualifies."""
    home = tmp_path / "home"
    before = two_agents(home)
    outs = tool_turn(before, "main", [main_job(announce("telegram", "42", "personal"), name="pin"),
                                      main_job(announce("telegram", "42", "personal"), name="brief",
                                               session_target="isolated")])
    tool_ids = [json.loads(o)["job"]["id"] for o in outs]
    owners_own = CronJobs(home, before, clock=SimClock(NOW), fsync=False).add(
        {"name": "digest", "message": "Post the digest", "schedule": EVERY_HOUR,
         "delivery": announce("telegram", "42", "personal")})["job"]["id"]
    # The config changes: the personal bot (and its owner 42) now belongs to agent family.
    after = two_agents(home, [{"match": {"channel": "telegram", "account_id": "personal"}, "agent_id": "family"},
                              {"match": {"channel": "telegram", "account_id": "familybot"}, "agent_id": "main"}])
    clock = SimClock(NOW)
    asked: list[str] = []

    def model(req: ModelRequest) -> Reply:
        asked.append(last_user_text(req).splitlines()[0])
        return "PIN 4321 SECRET-OF-MAIN"

    channel = MemoryChannel()
    rts, _ = runtimes(after, clock, model)
    service = SchedulerService(home, after, LocalHost(rts, channel.deliver, threaded=False), clock=clock, fsync=False)

    with caplog.at_level(logging.WARNING, logger="hermit.scheduler"):
        tick_once(service, clock, NOW + timedelta(hours=1, seconds=1))
    assert [(t.account_id, t.peer_id, text) for t, text in channel.sent] == [("personal", "42", "PIN 4321 SECRET-OF-MAIN")]
    assert len(asked) == 1 and "digest" in asked[0]  # the refused jobs never reached the model
    for job_id in tool_ids:
        [run] = service.jobs.store.runs(job_id)
        assert run["status"] == "error" and not run["delivered"]
        assert "not run: the cron tool aimed this job's replies at the owner of agent main, and the config now " \
               "sends them to telegram/personal dm 42, an owner of that account whose DMs the bindings route to " \
               "agent family" in run["error"]
    assert [run["status"] for run in service.jobs.store.runs(owners_own)] == ["ok"]
    logged = [r.getMessage() for r in caplog.records if "not run" in r.getMessage()]
    assert len(logged) == 2 and all("now sends them to telegram/personal dm 42" in m for m in logged)
    # The owner re-aims one himself (`hermit cron edit --announce`): his choice, no longer the tool's.
    edited = CronJobs(home, after, clock=clock, fsync=False).update(
        tool_ids[0], {"delivery": announce("telegram", "77", "familybot")})
    assert "owner_only" not in edited["job"]["delivery"]


def test_doctor_warns_of_main_session_text_sent_to_another_agents_owner(tmp_path: Path) -> None:
    """A heartbeat target and a main-session job the owner set himself (`hermit cron add --share-main-text`),
    aimed at the family bot's owner: doctor names them, as it does a contact — the heartbeat's alerts as not
    delivered (no opt-in in the config), the job as shared on purpose. Each agent's own owner is quiet."""
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n"
        "  list:\n"
        "    - {id: main, default: true, heartbeat: {target: {channel: telegram, account: familybot, to: '77'}}}\n"
        "    - {id: family, heartbeat: {target: {channel: telegram, account: familybot, to: '77'}}}\n"
        "channels:\n  telegram:\n    accounts:\n      personal: {owners: ['42']}\n      familybot: {owners: ['77']}\n"
        "bindings:\n  - {match: {channel: telegram, account_id: personal}, agent_id: main}\n"
        "  - {match: {channel: telegram, account_id: familybot}, agent_id: family}\n")
    env = {**os.environ, "HERMIT_HOME": str(tmp_path), "OMP_WAIT_POLICY": "PASSIVE"}
    for name, target in (("leak", "telegram:familybot:77"), ("mine", "telegram:personal:42")):
        r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "cron", "add", "--every", "1h", "--main",
                            "--name", name, "--message", "what is new?", "--announce", target,
                            *(["--share-main-text"] if name == "leak" else [])], env=env, text=True,
                           capture_output=True, timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, text=True,
                       capture_output=True, timeout=PROC_TIMEOUT)
    access = {c["name"]: c for c in json.loads(r.stdout)}["access"]
    detail = str(access["detail"])
    assert access["status"] == "warn"
    whose = "telegram/familybot dm 77, an owner of that account whose DMs the bindings route to agent family, not main"
    assert f"agents main: heartbeat alerts (main-session text) would go to {whose}: they are not delivered" in detail
    assert f"(leak): its replies (main-session text) go to {whose} (shared on purpose: --share-main-text)" in detail
    assert "agents family:" not in detail and "(mine)" not in detail
