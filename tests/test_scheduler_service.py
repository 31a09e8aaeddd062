"""The scheduler's one timer on a simulated clock: exact runs of many jobs over a day, backoff and recovery,
timeouts, catch-up after downtime, delivery, sessions, DST weeks, and status."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hermit.agent.turn import TurnResult
from hermit.errors import ProviderError
from hermit.models.base import ModelRequest
from hermit.scheduler import SchedulerService
from hermit.scheduler.store import JobStore
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import Reply
from schedhelpers import LocalHost, Rig, all_runs, last_user_text, rig, settle, simulate

pytestmark = pytest.mark.anyio

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 6, 1, 0, 0, tzinfo=BERLIN)  # a Monday


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def echo(request: ModelRequest) -> Reply:
    return "echo: " + last_user_text(request).splitlines()[0]


def add(r: Rig, job_id: str, schedule: dict[str, object], **extra: object) -> None:
    r.service.jobs.add({"id": job_id, "schedule": schedule, "message": f"do {job_id}", **extra})


async def test_ten_jobs_over_a_simulated_day_run_exactly_as_planned(tmp_path: Path) -> None:
    r = rig(tmp_path / "home", START, echo, defaults={"heartbeat": {"every_minutes": 0}},
            access={"allow_from": ["42"]})  # j-daily's contact is let in
    add(r, "j-daily", {"kind": "cron", "expr": "0 9 * * *"},
        delivery={"mode": "announce", "channel": "telegram", "to": "42"})
    add(r, "j-6h", {"kind": "cron", "expr": "0 */6 * * *"})
    add(r, "j-every4h", {"kind": "every", "every_ms": 4 * 3_600_000, "anchor": "2026-06-01T01:00"})
    add(r, "j-at", {"kind": "at", "at": "2026-06-01T13:37"})
    add(r, "j-ny", {"kind": "cron", "expr": "0 8 * * *", "tz": "America/New_York"})
    add(r, "j-sec", {"kind": "cron", "expr": "30 15 10 * * *"})
    add(r, "j-off", {"kind": "cron", "expr": "0 12 * * *"}, enabled=False)
    add(r, "j-main", {"kind": "cron", "expr": "0 20 * * *"}, session_target="main")
    add(r, "j-every7h", {"kind": "every", "every_ms": 7 * 3_600_000})
    add(r, "j-mon", {"kind": "cron", "expr": "0 22 * * 1"})
    ids = [j.id for j in r.service.jobs.load().jobs]
    assert len(ids) == 10

    await r.service.start(run_loop=False)
    ticks = await simulate(r, START + timedelta(days=1))

    assert all_runs(r.service, ids) == [
        ("05-31 23:00:00", "j-every4h", "ok"),   # 01:00 Berlin (the anchor)
        ("06-01 03:00:00", "j-every4h", "ok"),
        ("06-01 04:00:00", "j-6h", "ok"),        # 06:00 Berlin
        ("06-01 05:00:00", "j-every7h", "ok"),   # created at 00:00 Berlin, +7 h
        ("06-01 07:00:00", "j-daily", "ok"),     # 09:00 Berlin
        ("06-01 07:00:00", "j-every4h", "ok"),
        ("06-01 08:15:30", "j-sec", "ok"),       # 10:15:30 Berlin, 6-field
        ("06-01 10:00:00", "j-6h", "ok"),
        ("06-01 11:00:00", "j-every4h", "ok"),
        ("06-01 11:37:00", "j-at", "ok"),        # 13:37 Berlin, then deleted
        ("06-01 12:00:00", "j-every7h", "ok"),
        ("06-01 12:00:00", "j-ny", "ok"),        # 08:00 New York
        ("06-01 15:00:00", "j-every4h", "ok"),
        ("06-01 16:00:00", "j-6h", "ok"),
        ("06-01 18:00:00", "j-main", "ok"),      # 20:00 Berlin, in the main session
        ("06-01 19:00:00", "j-every4h", "ok"),
        ("06-01 19:00:00", "j-every7h", "ok"),
        ("06-01 20:00:00", "j-mon", "ok"),       # Monday 22:00 Berlin
    ]
    assert ticks <= 20  # one timer that sleeps until the next due run, not a poll every second
    remaining = {j.id for j in r.service.jobs.load().jobs}
    assert remaining == set(ids) - {"j-at"}  # the one-shot is deleted after its success

    # Only j-daily announces; its reply reached the channel, and the job saw 09:00 in its own zone.
    [(target, text)] = r.channel.sent
    assert (target.channel, target.account_id, target.peer_id) == ("telegram", "default", "42")
    assert text == "echo: [Scheduled job j-daily · 2026-06-01 09:00 CEST (Europe/Berlin) · schedule run]"
    runs = r.service.jobs.store.runs("j-daily")
    assert runs[0]["delivered"] is True and runs[0]["session_key"] == "cron:j-daily"
    assert r.service.jobs.store.runs("j-ny")[0]["reply"].endswith("08:00 EDT (America/New_York) · schedule run]")

    # Isolated runs each get a fresh session under cron:<jobId>; the main job is a system event there.
    six = r.service.jobs.store.runs("j-6h")
    assert len({run["session_id"] for run in six}) == 3 and {run["session_key"] for run in six} == {"cron:j-6h"}
    main_run = r.service.jobs.store.runs("j-main")[0]
    assert main_run["session_key"] == main_session_key("main")
    assert "System event from scheduled job j-main" in main_run["reply"]
    await r.service.stop()


async def test_a_failing_job_backs_off_then_recovers(tmp_path: Path) -> None:
    calls = {"n": 0}

    def flaky(request: ModelRequest) -> Reply:
        calls["n"] += 1
        return ProviderError("provider exploded", "try later") if calls["n"] <= 3 else "fine"

    r = rig(tmp_path / "home", START, flaky, defaults={"heartbeat": {"every_minutes": 0}})
    add(r, "j-flaky", {"kind": "every", "every_ms": 10_000})
    await r.service.start(run_loop=False)
    await simulate(r, START + timedelta(seconds=425))

    runs = r.service.jobs.store.runs("j-flaky")
    t0 = START.astimezone(UTC)
    got = [(int((datetime.fromisoformat(x["started_at"]) - t0).total_seconds()), x["status"], x["trigger"])
           for x in runs]
    # every 10 s; failures wait 30 s, 1 m, 5 m (never sooner than the schedule); a success resets it.
    assert got == [(10, "error", "schedule"), (40, "error", "retry"), (100, "error", "retry"),
                   (400, "ok", "retry"), (410, "ok", "schedule"), (420, "ok", "schedule")]
    assert runs[0]["error"] == "provider exploded"
    job = r.service.jobs.get("j-flaky")
    assert job.state.consecutive_errors == 0 and job.state.last_status == "ok"
    await r.service.stop()


class HangingHost(LocalHost):
    """A host whose turns in one session never return (a provider call that hangs)."""

    hang_key = "cron:j-hang"

    async def run_turn(self, agent_id: str, session_key: str, text: str, *, heartbeat: bool = False) -> TurnResult:
        if session_key == self.hang_key:
            await asyncio.Event().wait()
        return await super().run_turn(agent_id, session_key, text, heartbeat=heartbeat)


async def test_a_hanging_job_times_out_and_the_others_still_fire(tmp_path: Path) -> None:
    r = rig(tmp_path / "home", START, echo, defaults={"heartbeat": {"every_minutes": 0}}, host_class=HangingHost)
    add(r, "j-hang", {"kind": "every", "every_ms": 60_000}, timeout_seconds=90)
    add(r, "j-tick", {"kind": "every", "every_ms": 60_000})
    await r.service.start(run_loop=False)
    await simulate(r, START + timedelta(minutes=10), hung=["j-hang"])

    t0 = START.astimezone(UTC)

    def seconds(job_id: str) -> list[tuple[int, str]]:
        return [(int((datetime.fromisoformat(x["started_at"]) - t0).total_seconds()), x["status"])
                for x in r.service.jobs.store.runs(job_id)]

    assert seconds("j-tick") == [(60 * k, "ok") for k in range(1, 10)]
    # Never two runs at once: each hung run is cancelled at its deadline (start + 90 s) before the next.
    assert seconds("j-hang") == [(60, "timeout"), (180, "timeout"), (330, "timeout")]
    hang = r.service.jobs.store.runs("j-hang")
    assert [x["ended_at"] for x in hang] == [(t0 + timedelta(seconds=s)).isoformat() for s in (150, 270, 420)]
    assert hang[0]["error"] == "timed out after 90 s"
    await r.service.stop()


async def test_after_downtime_a_missed_run_fires_once_then_the_schedule_resumes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = rig(home, START, echo, defaults={"heartbeat": {"every_minutes": 0}})
    add(r, "j-hourly", {"kind": "cron", "expr": "0 * * * *"})
    add(r, "j-at", {"kind": "at", "at": "2026-06-01T03:30"})
    await r.service.start(run_loop=False)
    await simulate(r, START + timedelta(hours=2, minutes=1))
    await r.service.stop()

    # The gateway is down from 02:01 to 07:20 local; hourly slots 03:00..07:00 and the 03:30 one-shot are missed.
    later = START + timedelta(hours=7, minutes=20)
    r2 = rig(home, later, echo, defaults={"heartbeat": {"every_minutes": 0}})
    await r2.service.start(run_loop=False)
    await simulate(r2, START + timedelta(hours=9, minutes=1))
    runs = r2.service.jobs.store.runs("j-hourly", limit=0)
    starts = [datetime.fromisoformat(x["started_at"]).astimezone(BERLIN).strftime("%H:%M") for x in runs]
    # 03:00-07:00 were missed: one catch-up run at start, not five; then the schedule resumes.
    assert starts == ["01:00", "02:00", "07:20", "08:00", "09:00"]
    assert [x["trigger"] for x in runs] == ["schedule", "schedule", "catch-up", "schedule", "schedule"]
    at_runs = r2.service.jobs.store.runs("j-at", limit=0)
    assert [(x["trigger"], x["status"]) for x in at_runs] == [("catch-up", "ok")]
    assert {j.id for j in r2.service.jobs.load().jobs} == {"j-hourly"}
    await r2.service.stop()


async def test_jobs_added_by_another_process_and_queued_runs_are_picked_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = rig(home, START, echo, defaults={"heartbeat": {"every_minutes": 0}})
    await r.service.start(run_loop=False)
    assert await r.service.tick() >= START + timedelta(days=1) - timedelta(seconds=1)

    # `hermit cron add` in another process writes the file; the next tick reloads it.
    from hermit.scheduler import CronJobs

    other = CronJobs(home, r.loaded, clock=r.clock, fsync=False)
    other.add({"id": "j-new", "schedule": {"kind": "every", "every_ms": 3_600_000}, "message": "hi"})
    wake = await r.service.tick()
    assert wake == START.astimezone(UTC) + timedelta(hours=1)
    # The cron tool's `run`: queued for the scheduler, which runs in this process and is woken at once.
    assert other.request_run("j-new")["note"] == "queued; it starts now"
    assert "ticker" in other.status()["scheduler"]
    await r.service.tick()
    await settle(r.service)
    [run] = r.service.jobs.store.runs("j-new")
    assert run["trigger"] == "manual" and run["status"] == "ok"
    assert r.service.jobs.get("j-new").state.run_requested is False
    await r.service.stop()


async def test_an_unreadable_job_file_keeps_the_last_plan_and_shows_in_status(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = rig(home, START, echo)
    add(r, "j-a", {"kind": "every", "every_ms": 60_000})
    await r.service.start(run_loop=False)
    store = JobStore(home)
    text = store.path.read_text()
    store.path.write_text(text[:-10])  # a hand edit gone wrong
    r.clock.now += timedelta(minutes=1)
    await r.service.tick()
    await settle(r.service)
    assert r.service.jobs.store.runs("j-a")[0]["status"] == "ok"  # still runs on the last good plan
    assert "not valid JSON" in (r.service.status()["job_file_error"] or "")
    await r.service.stop()


async def test_status_shows_next_heartbeat_next_job_and_a_stopped_ticker(tmp_path: Path) -> None:
    r = rig(tmp_path / "home", START, echo,
            defaults={"heartbeat": {"every_minutes": 45, "active_hours": {"start": "08:00", "end": "22:00"}}})
    add(r, "j-a", {"kind": "cron", "expr": "15 9 * * *"}, name="brief")
    assert r.service.status()["ticker"].startswith("stopped (last tick never)")
    await r.service.start()  # the real loop task
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    st = r.service.status()
    assert st["ticker"] == "ok" and st["last_tick"] == START.astimezone(UTC).isoformat()
    main = st["agents"]["main"]
    assert main["next_job"] == {"id": "j-a", "name": "brief", "at": "2026-06-01T09:15:00+02:00"}
    assert main["heartbeat"]["next"] == (START + timedelta(minutes=45)).astimezone(UTC).isoformat()
    assert main["heartbeat"]["active_hours"] == "08:00-22:00"
    assert r.service.jobs.status()["scheduler"]["ticker"] == "ok"
    await r.service.stop()
    r.clock.now += timedelta(hours=1)
    assert r.service.status()["ticker"].startswith("stopped (last tick 2026-05-31T22:00:00+00:00")


async def test_a_dst_week_in_los_angeles_through_the_service(tmp_path: Path) -> None:
    la = ZoneInfo("America/Los_Angeles")
    start = datetime(2026, 3, 5, tzinfo=la)
    r = rig(tmp_path / "home", start, echo,
            defaults={"timezone": "America/Los_Angeles", "heartbeat": {"every_minutes": 0}})
    add(r, "j-230", {"kind": "cron", "expr": "30 2 * * *"})
    add(r, "j-6f", {"kind": "cron", "expr": "0 30 2 * * *"})
    await r.service.start(run_loop=False)
    await simulate(r, start + timedelta(days=7))
    for job_id in ("j-230", "j-6f"):
        local = [datetime.fromisoformat(x["started_at"]).astimezone(la).strftime("%d %H:%M %Z")
                 for x in r.service.jobs.store.runs(job_id)]
        assert local == ["05 02:30 PST", "06 02:30 PST", "07 02:30 PST", "08 03:00 PDT",
                         "09 02:30 PDT", "10 02:30 PDT", "11 02:30 PDT"]
    await r.service.stop()


def test_the_service_has_the_gateway_service_shape(tmp_path: Path) -> None:
    r = rig(tmp_path / "home", START)
    assert isinstance(r.service, SchedulerService) and r.service.name == "scheduler"
    assert callable(r.service.start) and callable(r.service.stop) and isinstance(r.service.status(), dict)


async def test_the_real_timer_loop_runs_a_queued_job_when_woken(tmp_path: Path) -> None:
    r = rig(tmp_path / "home", START, echo, defaults={"heartbeat": {"every_minutes": 0}})
    add(r, "j-now", {"kind": "cron", "expr": "0 9 * * *"})
    await r.service.start()  # the loop task: it plans, then waits up to 30 s or until woken
    r.service.jobs.request_run("j-now")
    for _ in range(500):  # real progress of the loop task, not a schedule wait: a few loop turns
        if r.service.jobs.store.runs("j-now"):
            break
        await asyncio.sleep(0.01)
    [run] = r.service.jobs.store.runs("j-now")
    assert run["trigger"] == "manual" and run["status"] == "ok"
    await asyncio.wait_for(r.service.stop(), 10)  # stop() must not hang on a wake racing the cancellation
    assert r.service.status()["ticker"].startswith("stopped")
