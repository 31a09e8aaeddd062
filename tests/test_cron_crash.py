"""A crash (kill -9) in the middle of a cron run, then a restart over the same state dir: the real scheduler
service, runtimes on a scripted model and the real job store. The crash is an exception nothing in Hermit
catches (`Killed`, a BaseException), raised at a chosen point — after the channel took the reply, inside the
turn after a tool ran, between the turn and its bookkeeping — so the first service stops there as a killed
process would: nothing after that point is written. A fresh service then starts over the same files.

What the user should see (runner.py): a reminder that was sent is not sent again; a recurring job is not
run again for the slot it already ran; a turn cut off mid-way is continued in its session, so the tools it
already ran are not run twice. A run finished after a restart is judged by the session its text was made
in, and delivers nothing when its job was aimed elsewhere while it was in flight."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest

from hermit.channels.base import Target
from hermit.messages import ToolResultMessage, UserMessage
from hermit.models.base import ModelRequest
from hermit.redaction import MASK, register
from hermit.scheduler import LocalHost, SchedulerService
from hermit.scheduler.jobs import InFlight as Flying
from hermit.testing.scripted import Reply
from schedhelpers import SimClock, config, runtimes, settle

if TYPE_CHECKING:
    from hermit.scheduler.jobs import InFlight
    from hermit.scheduler.runner import Mark

pytestmark = pytest.mark.anyio

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 6, 1, 8, 0, tzinfo=BERLIN)
NO_HEARTBEAT = {"heartbeat": {"every_minutes": 0}}
TELEGRAM = {"mode": "announce", "channel": "telegram", "to": "42"}
# The contacts and the group the jobs deliver to are let in (a job to someone not let in is skipped).
LET_IN = {"allow_from": ["42", "43"], "groups": ["-100555"]}
NOTE = "- DENTIST-NOTE reminder sent\n"


class Killed(BaseException):
    """The process dies here: nothing in Hermit catches it, so nothing after this point runs."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Channel:
    """The test's end of a delivery; `kill_after_send` dies right after the platform took the message,
    `kill_before_send` right before it."""

    sent: list[tuple[Target, str]] = field(default_factory=list)
    kill_after_send: bool = False
    kill_before_send: bool = False

    async def deliver(self, target: Target, text: str) -> None:
        if self.kill_before_send:
            raise Killed
        self.sent.append((target, text))
        if self.kill_after_send:
            raise Killed


@dataclass
class Gateway:
    """One life of the gateway: a scheduler service with its runtimes over the state dir."""

    service: SchedulerService
    channel: Channel
    requests: list[ModelRequest]
    clock: SimClock


def boot(home: Path, now: datetime, reply: Callable[[ModelRequest], Reply], channel: Channel | None = None,
         owners: tuple[str, ...] = (), **defaults: object) -> Gateway:
    loaded = config(home, defaults={**NO_HEARTBEAT, **defaults}, owners=owners, access=LET_IN)
    clock = SimClock(now)
    channel = channel or Channel()
    rts, models = runtimes(loaded, clock, reply)
    host = LocalHost(rts, channel.deliver, threaded=False)
    service = SchedulerService(home, loaded, host, clock=clock, fsync=False)
    return Gateway(service, channel, models["main"].requests, clock)


async def run_until_killed(gw: Gateway) -> None:
    """Start the service at the job's time and let the due run go into its crash."""
    died: list[Killed] = []
    real = gw.service._run_job

    async def run_job(*args: object, **kwargs: object) -> None:
        try:
            await real(*args, **kwargs)  # type: ignore[arg-type]
        except Killed as e:  # what the killed process never saw; the test keeps it off the loop's log
            died.append(e)
    gw.service._run_job = run_job  # type: ignore[method-assign]
    gw.clock.now = START
    await gw.service.start(run_loop=False)
    await gw.service.tick()
    await settle(gw.service)
    assert len(died) == 1, "the run did not reach its crash"


