"""The household's gateway (tests/audit21_household.py: built as `hermit gateway run` builds it, the real Telegram
adapter, a clock the test moves) restarted every 20 minutes with a heartbeat every 30: before, each start planned the
beat 30 minutes ahead and Ann never heard from it; now the beats come on time across the restarts, and her alert
reaches her DM once."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

from audit19_who import until
from audit21_household import OWNER, InProcess, StepClock, household
from channeldrivers import TelegramDriver
from hermit.testing.scripted import FunctionModel
from test_audit21_household_heartbeat import Script, is_beat, start_at

ALERT = "Reminder: the plumber comes on Tuesday at nine."


async def ticked(gw: InProcess, clock: StepClock) -> None:
    """Wait for a tick of the scheduler at the clock's time now, and for the heartbeats it started to end."""
    now = datetime.fromtimestamp(clock(), UTC)
    gw.scheduler.wake()
    await until(lambda: gw.scheduler.last_tick is not None and gw.scheduler.last_tick >= now
                and not gw.scheduler.heartbeat_tasks(), "a tick")


def test_a_gateway_restarted_every_20_minutes_beats_every_30(tmp_path: Path) -> None:
    async def body() -> tuple[list[str | None], list[str], int]:
        tg = TelegramDriver(["personal"])
        await tg.start()
        script = Script()
        script.alert = ALERT
        models = {"main": FunctionModel(script.main), "family": FunctionModel(script.family)}
        loaded = household(tmp_path / "home", tg, defaults={"heartbeat": {
            "every_minutes": 30, "target": {"channel": "telegram", "account": "personal", "to": OWNER}}})
        (loaded.agent("main").workspace / "HEARTBEAT.md").write_text("- Anything due?\n", encoding="utf-8")
        clock = StepClock(start_at())
        seen: list[str | None] = []  # the main agent's last beat as each gateway stops
        try:
            for _ in range(4):  # up at 0, 20, 40, 60 minutes; ticks just before each stop: beats at 40 and 80
                async with InProcess(tmp_path / "home", {**os.environ, **tg.env}, models, clock) as gw:
                    await ticked(gw, clock)
                    clock.forward(20 * 60 - 1)
                    await ticked(gw, clock)
                    last = gw.heartbeat("main")["last"]
                    seen.append(last["at"] if last else None)
                clock.forward(1)
            await until(lambda: len(tg.texts("personal", OWNER)) >= 1, "the alert")
            return seen, tg.texts("personal", OWNER), sum(is_beat(r) for r in models["main"].requests)
        finally:
            await tg.stop()

    seen, to_ann, beat_requests = asyncio.run(body())
    assert seen[0] is None and seen[1] is not None and seen[3] is not None and seen[3] != seen[1], seen
    assert beat_requests == 2 * 2  # two beats, each a read and its answer
    assert to_ann == [ALERT]  # sent once: the second beat's same alert is not sent again within the day
