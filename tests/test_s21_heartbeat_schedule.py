"""The heartbeat's schedule outlives a gateway restart (scheduler/heartbeat_schedule.py): a gateway restarted more
often than the interval (a laptop's sleep, a restart on a config edit, a crash loop) still beats on time; one that
was down past a beat's slot beats once when it starts, not once per missed slot; one restarted soon after a beat
does not beat twice; a beat skipped for the owner's turn is tried again a minute later, not a whole interval later.
Quiet hours hold. Real scheduler and agent runtime on a simulated clock (tests/schedhelpers.py), scripted model."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from hermit.models.base import ModelRequest
from hermit.scheduler.heartbeat_schedule import BEAT_TIMES_FILE, BUSY_RETRY
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import Reply
from schedhelpers import Rig, last_user_text, settle
from test_heartbeat import BERLIN, START, heartbeat_rig

pytestmark = pytest.mark.anyio
MAIN = main_session_key("main")
BEAT_PROMPT = "Read HEARTBEAT.md if it exists"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def beats(r: Rig) -> int:
    return sum(1 for req in r.models["main"].requests if last_user_text(req).startswith(BEAT_PROMPT))


async def started(tmp_path: Path, at: datetime, **heartbeat: object) -> Rig:
    """A gateway's scheduler started at `at` on the state dir under tmp_path (the same one each time: a restart)."""
    r = heartbeat_rig(tmp_path, start=at, **heartbeat)
    await r.service.start(run_loop=False)
    return r


async def run_until(r: Rig, until: datetime) -> None:
    """Tick at each wake time the scheduler asks for, up to (not including) `until`; the clock then stands there."""
    while True:
        await r.service.tick()
        await settle(r.service)
        wake = await r.service.tick()
        await settle(r.service)
        if wake >= until:
            r.clock.now = until
            return
        r.clock.now = wake


async def beat_due_in_the_owners_turn(r: Rig) -> tuple[threading.Event, asyncio.Task[object]]:
    """The owner's turn ("a long question") started and held until the returned event is set, then the clock at the
    beat's slot (30 minutes) and a tick: the beat is due while the main session is busy. Returns (the event that
    lets the owner's turn finish, that turn's task)."""
    release = threading.Event()
    asked = threading.Event()

    def reply(request: ModelRequest) -> Reply:
        if last_user_text(request) == "a long question":
            asked.set()
            release.wait(30)
        return "HEARTBEAT_OK"

    r.host.threaded = True  # the owner's turn runs in a worker thread, as in the gateway
    r.models["main"].fn = reply
    owners_turn: asyncio.Task[object] = asyncio.create_task(r.host.run_turn("main", MAIN, "a long question"))
    await asyncio.to_thread(asked.wait, 30)
    r.clock.now = START + timedelta(minutes=30)
    await r.service.tick()
    await settle(r.service)
    return release, owners_turn


async def test_a_gateway_restarted_more_often_than_the_interval_still_beats(tmp_path: Path) -> None:
    # Restarted every 20 minutes for 3 hours, heartbeat every 30: before, each start planned the beat 30 minutes
    # ahead and none ever ran.
    at, total = START, 0
    for _ in range(9):
        r = await started(tmp_path, at)
        await run_until(r, at + timedelta(minutes=20))
        total += beats(r)
        await r.service.stop()
        at += timedelta(minutes=20)
    assert total == 5  # at 30, 60, 90, 120 and 150 minutes: on time, as if the gateway had run throughout
    saved = json.loads((tmp_path / "home" / "cron" / BEAT_TIMES_FILE).read_text(encoding="utf-8"))
    assert list(saved) == ["main"] and datetime.fromisoformat(saved["main"]["last"]) == START + timedelta(minutes=150)
    assert (tmp_path / "home" / "cron" / BEAT_TIMES_FILE).stat().st_mode & 0o777 == 0o600


async def test_overdue_after_a_long_stop_one_beat_at_start_then_a_whole_interval(tmp_path: Path) -> None:
    r = await started(tmp_path, START)
    await run_until(r, START + timedelta(minutes=31))
    assert beats(r) == 1
    await r.service.stop()
    # Down (or asleep) five hours: ten slots missed.
    back = START + timedelta(hours=5, minutes=31)
    again = await started(tmp_path, back)
    await run_until(again, back + timedelta(minutes=29))
    assert beats(again) == 1  # one beat as it starts, not ten
    last = again.service.status()["agents"]["main"]["heartbeat"]["last"]
    assert datetime.fromisoformat(last["at"]) == back and last["status"] == "ok"
    await run_until(again, back + timedelta(minutes=31))
    assert beats(again) == 2  # the next a whole interval after it
    await again.service.stop()


