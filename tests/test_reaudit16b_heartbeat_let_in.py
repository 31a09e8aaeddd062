"""A heartbeat alert shared with a contact or a group (heartbeat.share_alerts_with_target) stops reaching them once
they are not let in any more (reaudit16b): `hermit pairing revoke`, a group taken off `groups`. Jobs aimed at them
are skipped since 5f5a047; the heartbeat's alert — main-session text the owner chose to share with someone they
have since cut off — went on being delivered. Now it is kept in the transcript, the outcome and the log say why
(never the alert's text), and it is delivered again once they are let in.

Through the real scheduler over real pairing files and the config in force (as the gateway's re-read
hermit.yaml); schedhelpers' MemoryChannel is the channel.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from hermit.channels.pairing import PairingStore
from hermit.cli.main import main
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.scheduler import LocalHost, SchedulerService
from schedhelpers import MemoryChannel, SimClock, runtimes, settle

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 6, 1, 9, 0, tzinfo=BERLIN)
CHECKLIST = "# HEARTBEAT.md\n\n- Remind the family about Sunday lunch.\n"
SECRET = "MEMCANARY the safe code is 4711"
GROUP = "-100555"


def cfg(home: Path, target: dict[str, Any], **access: Any) -> LoadedConfig:
    return build_config({"agents": {"defaults": {
        "timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
        "heartbeat": {"every_minutes": 30, "target": target, "share_alerts_with_target": True}}},
        "channels": {"telegram": {"accounts": {"default": {"owners": ["1"], **access}}}}}, StatePaths(home))


def approve(store: PairingStore, sender: str) -> None:
    req = store.request("telegram", "default", sender, "Bob", None)
    assert req is not None
    store.approve("telegram", req.code)


class Beats:
    """The scheduler's heartbeat, one a tick, each alert a new text (the same one is not sent twice a day)."""

    def __init__(self, home: Path, loaded: LoadedConfig, during: Callable[[], None] = lambda: None) -> None:
        self.loaded = loaded
        self.clock = SimClock(START)
        self.channel = MemoryChannel()
        self.n = 0

        def model(req: object) -> str:
            self.n += 1
            during()  # while the turn runs
            return f"Sunday lunch at noon ({self.n}). {SECRET}"

        rts, _ = runtimes(loaded, self.clock, model)
        (loaded.agent().workspace / "HEARTBEAT.md").write_text(CHECKLIST, encoding="utf-8")
        self.service = SchedulerService(home, loaded, LocalHost(rts, self.channel.deliver, threaded=False),
                                        clock=self.clock, fsync=False, config=lambda: self.loaded)

    async def beat(self) -> dict[str, Any]:
        self.clock.now += timedelta(minutes=30)
        await self.service.tick()
        await settle(self.service)
        last = self.service.status()["agents"]["main"]["heartbeat"]["last"]
        assert isinstance(last, dict)
        return last


def test_a_revoked_contact_gets_no_more_heartbeat_alerts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "home"
    beats = Beats(home, cfg(home, {"channel": "telegram", "to": "42"}))
    store = PairingStore(home)
    approve(store, "42")
    lasts: list[dict[str, Any]] = []

    async def main() -> None:
        await beats.service.start(run_loop=False)
        try:
            lasts.append(await beats.beat())
            store.revoke("telegram", "42")
            with caplog.at_level(logging.WARNING, logger="hermit.scheduler"):
                lasts.append(await beats.beat())
            approve(PairingStore(home, clock=lambda: START.timestamp() + 10 * 3600), "42")
            lasts.append(await beats.beat())
        finally:
            await beats.service.stop()

    asyncio.run(main())
    assert [(t.peer_id, x.split(")")[0]) for t, x in beats.channel.sent] == \
        [("42", "Sunday lunch at noon (1"), ("42", "Sunday lunch at noon (3")], beats.channel.sent
    assert [(x["status"], x["delivered"]) for x in lasts] == [("alert", True), ("alert", False), ("alert", True)]
    reason = str(lasts[1]["reason"])
    assert "telegram 42 (on telegram/default: not an owner, not in allow_from, not approved by pairing)" in reason
    assert "not let in" in reason and "hermit pairing approve" in reason, reason
    told = [r.getMessage() for r in caplog.records if "heartbeat alert not delivered" in r.getMessage()]
    assert len(told) == 1 and "telegram 42" in told[0]
    assert not any(SECRET in r.getMessage() for r in caplog.records)


def test_a_group_taken_off_groups_gets_no_more_heartbeat_alerts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    target = {"channel": "telegram", "to": GROUP, "peer_kind": "group"}
    listed, unlisted = cfg(home, target, groups=[GROUP]), cfg(home, target)
    beats = Beats(home, listed)
    lasts: list[dict[str, Any]] = []

    async def main() -> None:
        await beats.service.start(run_loop=False)
        try:
            lasts.append(await beats.beat())
            beats.loaded = unlisted
            lasts.append(await beats.beat())
            beats.loaded = listed
            lasts.append(await beats.beat())
        finally:
            await beats.service.stop()

    asyncio.run(main())
    assert [t.peer_id for t, _ in beats.channel.sent] == [GROUP, GROUP]
    assert [x["delivered"] for x in lasts] == [True, False, True]
    assert f"the telegram group {GROUP} (not listed under channels.telegram.accounts.default.groups)" \
        in str(lasts[1]["reason"])


def test_revoked_while_the_heartbeat_turn_ran_the_alert_is_kept(tmp_path: Path) -> None:
    """The config in force after the turn decides (run_heartbeat's `current`): revoked during the turn, nothing
    is sent."""
    home = tmp_path / "home"
    store = PairingStore(home)
    approve(store, "42")
    beats = Beats(home, cfg(home, {"channel": "telegram", "to": "42"}), lambda: store.revoke("telegram", "42"))

    async def main() -> dict[str, Any]:
        await beats.service.start(run_loop=False)
        try:
            return await beats.beat()
        finally:
            await beats.service.stop()

    last = asyncio.run(main())
    assert beats.channel.sent == [] and last["delivered"] is False and "not let in" in str(last["reason"])


def test_doctor_names_a_heartbeat_shared_with_someone_not_let_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text(yaml.safe_dump({
        "agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                "heartbeat": {"every_minutes": 30, "share_alerts_with_target": True,
                                              "target": {"channel": "telegram", "to": "42"}}}},
        "channels": {"telegram": {"accounts": {"default": {"owners": ["1"]}}}}}), encoding="utf-8")

    def let_in() -> dict[str, Any]:
        main(["--home", str(home), "doctor", "--json"])
        [check] = [c for c in json.loads(capsys.readouterr().out) if c["name"] == "job targets let in"]
        assert isinstance(check, dict)
        return check

    held = let_in()
    assert held["status"] == "warn", held
    assert held["detail"] == ("agents main: heartbeat alerts of agent main go to telegram 42 (on telegram/default: "
                              "not an owner, not in allow_from, not approved by pairing), who is not let in to talk "
                              "to the assistant now: its alerts are not delivered"), held
    assert "`hermit pairing approve` them" in held["fix"]
    approve(PairingStore(home), "42")
    assert let_in()["status"] == "ok"
