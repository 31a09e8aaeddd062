"""A heartbeat opt-in in `agents.defaults` was every agent's (audit 18). The guide puts the heartbeat there, and an
owner with one agent writes `share_alerts_with_target: true` to have their alerts posted to their family group.
A relative's agent added later (`hermit agents add family`, its main session the relative's) inherited the
target and the opt-in: its alerts — main-session text, read out of the relative's HEARTBEAT.md, MEMORY.md and
notes — were posted to the owner's family group, through the owner's bot, although the relative never chose to
share anything. Now, as with `memory_search.extra_paths` (closing16), the opt-in only `agents.defaults` names is
the default agent's; another agent shares its alerts only when its own entry says so.

Through the real scheduler running both agents' heartbeats (schedhelpers' MemoryChannel is the channel)."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from hermit.agent.runtime import AgentRuntime
from hermit.cli.main import main
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.scheduler import LocalHost, SchedulerService
from hermit.testing import FunctionModel
from schedhelpers import MemoryChannel, SimClock, settle

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 6, 1, 9, 0, tzinfo=BERLIN)
GROUP = "-100555"  # the owner's family group, on the owner's bot
SECRET = {"main": "Sunday lunch at noon (MAIN-ALERT)", "family": "therapy at 3, the PIN is 4711 (FAMILY-CANARY-1840)"}


def two_agents(home: Path, family: dict[str, Any]) -> LoadedConfig:
    return build_config(raw_config(family), StatePaths(home))


def raw_config(family: dict[str, Any]) -> dict[str, Any]:
    return {
        "agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                "heartbeat": {"every_minutes": 30, "share_alerts_with_target": True,
                                              "target": {"channel": "telegram", "account": "personal", "to": GROUP,
                                                         "peer_kind": "group"}}},
                   "list": [{"id": "main", "default": True}, {"id": "family", **family}]},
        "channels": {"telegram": {"accounts": {"personal": {"owners": ["42"], "groups": [GROUP]},
                                               "familybot": {"owners": ["77"]}}}},
        "bindings": [{"match": {"channel": "telegram", "account_id": "personal"}, "agent_id": "main"},
                     {"match": {"channel": "telegram", "account_id": "familybot"}, "agent_id": "family"}]}


def beat(home: Path, loaded: LoadedConfig, lasts: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """One heartbeat of each agent (each has a task in HEARTBEAT.md): what was posted where (each agent's heartbeat
    status into `lasts`)."""
    clock = SimClock(START)
    rts = {a.id: AgentRuntime(a, FunctionModel(lambda _r, said=SECRET[a.id]: said), clock=clock, fsync=False,
                              home=home) for a in loaded.agents}
    for a in loaded.agents:
        (a.workspace / "HEARTBEAT.md").write_text("# HEARTBEAT.md\n\n- Tell me what is coming up today.\n")
    channel = MemoryChannel()
    service = SchedulerService(home, loaded, LocalHost(rts, channel.deliver, threaded=False), clock=clock,
                               fsync=False, config=lambda: loaded)

    async def run() -> None:
        await service.start(run_loop=False)
        try:
            clock.now += timedelta(minutes=30)
            await service.tick()
            await settle(service)
            if lasts is not None:
                lasts.update({a: v["heartbeat"]["last"] for a, v in service.status()["agents"].items()})
        finally:
            await service.stop()

    try:
        asyncio.run(run())
    finally:
        for rt in rts.values():
            rt.close()
    return [(t.peer_id, text) for t, text in channel.sent]


def test_another_agent_does_not_inherit_the_default_agents_opt_in_to_share_alerts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = two_agents(home, {})
    lasts: dict[str, Any] = {}
    sent = beat(home, loaded, lasts)
    assert not any("FAMILY-CANARY" in text or "4711" in text for _, text in sent), sent
    assert "set heartbeat.share_alerts_with_target: true to send the alerts there anyway (in agent family's own " \
           "agents.list entry" in json.dumps(lasts["family"]), lasts  # where its owner's opt-in would go
    assert [(to, "MAIN-ALERT" in text) for to, text in sent] == [(GROUP, True)]  # main's owner opted in
    assert loaded.agent("main").settings.heartbeat.share_alerts_with_target
    assert not loaded.agent("family").settings.heartbeat.share_alerts_with_target
    assert loaded.agent("family").settings.heartbeat.target is not None  # the rest is inherited as before


def test_an_agent_that_opts_in_itself_shares_its_alerts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = two_agents(home, {"heartbeat": {"share_alerts_with_target": True}})
    assert loaded.agent("family").settings.heartbeat.share_alerts_with_target
    sent = beat(home, loaded)
    assert sorted((to, "FAMILY-CANARY" in text) for to, text in sent) == [(GROUP, False), (GROUP, True)]


def test_doctor_says_where_another_agents_opt_in_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "hermit.yaml").write_text(json.dumps(raw_config({})))
    os.chmod(home / "hermit.yaml", 0o600)
    main(["--home", str(home), "doctor", "--json"])
    detail = {c["name"]: c for c in json.loads(capsys.readouterr().out)}["access"]["detail"]
    assert "agents family: heartbeat alerts (main-session text) would go to the group telegram/personal -100555: " \
           "they are not delivered (point heartbeat.target at an owner, or set heartbeat.share_alerts_with_target: " \
           "true in agent family's own agents.list entry)" in detail, detail
    assert "agents main: heartbeat alerts (main-session text) go to the group telegram/personal -100555 " \
           "(heartbeat.share_alerts_with_target is on)" in detail, detail