async def test_a_restart_soon_after_a_beat_does_not_beat_twice(tmp_path: Path) -> None:
    r = await started(tmp_path, START)
    await run_until(r, START + timedelta(minutes=35))
    assert beats(r) == 1
    await r.service.stop()
    again = await started(tmp_path, START + timedelta(minutes=35))
    await run_until(again, START + timedelta(minutes=59))
    assert beats(again) == 0
    await run_until(again, START + timedelta(minutes=61))
    assert beats(again) == 1
    await again.service.stop()


async def test_a_beat_skipped_for_the_owners_turn_is_tried_again_a_minute_later(tmp_path: Path) -> None:
    r = await started(tmp_path, START)
    release, owners_turn = await beat_due_in_the_owners_turn(r)
    assert r.service.status()["agents"]["main"]["heartbeat"]["last"]["reason"] == "main session busy"
    release.set()
    await owners_turn
    r.host.threaded = False
    wake = await r.service.tick()
    assert wake == START + timedelta(minutes=30) + BUSY_RETRY  # not a whole interval later
    r.clock.now = wake
    await r.service.tick()
    await settle(r.service)
    assert r.service.status()["agents"]["main"]["heartbeat"]["last"]["status"] == "ok"
    assert beats(r) == 1
    # …and the skipped try did not count as a beat for a restart either: the file holds the beat that ran.
    saved = json.loads((tmp_path / "home" / "cron" / BEAT_TIMES_FILE).read_text(encoding="utf-8"))
    assert datetime.fromisoformat(saved["main"]["last"]) == wake
    await r.service.stop()


async def test_a_restart_while_the_owners_turn_holds_the_session_beats_when_it_is_free(tmp_path: Path) -> None:
    # A skipped try leaves the last beat where it was: a gateway restarted right after it beats at once.
    r = await started(tmp_path, START)
    release, owners_turn = await beat_due_in_the_owners_turn(r)
    release.set()
    await owners_turn
    await r.service.stop()
    again = await started(tmp_path, START + timedelta(minutes=31))
    await again.service.tick()
    await settle(again.service)
    assert beats(again) == 1
    await again.service.stop()


async def test_quiet_hours_hold_for_a_beat_due_at_start(tmp_path: Path) -> None:
    # The last beat at 21:30 Berlin; the gateway comes back at 23:00, inside quiet hours: the beat due at once is
    # skipped without a model call, and the next at 23:30 too.
    evening = datetime(2026, 6, 1, 21, 0, tzinfo=BERLIN)
    r = await started(tmp_path, evening, active_hours={"start": "08:00", "end": "22:00"})
    await run_until(r, evening + timedelta(minutes=31))
    assert beats(r) == 1
    await r.service.stop()
    late = datetime(2026, 6, 1, 23, 0, tzinfo=BERLIN)
    again = await started(tmp_path, late, active_hours={"start": "08:00", "end": "22:00"})
    await run_until(again, late + timedelta(minutes=31))
    assert beats(again) == 0
    assert again.service.status()["agents"]["main"]["heartbeat"]["last"]["reason"] == "outside active hours"
    await again.service.stop()


async def test_a_gateway_stopped_mid_beat_does_not_beat_again_at_once(tmp_path: Path) -> None:
    # The beat's time is written before its turn: a gateway killed during it (a crash loop on a beat that
    # crashes it) does not start the same beat again each time it comes back.
    hold = threading.Event()

    def reply(request: ModelRequest) -> Reply:
        hold.wait(30)
        return "HEARTBEAT_OK"

    r = await started(tmp_path, START)
    r.host.threaded = True
    r.models["main"].fn = reply
    r.clock.now = START + timedelta(minutes=30)
    await r.service.tick()
    assert r.service.heartbeat_tasks()  # the beat's turn is running
    saved = json.loads((tmp_path / "home" / "cron" / BEAT_TIMES_FILE).read_text(encoding="utf-8"))
    assert datetime.fromisoformat(saved["main"]["last"]) == START + timedelta(minutes=30)
    hold.set()
    await r.service.stop()
    again = await started(tmp_path, START + timedelta(minutes=31))
    await run_until(again, START + timedelta(minutes=59))
    assert beats(again) == 0
    await again.service.stop()


async def test_an_unreadable_schedule_file_starts_the_schedule_again(tmp_path: Path) -> None:
    state = tmp_path / "home" / "cron" / BEAT_TIMES_FILE
    state.parent.mkdir(parents=True)
    state.write_text("{not json", encoding="utf-8")
    r = await started(tmp_path, START)
    await run_until(r, START + timedelta(minutes=29))
    assert beats(r) == 0
    await run_until(r, START + timedelta(minutes=31))
    assert beats(r) == 1
    assert list(json.loads(state.read_text(encoding="utf-8"))) == ["main"]
    await r.service.stop()
