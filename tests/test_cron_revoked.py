"""A scheduled job stops delivering to someone no longer let in (normal-use audit, s16): `hermit pairing
revoke`, a group taken off `groups`, an id out of `allow_from` while the gateway runs. The run is skipped
(no turn, nothing sent) and logged with the reason, the job is kept, the owner is told once in the log, and
letting them in again resumes it. Creating a job aimed at someone not let in warns (the CLI, the cron tool).

Through the real scheduler over real job, run-log and pairing files (schedhelpers' MemoryChannel is the
platform's end), and the real in-process gateway against a fake Telegram for the live config change."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hermit.channels.pairing import PairingStore
from hermit.config.load import LoadedConfig, build_config, load_config
from hermit.config.paths import StatePaths
from hermit.scheduler import CronJobs, LocalHost, SchedulerService
from hermit.tools.cron import CronTools
from schedhelpers import MemoryChannel, SimClock, runtimes, settle
from test_cron_cli import hermit, write_config
from test_gateway_live_config import CONTACT, OWNER, gateway, replace_file, until

NOW = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
HOUR = {"kind": "every", "every_ms": 3_600_000}
PLAN = "Family plan: dentist 15:00, pick up Lisa"
GROUP = "-100555"


def cfg(home: Path, **access: Any) -> LoadedConfig:
    return build_config({"agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                                 "heartbeat": {"every_minutes": 0}}},
                         "channels": {"telegram": {"accounts": {"default": {"owners": ["1"], **access}}}}},
                        StatePaths(home))


class Live:
    """The scheduler with a config in force the test changes (as the gateway's re-read hermit.yaml)."""

    def __init__(self, home: Path, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        self.clock = SimClock(NOW)
        self.channel = MemoryChannel()
        self.asked: list[str] = []

        def model(req: object) -> str:
            self.asked.append("x")
            return PLAN

        rts, _ = runtimes(loaded, self.clock, model)
        self.service = SchedulerService(home, loaded, LocalHost(rts, self.channel.deliver, threaded=False),
                                        clock=self.clock, fsync=False, config=lambda: self.loaded)

    async def tick_at(self, hours: int) -> None:
        when = NOW + timedelta(hours=hours, seconds=1)
        self.clock.now = when
        await self.service.tick(when)
        await settle(self.service)

    def runs(self, job_id: str) -> list[dict[str, Any]]:
        return self.service.jobs.store.runs(job_id, limit=0)


def approve(store: PairingStore, sender: str) -> None:
    req = store.request("telegram", "default", sender, "Bob", None)
    assert req is not None
    store.approve("telegram", req.code)


def test_a_revoked_contacts_job_is_skipped_kept_and_resumes_when_approved_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "home"
    live = Live(home, cfg(home))
    store = PairingStore(home)
    approve(store, "42")
    live.service.jobs.add({"id": "bob", "message": "send Bob the family plan", "schedule": HOUR,
                           "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(1)
            assert [(t.peer_id, x) for t, x in live.channel.sent] == [("42", PLAN)]
            store.revoke("telegram", "42")
            with caplog.at_level(logging.INFO, logger="hermit.scheduler"):
                await live.tick_at(2)
                await live.tick_at(3)
                assert len(live.channel.sent) == 1 and len(live.asked) == 1  # no turn, nothing sent
                approve(PairingStore(home, clock=lambda: NOW.timestamp() + 10 * 3600), "42")
                await live.tick_at(4)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert [(t.peer_id, x) for t, x in live.channel.sent] == [("42", PLAN), ("42", PLAN)]
    runs = live.runs("bob")
    assert [(r["status"], r["delivered"]) for r in runs] == [("ok", True), ("skipped", False), ("skipped", False),
                                                             ("ok", True)]
    reason = runs[1]["error"]
    assert reason.startswith("telegram 42 (on telegram/default: not an owner, not in allow_from, "
                             "not approved by pairing) is not let in to talk to the assistant now"), reason
    job = live.service.jobs.get("bob")  # kept, on schedule, no backoff
    assert job.enabled and job.state.consecutive_errors == 0 and job.state.last_status == "ok"
    told = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(told) == 1 and "job bob: its runs are skipped" in told[0] and "hermit pairing approve" in told[0]
    assert PLAN not in told[0]
    assert any("job bob delivers again" in r.getMessage() for r in caplog.records)


def test_a_group_taken_off_groups_is_skipped_and_resumes_when_listed_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed, unlisted = cfg(home, groups=[GROUP]), cfg(home)
    live = Live(home, listed)
    live.service.jobs.add({"id": "family", "message": "post the family plan", "schedule": HOUR,
                           "delivery": {"mode": "announce", "channel": "telegram", "to": GROUP, "peer_kind": "group"}})

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(1)
            live.loaded = unlisted
            await live.tick_at(2)
            live.loaded = listed
            await live.tick_at(3)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert [(t.peer_id, t.peer_kind) for t, _ in live.channel.sent] == [(GROUP, "group"), (GROUP, "group")]
    runs = live.runs("family")
    assert [r["status"] for r in runs] == ["ok", "skipped", "ok"] and not runs[1]["delivered"]
    assert f"the telegram group {GROUP} (not listed under channels.telegram.accounts.default.groups)" \
           in runs[1]["error"]
    assert len(live.asked) == 2


def test_revoked_during_the_turn_the_reply_is_kept_not_sent(tmp_path: Path) -> None:
    """Revoked while the model is answering: the check before the send holds the reply (skipped)."""
    home = tmp_path / "home"
    live = Live(home, cfg(home))
    store = PairingStore(home)
    approve(store, "42")

    def model(req: object) -> str:
        store.revoke("telegram", "42")
        return PLAN

    rts, _ = runtimes(live.loaded, live.clock, model)
    live.service = SchedulerService(home, live.loaded, LocalHost(rts, live.channel.deliver, threaded=False),
                                    clock=live.clock, fsync=False, config=lambda: live.loaded)
    live.service.jobs.add({"id": "bob", "message": "plan", "schedule": HOUR,
                           "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(1)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert live.channel.sent == []
    [run] = live.runs("bob")
    assert run["status"] == "skipped" and not run["delivered"] and "is not let in" in run["not_delivered"]


def test_who_is_let_in(tmp_path: Path) -> None:
    """Owners (not with DMs disabled: the gateway's rule, s17), `open` lets everyone in, allow_from and approvals do; a group
    needs `groups` (or group_policy open); reading the approvals issues no pairing code."""
    from hermit.scheduler.targets import not_let_in

    home = tmp_path / "home"

    def who(to: str, kind: str = "dm", **access: Any) -> str | None:
        return not_let_in(cfg(home, **access), "telegram", None, kind, to)

    assert who("1") is None and "dm_policy is disabled" in str(who("1", dm_policy="disabled"))
    assert who("77", dm_policy="open") is None and who("77", allow_from=["77"]) is None
    assert who("77") is not None and who("77", dm_policy="allowlist") is not None
    assert "dm_policy is disabled" in str(who("77", dm_policy="disabled", allow_from=["77"]))
    approve(PairingStore(home), "77")
    assert who("77") is None and who("77", dm_policy="allowlist") is None
    assert who(GROUP, "group") is not None and who(GROUP, "group", groups=[GROUP]) is None
    assert who(GROUP, "dm", group_policy="open") is None  # a chat id below zero is a group's
    assert who("88") is not None and PairingStore(home).pending() == []
    assert not_let_in(cfg(home), "webchat", None, "dm", "owner") is None
    PairingStore(home).allow_file("telegram", "default").write_text("{damaged", encoding="utf-8")
    assert who("77") is not None and who("1") is None  # approvals that cannot be read let nobody in


def test_cli_add_warns_of_a_target_not_let_in(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, channels={"telegram": {"accounts": {"default": {"owners": ["1"], "allow_from": ["5"]}}}})
    r = hermit(home, "cron", "add", "--id", "bob", "--every", "1h", "-m", "plan", "--announce", "telegram:42")
    assert r.returncode == 0, r.stderr
    assert "warning: job bob: telegram 42 (on telegram/default: not an owner, not in allow_from, not approved by " \
           "pairing) is not let in to talk to the assistant now, so its runs are skipped" in r.stderr
    assert "hermit pairing approve" in r.stderr
    r = hermit(home, "cron", "add", "--id", "mine", "--every", "1h", "-m", "x", "--announce", "telegram:5")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    r = hermit(home, "cron", "edit", "mine", "--announce", "telegram:-100", "--group", "--json")
    assert r.returncode == 0 and "the telegram group -100" in json.loads(r.stdout)["warning"]
    assert "warning: job mine: the telegram group -100" in r.stderr
    live = Live(home, load_config(StatePaths(home)))
    live.service.jobs.request_run("bob")

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(0)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert live.channel.sent == [] and live.asked == []
    why = "telegram 42 (on telegram/default: not an owner, not in allow_from, not approved by pairing) is not let in"
    listed = hermit(home, "cron", "list").stdout
    assert "skipped" in listed and f"not delivered: {why}" in listed, listed
    runs = hermit(home, "cron", "runs", "bob").stdout
    assert f"skipped manual   not delivered — {why}" in runs, runs
    doctor = hermit(home, "doctor", "--json")
    [held] = [c for c in json.loads(doctor.stdout) if c["name"] == "job targets let in"]
    assert held["status"] == "warn" and "job bob: telegram 42" in held["detail"], held
    assert "job mine: the telegram group -100" in held["detail"] and "hermit pairing approve" in held["fix"]


def test_the_cron_tool_warns_when_it_resumes_a_job_aimed_at_someone_not_let_in(tmp_path: Path) -> None:
    """The tool aims jobs at owners only (always let in); it may pause and resume the owner's job to a
    contact, and then hears that the contact is not let in now."""
    home = tmp_path / "home"
    loaded = cfg(home)
    CronJobs(home, loaded, clock=SimClock(NOW), fsync=False).add({
        "id": "bob", "message": "plan", "schedule": HOUR, "enabled": False,
        "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})
    tool = CronTools(CronJobs(home, loaded, clock=SimClock(NOW), fsync=False, for_model=True), agent_id="main")
    out = tool.cron("update", id="bob", job={"enabled": True})
    assert "telegram 42" in out["warning"] and "runs are skipped" in out["warning"]
    mine = tool.cron("add", job={"message": "x", "schedule": HOUR,
                                 "delivery": {"mode": "announce", "channel": "telegram", "to": "1"}})
    assert "warning" not in mine


def test_a_contact_taken_out_of_allow_from_while_the_gateway_runs(tmp_path: Path) -> None:
    """The real gateway re-reads hermit.yaml: the next run is skipped and logged, nothing reaches the contact
    and no model is asked; putting them back resumes the job."""
    async def main() -> None:
        async with gateway(tmp_path, [{"text": "Plan one PLAN-1"}, {"text": "Plan two PLAN-2"}],
                           owners=[OWNER], allow=[CONTACT]) as s:
            sched = s.scheduler()
            jobs = CronJobs(s.home, s.gw.loaded)
            jobs.add({"id": "plan", "message": "Send the plan", "schedule": {"kind": "cron", "expr": "0 9 * * *"},
                      "delivery": {"mode": "announce", "channel": "telegram", "to": str(CONTACT)}})
            for n, text in ((1, "Plan one PLAN-1"), (2, None), (3, "Plan two PLAN-2")):
                if n == 2:
                    replace_file(s.config, s.config.read_text().replace(f'allow_from: ["{CONTACT}"]',
                                                                        "allow_from: []"))
                if n == 3:
                    replace_file(s.config, s.config.read_text().replace("allow_from: []",
                                                                        f'allow_from: ["{CONTACT}"]'))
                jobs.request_run("plan")
                await until(lambda n=n: len(jobs.store.runs("plan")) == n and not sched.running_tasks(), f"run {n}")
                if text is not None:
                    await until(lambda text=text: text in s.texts(CONTACT), text)
            runs = jobs.store.runs("plan")
            assert [r["status"] for r in runs] == ["ok", "skipped", "ok"]
            assert f"telegram {CONTACT}" in runs[1]["error"] and "is not let in" in runs[1]["error"]
            assert s.texts(CONTACT) == ["Plan one PLAN-1", "Plan two PLAN-2"]
            assert sum(1 for r in s.provider.requests if "Send the plan" in json.dumps(r.body["messages"][-1])) == 2

    asyncio.run(main())


def test_a_one_shot_to_someone_not_let_in_is_kept_with_its_reason(tmp_path: Path) -> None:
    """An `at` job has one slot: skipped, it is kept (disabled, not deleted) with the reason to read."""
    home = tmp_path / "home"
    live = Live(home, cfg(home))
    added = live.service.jobs.add({"id": "once", "message": "plan", "schedule": {"kind": "at",
                                   "at": "2026-06-01T10:00"},  # Berlin: 08:00 UTC
                                   "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})
    assert "telegram 42" in added["warning"]

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(1)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert live.channel.sent == [] and live.asked == []
    job = live.service.jobs.get("once")
    assert not job.enabled and job.state.last_status == "skipped" and "is not let in" in str(job.state.last_error)
