"""Turn slots told when hermit.yaml is reloaded (gateway/turn_slots.py `told`, gateway/live_config.py `listen`,
gateway/config_watch.py), not polling the bound while turns wait.

- A reload that raises `max_concurrent_turns` — by whichever reader of the config noticed the save first (an
  admission in a worker thread) — starts a waiting turn before that reader's call has even returned to the loop.
- With no reader at all (no new message, no status), the gateway's config watch sees the save and reloads: the
  waiting turn starts (waited on as an event, with a generous guard).
- An invalid save tells nobody (the last good bound stays); a listener may read the config again (it is called
  outside LiveConfig's lock); a failing listener does not fail the reader's look.
- Nothing polls: no timer is pending on the loop while a turn waits for a slot.

Real config files saved as an editor does (a new file renamed over the old), the real LiveConfig and watchfiles.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest

from channelhelpers import run
from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError
from hermit.gateway.config_watch import ConfigWatcher
from hermit.gateway.live_config import LiveConfig
from hermit.gateway.turn_slots import Place, TurnSlots, live_turn_limits


def save(home: Path, bound: object) -> None:
    tmp = home / "hermit.yaml.new"
    tmp.write_text("agents:\n  defaults:\n    timezone: Europe/Paris\n    memory_search:\n      provider: none\n"
                   f"    max_concurrent_turns: {bound}\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, home / "hermit.yaml")


def live_at(home: Path, bound: int) -> LiveConfig:
    save(home, bound)
    live = LiveConfig(load_config(StatePaths(home)))
    live.current()  # the first look reads the file again (LiveConfig): done before the test's own saves
    return live


async def one_running_one_waiting(slots: TurnSlots) -> tuple[Place, Place]:
    first = slots.place("main", "contact", "c1")
    assert await first.wait()
    second = slots.place("main", "contact", "c2")
    assert second.state == "waiting"
    return first, second


def look_in_a_thread(live: LiveConfig) -> Exception | None:
    """`live.current()` as an admission calls it, in a worker thread; what it raised. Guarded: a deadlock fails."""
    out: list[Exception | None] = []

    def look() -> None:
        try:
            live.current()
        except Exception as e:  # noqa: BLE001 - handed to the test
            out.append(e)
        else:
            out.append(None)

    reader = threading.Thread(target=look)
    reader.start()
    reader.join(20)
    assert not reader.is_alive(), "the reader is stuck (a listener called under the lock?)"
    return out[0]


def test_a_reload_by_any_reader_starts_a_waiting_turn_at_once(tmp_path: Path) -> None:
    live = live_at(tmp_path, 1)

    async def main() -> None:
        slots = TurnSlots(live_turn_limits(live))
        first, second = await one_running_one_waiting(slots)
        save(tmp_path, 2)
        # An admission notices the save in its worker thread: the slots are told there and then. The refresh is
        # queued on the loop before this await returns, so the turn has started when it does (a poll would
        # start it up to a second later).
        await asyncio.to_thread(live.current)
        assert second.state == "running"
        assert slots.status()["main"]["limit"] == 2
        first.release()
        second.release()
        slots.close()

    run(main)


def test_nothing_polls_while_a_turn_waits(tmp_path: Path) -> None:
    live = live_at(tmp_path, 1)

    async def main() -> None:
        slots = TurnSlots(live_turn_limits(live))
        first, second = await one_running_one_waiting(slots)
        loop = asyncio.get_running_loop()
        # (the test's own guard, `run`'s 60 s timeout, is the only timer)
        timers = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled() and h.when() - loop.time() < 30]
        assert timers == []  # a contact's turn waiting: no timer (only an owner's waits on the overdue rule)
        second.release()
        first.release()
        slots.close()

    run(main)


def test_the_config_watch_reloads_a_save_nobody_asks_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hermit.gateway")
    live = live_at(tmp_path, 1)
    watch = ConfigWatcher(live)

    async def main() -> None:
        slots = TurnSlots(live_turn_limits(live))
        first, second = await one_running_one_waiting(slots)
        third = slots.place("main", "contact", "c3")
        await watch.start()
        try:
            assert await asyncio.to_thread(watch.watching.wait, 20)
            save(tmp_path, 3)  # no message, no status: only the watch sees it
            assert await asyncio.wait_for(asyncio.gather(second.wait(), third.wait()), 20) == [True, True]
            assert watch.status() == {"running": True, "error": None, "restarts": 0}
        finally:
            await watch.stop()
        assert not watch.status()["running"]
        for p in (first, second, third):
            p.release()
        slots.close()

    run(main)
    assert "applied agents.main.max_concurrent_turns" in caplog.text


def test_an_invalid_save_tells_nobody_and_a_listener_may_read_the_config(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    live = live_at(tmp_path, 1)
    told: list[int] = []
    live.listen(lambda new: told.append(new.agents[0].settings.max_concurrent_turns))
    # Called outside the lock: reading the config again from a listener does not deadlock the reader.
    live.listen(lambda new: told.append(live.current().agents[0].settings.max_concurrent_turns))

    def broken(new: object) -> None:
        raise RuntimeError("listener down")

    live.listen(broken)
    save(tmp_path, "'many'")
    assert isinstance(look_in_a_thread(live), ConfigError) and told == []
    save(tmp_path, 3)
    assert look_in_a_thread(live) is None  # the broken listener's failure is logged, not the reader's
    assert told == [3, 3]
    assert "a listener of" in caplog.text and "listener down" in caplog.text


def test_slots_told_before_any_turn_or_after_close_do_nothing(tmp_path: Path) -> None:
    live = live_at(tmp_path, 1)

    async def main() -> None:
        slots = TurnSlots(live_turn_limits(live))
        slots.told()  # no line yet: each line takes the bound in force when it is made
        save(tmp_path, 2)
        await asyncio.to_thread(live.current)
        a, b = slots.place("main", "owner", "o1"), slots.place("main", "owner", "o2")
        assert [await a.wait(), await b.wait()] == [True, True]
        slots.close()
        save(tmp_path, 1)
        await asyncio.to_thread(live.current)  # told after close: nothing is refreshed, nothing raised
        assert a.state == b.state == "running"
        a.release()
        b.release()

    run(main)
