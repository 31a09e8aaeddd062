"""The scheduler inside the real gateway: a job added like `hermit cron add` runs in its isolated session
and its reply is delivered through the gateway's channel; heartbeats go through the bus, where
HEARTBEAT_OK reaches no channel and an alert does; `/status` shows the next heartbeat and next job."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from gatewayhelpers import RecordingChannel, last_user_text
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import OutboundMessage
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.gateway.history import chat_history
from hermit.gateway.supervisor import Gateway
from hermit.models.base import ModelRequest
from hermit.scheduler import CronJobs, SchedulerService
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import FunctionModel, Reply

TOKEN = "t" * 40


class StepClock:
    """The gateway's clock (epoch seconds), moved forward by the test to reach the next heartbeat."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def wait_for(cond: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_a_delivered_isolated_job_and_heartbeats_end_to_end_in_the_gateway(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = build_config({"agents": {"defaults": {
        "timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
        "heartbeat": {"every_minutes": 30, "target": {"channel": "telegram", "to": "42"}}}},
        "channels": {"telegram": {"accounts": {"default": {"owners": ["42"]}}}}}, StatePaths(home))
    replies = {"heartbeat": "HEARTBEAT_OK"}
    asked: list[str] = []

    def model(req: ModelRequest) -> Reply:
        text = last_user_text(req)
        asked.append(text)
        if text.startswith("[Scheduled job standup"):
            return "Standup in 15 minutes: bring the release notes."
        return replies["heartbeat"]

    rt = AgentRuntime(loaded.agent(), FunctionModel(model), fsync=False, home=home, cron=CronJobs(home, loaded))
    (loaded.agent().workspace / "HEARTBEAT.md").write_text("- Anything due today?\n", encoding="utf-8")
    telegram = RecordingChannel("telegram")
    clock = StepClock()
    gw = Gateway(loaded, home, {}, {"main": rt}, TOKEN, host="127.0.0.1", port=0, clock=clock, channels=[telegram])
    [scheduler] = [s for s in gw.services if s.name == "scheduler"]
    assert isinstance(scheduler, SchedulerService)

    def heartbeats() -> int:
        return sum(1 for a in asked if a.startswith("Read HEARTBEAT.md"))

    async def main() -> dict[str, object]:
        ready = asyncio.Event()
        serving = asyncio.create_task(gw.serve(on_ready=lambda url: ready.set()))
        await asyncio.wait_for(ready.wait(), 60)
        # Added as `hermit cron add` or the cron tool would: the gateway's scheduler is woken at once.
        jobs = CronJobs(home, loaded)
        now = datetime.now(UTC)
        jobs.add({"id": "standup", "message": "Remind me of the standup",
                  "schedule": {"kind": "at", "at": now.isoformat()},
                  "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})
        jobs.add({"id": "weekly", "message": "Weekly review", "schedule": {"kind": "cron", "expr": "0 9 * * 1"}})
        await wait_for(lambda: telegram.messages("42"))
        await wait_for(lambda: not scheduler.running_tasks())

        # Heartbeat 1: HEARTBEAT_OK → nothing reaches any channel. Heartbeat 2: an alert is delivered.
        for beats, reply in enumerate(("HEARTBEAT_OK", "The passport renewal is due tomorrow and nothing is booked."),
                                      start=1):
            replies["heartbeat"] = reply
            clock.offset += 31 * 60
            scheduler.wake()
            await wait_for(lambda n=beats: heartbeats() == n and not scheduler.heartbeat_tasks())
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{gw.port}/status", headers={"Authorization": f"Bearer {TOKEN}"})
        gw.request_stop()
        assert await asyncio.wait_for(serving, 60) == 0
        return dict(r.json())

    status = asyncio.run(main())
    sent = [m for m in telegram.items if isinstance(m, OutboundMessage)]
    assert [(m.target.peer_id, m.text) for m in sent] == [
        ("42", "Standup in 15 minutes: bring the release notes."),
        ("42", "The passport renewal is due tomorrow and nothing is booked."),  # the alert; HEARTBEAT_OK never
    ]
    [run] = CronJobs(home, loaded).store.runs("standup")
    assert (run["status"], run["trigger"], run["delivered"], run["session_key"]) == ("ok", "schedule", True,
                                                                                     "cron:standup")
    assert "standup" not in {j.id for j in CronJobs(home, loaded).load().jobs}  # a one-shot, done
    assert heartbeats() == 2
    # The web chat's history of the main session does not show the heartbeat prompts or HEARTBEAT_OK either.
    shown = [(m["role"], m["text"]) for m in chat_history(rt.store, main_session_key("main"), 50)["messages"]]
    assert shown == [("assistant", "The passport renewal is due tomorrow and nothing is booked.")]
    record = rt.store.get(main_session_key("main"))
    assert record is not None and "HEARTBEAT_OK" in rt.store.transcript_path(record.session_id).read_text()  # kept
    sched = status["services"]["scheduler"]  # type: ignore[index]
    main = sched["agents"]["main"]
    assert sched["ticker"] == "ok" and main["next_job"]["id"] == "weekly"
    assert main["heartbeat"]["next"] > datetime.now(UTC).isoformat()
    assert main["heartbeat"]["last"]["status"] == "alert" and main["heartbeat"]["last"]["delivered"] is True