async def restart(gw: Gateway) -> None:
    await gw.service.start(run_loop=False)
    await gw.service.tick()
    await settle(gw.service)
    await gw.service.tick()  # re-plan after the run that just ended
    await settle(gw.service)


def add_job(gw: Gateway, job_id: str, schedule: dict[str, object], message: str = "Remind me to call the dentist",
            **extra: object) -> None:
    gw.service.jobs.add({"id": job_id, "schedule": schedule, "message": message, "delivery": TELEGRAM, **extra})


def reminder(request: ModelRequest) -> Reply:
    return "Reminder: call the dentist."


async def test_a_one_shot_reminder_sent_before_a_crash_is_not_sent_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = boot(home, START - timedelta(minutes=1), reminder, Channel(kill_after_send=True))
    add_job(first, "dentist", {"kind": "at", "at": "2026-06-01T08:00"})
    await run_until_killed(first)
    assert [t for _, t in first.channel.sent] == ["Reminder: call the dentist."]

    second = boot(home, START + timedelta(minutes=1), reminder)
    await restart(second)

    assert second.channel.sent == []  # the user got it once
    assert second.requests == []  # and the model was not asked again
    assert second.service.jobs.load().jobs == ()  # the one-shot is done and deleted
    runs = second.service.jobs.store.runs("dentist")
    assert [(r["status"], r["delivered"], r["trigger"]) for r in runs] == [("ok", True, "schedule")]
    assert "not sent again" in runs[0]["resumed"]


async def test_a_recurring_job_is_not_run_again_for_the_slot_it_ran_before_a_crash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = boot(home, START - timedelta(minutes=1), reminder, Channel(kill_after_send=True))
    add_job(first, "brief", {"kind": "cron", "expr": "0 8 * * *"})
    assert first.service.jobs.get("brief").state.next_run_at == START
    await run_until_killed(first)
    assert len(first.requests) == 1

    second = boot(home, START + timedelta(minutes=5), reminder)
    await restart(second)

    assert second.channel.sent == [] and second.requests == []
    job = second.service.jobs.get("brief")
    assert job.state.next_run_at == START + timedelta(days=1)  # the next slot, not a catch-up of this one
    assert job.state.in_flight is None and job.state.last_status == "ok"
    # and the next day's slot runs as usual
    second.clock.now = START + timedelta(days=1)
    await restart(second)
    assert [t for _, t in second.channel.sent] == ["Reminder: call the dentist."]


def write_then_reply(on_reply: Callable[[], Reply]) -> Callable[[ModelRequest], Reply]:
    """The turn writes a memory note (a tool with an effect), then answers."""
    def reply(request: ModelRequest) -> Reply:
        if isinstance(request.messages[-1], UserMessage):
            return {"tool_calls": [{"id": "w1", "name": "write", "arguments": {
                "path": "memory/2026-06-01.md", "append": True, "content": NOTE}}]}
        return on_reply()
    return reply


def die() -> Reply:
    raise Killed


@pytest.mark.parametrize("down", [timedelta(minutes=1), timedelta(hours=2)])
async def test_a_turn_cut_off_after_its_tool_ran_is_continued_not_restarted(tmp_path: Path, down: timedelta,
                                                                            ) -> None:
    """Also when the gateway was down longer than the session's idle reset (which then must not start a
    fresh session under the turn)."""
    home = tmp_path / "home"
    idle = {"session": {"reset": {"mode": "idle", "idle_minutes": 60}}}
    first = boot(home, START - timedelta(minutes=1), write_then_reply(die), **idle)
    add_job(first, "dentist", {"kind": "at", "at": "2026-06-01T08:00"})
    await run_until_killed(first)
    notes = first.service.loaded.agent().workspace / "memory" / "2026-06-01.md"
    assert notes.read_text(encoding="utf-8").count("DENTIST-NOTE") == 1
    flying = getattr(first.service.jobs.get("dentist").state, "in_flight", None)  # the run, stored as running

    second = boot(home, START + down, write_then_reply(lambda: "Reminder: call the dentist."), **idle)
    await restart(second)

    assert notes.read_text(encoding="utf-8").count("DENTIST-NOTE") == 1  # the tool ran once
    # the model was asked once, to go on from the tool's result, in the same session
    assert len(second.requests) == 1
    assert isinstance(second.requests[0].messages[-1], ToolResultMessage)
    assert [t for _, t in second.channel.sent] == ["Reminder: call the dentist."]
    assert second.service.jobs.load().jobs == ()
    runs = second.service.jobs.store.runs("dentist")
    assert [(r["status"], r["delivered"], r["session_id"]) for r in runs] == [("ok", True, flying.session_id)]
    transcripts = list(second.service.loaded.agent().sessions_dir.glob("*.jsonl"))
    assert len(transcripts) == 1  # no second cron session
    assert flying is not None and flying.phase == "running"


