"""With no agents.defaults.timezone, the runtime and the scheduler use the machine's zone with its DST rules
(hermit.zones). The runtime once froze the UTC offset of the moment it started (`now.astimezone()`): a
gateway running across a DST change reset its sessions at 05:00 instead of 04:00 and wrote notes made
between 00:00 and 01:00 to the previous day's log, while the scheduler used the real zone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.scheduler.schedule import resolve_zone
from hermit.testing import ScriptedModel
from hermit.zones import host_zone


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_runtime_started_before_a_dst_change_keeps_the_zones_rules(tmp_path: Path, berlin: None) -> None:
    now = [datetime(2027, 3, 27, 12, 0, tzinfo=UTC)]  # Saturday, CET (+01:00): the gateway starts
    (tmp_path / "workspace" / "memory").mkdir(parents=True)
    loaded = build_config({"agents": {"defaults": {}}}, StatePaths(tmp_path))
    rt = AgentRuntime(loaded.agent(), ScriptedModel(["one", "two", "three"]), fsync=False, home=tmp_path,
                      clock=lambda: now[0])
    assert rt.timezone_name == "Europe/Berlin" == resolve_zone(None, None).name
    key = "agent:main:main"
    rt.run_turn(key, "hello")
    now[0] = datetime(2027, 3, 28, 22, 30, tzinfo=UTC)  # Monday 29 March, 00:30 CEST
    assert rt.today() == "2027-03-29"
    now[0] = datetime(2027, 3, 28, 12, 0, tzinfo=UTC)  # Sunday 14:00 CEST, after the change
    rt.run_turn(key, "sunday")
    sunday = rt.store.get(key)
    now[0] = datetime(2027, 3, 29, 2, 30, tzinfo=UTC)  # Monday 04:30 CEST: past the 04:00 reset
    rt.run_turn(key, "monday morning")
    monday = rt.store.get(key)
    assert sunday is not None and monday is not None and monday.session_id != sunday.session_id


def test_the_hosts_zone_from_tz_or_etc_localtime(tmp_path: Path) -> None:
    summer, winter = datetime(2026, 7, 1), datetime(2026, 1, 1)

    def rules(tz: object) -> bool:  # a real zone: different offsets in winter and summer
        return summer.replace(tzinfo=tz).utcoffset() != winter.replace(tzinfo=tz).utcoffset()  # type: ignore[arg-type]

    link = tmp_path / "localtime"
    link.symlink_to("/usr/share/zoneinfo/America/Los_Angeles")
    for env, name in (({"TZ": "Europe/Berlin"}, "Europe/Berlin"), ({"TZ": ":Europe/Berlin"}, "Europe/Berlin"),
                      ({"TZ": ":/usr/share/zoneinfo/Asia/Tokyo"}, "/usr/share/zoneinfo/Asia/Tokyo"),
                      ({}, "America/Los_Angeles"), ({"TZ": ""}, "America/Los_Angeles"),
                      ({"TZ": ":Nowhere/Atlantis"}, "America/Los_Angeles")):
        tz, got = host_zone(link, env)
        assert got == name, env
        assert rules(tz) == (name != "/usr/share/zoneinfo/Asia/Tokyo"), env  # Tokyo keeps one offset
    copy = tmp_path / "copied-localtime"  # /etc/localtime copied, not linked
    copy.write_bytes(Path("/usr/share/zoneinfo/Europe/Prague").read_bytes())
    tz, got = host_zone(copy, {})
    assert got == "localtime" and rules(tz)
    assert host_zone(tmp_path / "missing", {}) == (UTC, "UTC")