def kill_at(service: SchedulerService, phase: str) -> None:
    """Die when the run's state would move to `phase` (the bookkeeping right after the turn)."""
    real = service._mark

    def mark(job_id: str) -> Mark:
        store = real(job_id)

        def maybe_die(flying: InFlight) -> None:
            if flying.phase == phase:
                raise Killed
            store(flying)
        return maybe_die
    service._mark = mark  # type: ignore[method-assign]


async def test_a_turn_answered_just_before_a_crash_is_delivered_without_running_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = boot(home, START - timedelta(minutes=1), write_then_reply(lambda: "Reminder: call the dentist."))
    add_job(first, "brief", {"kind": "cron", "expr": "0 8 * * *"})
    kill_at(first.service, "delivering")
    await run_until_killed(first)
    assert first.channel.sent == []

    second = boot(home, START + timedelta(minutes=1), write_then_reply(lambda: "again?"))
    await restart(second)

    assert second.requests == []  # the transcript holds the answer: the turn is not run again
    assert [t for _, t in second.channel.sent] == ["Reminder: call the dentist."]
    notes = second.service.loaded.agent().workspace / "memory" / "2026-06-01.md"
    assert notes.read_text(encoding="utf-8").count("DENTIST-NOTE") == 1
    assert second.service.jobs.get("brief").state.next_run_at == START + timedelta(days=1)


async def test_a_reply_being_sent_at_the_crash_is_not_sent_again(tmp_path: Path) -> None:
    """The window that stays: the run is marked as sending before the send, so a kill during the send
    means at most once from the scheduler — the reply may be lost, and the run log says so."""
    home = tmp_path / "home"
    first = boot(home, START - timedelta(minutes=1), reminder, Channel(kill_before_send=True))
    add_job(first, "dentist", {"kind": "at", "at": "2026-06-01T08:00"})
    await run_until_killed(first)

    second = boot(home, START + timedelta(minutes=1), reminder)
    await restart(second)

    assert second.channel.sent == [] and second.requests == []
    (run,) = second.service.jobs.store.runs("dentist")
    assert run["delivered"] is True and "may not have arrived" in run["resumed"]


async def test_a_main_session_job_cut_off_mid_turn_continues_in_the_main_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = boot(home, START - timedelta(minutes=1), write_then_reply(die))
    add_job(first, "nightly", {"kind": "cron", "expr": "0 8 * * *"}, session_target="main",
            delivery={"mode": "none"})
    await run_until_killed(first)

    second = boot(home, START + timedelta(minutes=1), write_then_reply(lambda: "Noted."))
    await restart(second)

    notes = second.service.loaded.agent().workspace / "memory" / "2026-06-01.md"
    assert notes.read_text(encoding="utf-8").count("DENTIST-NOTE") == 1
    assert len(second.requests) == 1 and isinstance(second.requests[0].messages[-1], ToolResultMessage)
    job = second.service.jobs.get("nightly")
    assert job.state.last_status == "ok" and job.state.in_flight is None
    assert job.state.next_run_at == START + timedelta(days=1)


async def test_a_paused_job_is_not_continued_after_a_crash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = boot(home, START - timedelta(minutes=1), write_then_reply(die))
    add_job(first, "brief", {"kind": "cron", "expr": "0 8 * * *"})
    await run_until_killed(first)
    first.service.jobs.update("brief", {"enabled": False})  # `hermit cron edit --disable` while it was down

    second = boot(home, START + timedelta(minutes=1), write_then_reply(lambda: "done"))
    await restart(second)

    assert second.requests == [] and second.channel.sent == []
    job = second.service.jobs.get("brief")
    assert "not continued" in (job.state.last_error or "") and job.state.in_flight is None


SECRET = "sk-crontest-0123456789abcdef"


async def test_job_and_heartbeat_errors_are_stored_and_shown_masked(tmp_path: Path) -> None:
    register(SECRET)

    def leak(request: ModelRequest) -> Reply:
        raise RuntimeError(f"upstream said: bad key {SECRET}")

    home = tmp_path / "home"
    loaded = config(home, defaults={"heartbeat": {"every_minutes": 30}})
    (loaded.agent().workspace / "HEARTBEAT.md").parent.mkdir(parents=True, exist_ok=True)
    (loaded.agent().workspace / "HEARTBEAT.md").write_text("# HEARTBEAT.md\n\n- Check the mail.\n",
                                                          encoding="utf-8")
    clock = SimClock(START - timedelta(minutes=1))
    rts, _ = runtimes(loaded, clock, leak)
    service = SchedulerService(home, loaded, LocalHost(rts, Channel().deliver, threaded=False), clock=clock,
                               fsync=False)
    service.jobs.add({"id": "brief", "schedule": {"kind": "cron", "expr": "0 8 * * *"}, "message": "brief"})
    clock.now = START
    await service.start(run_loop=False)
    await service.tick()
    await settle(service)
    clock.now += timedelta(minutes=30)
    await service.tick()
    await settle(service)

    job = service.jobs.get("brief")
    (run,) = service.jobs.store.runs("brief")
    beat = service.status()["agents"]["main"]["heartbeat"]["last"]
    for shown in (job.state.last_error, run["error"], beat["reason"]):
        assert shown is not None and MASK in shown and SECRET not in shown, shown
    assert SECRET not in service.jobs.store.path.read_text(encoding="utf-8")
    assert SECRET not in service.jobs.store.run_log_path("brief").read_text(encoding="utf-8")


# ---- a run's reply goes only where its job was aimed when it started (re-audit F1) -----------------------

OWNER = ("42",)
GROUP = {"mode": "announce", "channel": "telegram", "to": "-100555", "peer_kind": "group"}
CANARY = "Per MEMORY.md: OWNER-SECRET-CANARY"


def main_job_to_the_owner(gw: Gateway) -> None:
    (gw.service.loaded.agent().workspace / "MEMORY.md").write_text("# Memory\nOWNER-SECRET-CANARY\n",
                                                                  encoding="utf-8")
    add_job(gw, "j1", {"kind": "cron", "expr": "0 8 * * *"}, session_target="main")


@pytest.mark.parametrize("cut", ["mid-turn", "after the turn"])
async def test_a_main_session_run_resumed_after_its_job_was_aimed_isolated_at_a_group_delivers_nothing(
        tmp_path: Path, cut: str) -> None:
    """The owner re-aims the job while the gateway is down (`hermit cron edit j1 --isolated --announce
    telegram:-100555 --group`): the run left in the main session is finished there, and its reply — made with
    MEMORY.md in the prompt — goes nowhere, also when the turn had finished and is not run again."""
    home = tmp_path / "home"
    mid = cut == "mid-turn"
    first = boot(home, START - timedelta(minutes=1), write_then_reply(die if mid else lambda: CANARY), owners=OWNER)
    main_job_to_the_owner(first)
    if not mid:
        kill_at(first.service, "delivering")
    await run_until_killed(first)
    first.service.jobs.update("j1", {"session_target": "isolated", "delivery": GROUP})
    assert first.service.jobs.get("j1").delivery.shares_main is False

    second = boot(home, START + timedelta(minutes=1), write_then_reply(lambda: CANARY), owners=OWNER)
    await restart(second)

    assert [t for _, t in second.channel.sent if "CANARY" in t] == []
    # finished in the session it began in: continued from the tool's result, or not run again at all
    assert len(second.requests) == (1 if mid else 0)
    if mid:
        assert isinstance(second.requests[0].messages[-1], ToolResultMessage)
        assert "OWNER-SECRET-CANARY" in second.requests[0].system  # it was the main session's turn
    (run, *later) = second.service.jobs.store.runs("j1", limit=0)
    assert run["session_key"] == "agent:main:main" and run["delivered"] is False
    assert "changed while it was in flight" in run["not_delivered"], run
    assert "main session" in run["not_delivered"] and "isolated session" in run["not_delivered"]
    assert second.service.jobs.get("j1").state.in_flight is None


@pytest.mark.parametrize("key", ["agent:main:main", "agent:main:telegram:group:-100555", "not-a-key"])
async def test_a_resumed_run_is_judged_by_the_session_it_was_made_in(tmp_path: Path, key: str) -> None:
    """An isolated job aimed at a group (no opt-in needed) whose stored run names a main session — or any
    key that is not a cron session's, or one that does not parse — is judged as a main-session run: not run,
    nothing delivered. (The record here is written as a crash would leave it, with the job's aim unchanged.)"""
    home = tmp_path / "home"
    gw = boot(home, START - timedelta(minutes=1), lambda r: CANARY, owners=OWNER)
    (gw.service.loaded.agent().workspace / "MEMORY.md").write_text("OWNER-SECRET-CANARY\n", encoding="utf-8")
    add_job(gw, "j1", {"kind": "cron", "expr": "0 8 * * *"}, delivery=GROUP)
    left = Flying(run_id="r-left", trigger="schedule", started_at=START, session_key=key,
                  text="[System event from scheduled job j1 · earlier · schedule run]\ncron: check",
                  agent_id="main", aim="agent main, isolated session, to telegram:default:group:-100555")
    gw.service.jobs.store.update_job("j1", lambda j: j.model_copy(
        update={"state": j.state.model_copy(update={"in_flight": left})}))

    second = boot(home, START + timedelta(minutes=1), lambda r: CANARY, owners=OWNER)
    await restart(second)

    assert second.channel.sent == [] and second.requests == []
    (run,) = second.service.jobs.store.runs("j1", limit=1)
    assert run["run_id"] == "r-left" and run["status"] == "error" and "main session" in run["error"]


async def test_a_job_aimed_elsewhere_during_its_run_does_not_deliver_that_runs_reply(tmp_path: Path) -> None:
    """No crash: the owner re-aims the job while its turn runs; the reply, made for the old aim, is not sent
    to either target, and the next run goes to the new one."""
    home = tmp_path / "home"
    running: list[Gateway] = []

    def reply(request: ModelRequest) -> Reply:
        gw = running.pop() if running else None  # the first run only: the owner's edit lands mid-turn
        if gw is not None:
            gw.service.jobs.update("brief", {"delivery": {**TELEGRAM, "to": "43"}})
        return "Reminder: call the dentist."
    gw = boot(home, START - timedelta(minutes=1), reply, owners=("42", "43"))
    running.append(gw)
    add_job(gw, "brief", {"kind": "cron", "expr": "0 8 * * *"})
    gw.clock.now = START
    await restart(gw)

    assert gw.channel.sent == []
    (run,) = gw.service.jobs.store.runs("brief")
    assert run["delivered"] is False and "changed while it was in flight" in run["not_delivered"]
    gw.clock.now = START + timedelta(days=1)
    await restart(gw)
    assert [(t.peer_id, text) for t, text in gw.channel.sent] == [("43", "Reminder: call the dentist.")]
