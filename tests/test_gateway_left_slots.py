"""Turn slots (gateway/turn_slots.py) that follow hermit.yaml and a status that says what runs past the bound.

- `agents.*.max_concurrent_turns` changed in hermit.yaml applies without a restart: TurnSlots asks its bound
  again as turns join, at each status and when the gateway's LiveConfig is reloaded (a real file, edited; the
  config watch reloads it when saved):
  raised, waiting turns start at once; lowered, none running is cancelled and no more start until fewer run.
- `hermit gateway status` (text and --json) never says more slots in use than there are: an owner's turn let past
  contacts' overdue ones runs as "+1 past the overdue rule" — through a real gateway and the real OpenAI-compatible
  adapter over HTTP to the fake provider, each turn held until the test lets it go.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import hermit.gateway.turn_slots as turn_slots
from channelhelpers import run
from hermit.cli.gateway import slot_lines
from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError
from hermit.gateway.config_watch import ConfigWatcher
from hermit.gateway.live_config import LiveConfig
from hermit.gateway.turn_slots import Place, TurnSlots
from test_turn_bound import CONTACTS, OWNER, HeldProvider, arrives, dm, gateway

EMPTY = {"owner": 0, "scheduled": 0, "contact": 0}


def config(home: Path, bound: object) -> None:
    """hermit.yaml with this bound, saved as an editor does (a new file renamed over the old)."""
    tmp = home / "hermit.yaml.new"
    tmp.write_text("agents:\n  defaults:\n    timezone: Europe/Paris\n    memory_search:\n      provider: none\n"
                   f"    max_concurrent_turns: {bound}\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, home / "hermit.yaml")


def live_bound(home: Path) -> Callable[[str], int]:
    """The bound as the gateway's LiveConfig reads it now (what the bus hands TurnSlots)."""
    live = LiveConfig(load_config(StatePaths(home)))

    def limit(agent_id: str) -> int:
        try:
            loaded = live.current()
        except ConfigError:
            loaded = live.last_good()
        return next(a.settings.max_concurrent_turns for a in loaded.agents if a.id == agent_id)

    return limit


async def started(*places: Place) -> None:
    await asyncio.wait_for(asyncio.gather(*(p.wait() for p in places)), 20)


def test_raising_the_bound_in_hermit_yaml_starts_waiting_turns_at_once(tmp_path: Path) -> None:
    config(tmp_path, 1)

    live = LiveConfig(load_config(StatePaths(tmp_path)))
    watch = ConfigWatcher(live)  # as the gateway runs it: hermit.yaml reloaded when saved, the slots told

    async def main() -> None:
        slots = TurnSlots(turn_slots.live_turn_limits(live))
        first = slots.place("main", "contact", "c1")
        assert await first.wait()
        waiting = [slots.place("main", "contact", f"c{n}") for n in (2, 3)]
        assert [p.state for p in waiting] == ["waiting", "waiting"]
        await watch.start()
        assert await asyncio.to_thread(watch.watching.wait, 20)
        config(tmp_path, 3)  # no new turn joins: the waiting ones start on their own
        await started(*waiting)
        await watch.stop()
        assert slots.status()["main"] == {"limit": 3, "running": 3, "past_overdue": 0, "past_lowered": 0,
                                          "overdue": 0, "waiting": EMPTY}
        for p in (first, *waiting):
            p.release()
        slots.close()

    asyncio.run(main())


def test_lowering_the_bound_cancels_no_running_turn_and_says_so(tmp_path: Path) -> None:
    config(tmp_path, 3)

    async def main() -> None:
        slots = TurnSlots(live_bound(tmp_path))
        running = [slots.place("main", "contact", f"c{n}") for n in range(3)]
        await started(*running)
        config(tmp_path, 1)
        late = slots.place("main", "contact", "late")
        assert late.state == "waiting" and [p.state for p in running] == ["running"] * 3
        status = slots.status()
        assert status["main"] == {"limit": 1, "running": 3, "past_overdue": 0, "past_lowered": 2, "overdue": 0,
                                  "waiting": {"owner": 0, "scheduled": 0, "contact": 1}}
        assert slot_lines({"turn_slots": status}) == [
            "  agent main: 1 of 1 turn slots in use, +2 started before the bound was lowered to 1, waiting: owner 0, "
            "scheduled 0, contacts 1"]
        running[0].release()
        running[1].release()
        assert late.state == "waiting"  # one still runs: the bound of 1 is taken
        running[2].release()
        await started(late)
        late.release()
        slots.close()

    asyncio.run(main())


def test_an_invalid_bound_keeps_the_last_good_one_and_a_removed_agent_its_own(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text("agents:\n  defaults:\n    timezone: Europe/Paris\n  list:\n"
                                          "    - id: main\n    - id: work\n      max_concurrent_turns: 5\n")
    os.chmod(tmp_path / "hermit.yaml", 0o600)
    live = LiveConfig(load_config(StatePaths(tmp_path)))
    limit = turn_slots.live_turn_limits(live)
    assert (limit("main"), limit("work")) == (4, 5)
    config(tmp_path, 3)  # `work` is gone from the file: its runtime runs with its bound until a restart
    assert (limit("main"), limit("work")) == (3, 5)
    config(tmp_path, "'many'")  # invalid: the gateway goes by the last valid file meanwhile
    assert limit("main") == 3 and live.error() is not None
    assert limit("nobody") == 1


def test_an_unreadable_bound_keeps_the_one_applied(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bounds = [2]

    def limit(agent_id: str) -> int:
        if not bounds:
            raise OSError("config gone")
        return bounds[0]

    async def main() -> None:
        slots = TurnSlots(limit)
        first = slots.place("main", "owner", "o1")
        await started(first)
        bounds.clear()
        second = slots.place("main", "owner", "o2")
        await started(second)  # the bound of 2 kept
        assert slots.status()["main"]["limit"] == 2
        first.release()
        second.release()
        slots.close()

    asyncio.run(main())
    assert "the turn bound of agent main could not be read, 2 kept: config gone" in caplog.text


def test_status_says_an_owners_turn_past_the_bound_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_slots, "OVERDUE_SECONDS", 0.3, raising=False)
    provider = HeldProvider(("tag-c1", "tag-c2", "tag-own"))

    async def main() -> None:
        gw, _ = gateway(tmp_path, provider)
        try:
            for tag, who in zip(("tag-c1", "tag-c2"), CONTACTS, strict=False):
                await gw.bus.publish(dm(f"hi {tag}", who))
                await arrives(provider, tag)  # two contacts' turns that do not end: both slots
            await gw.bus.publish(dm("me? tag-own", OWNER))
            await arrives(provider, "tag-own")  # past the bound, the contacts' turns being overdue
            status = gw.bus.status()  # what /status (`hermit gateway status --json`) carries
            assert slot_lines(status) == [
                "  agent main: 2 of 2 turn slots in use, +1 past the overdue rule (the owner's, started while others' "
                "turns ran over 120 s), waiting: owner 0, scheduled 0, contacts 0"]
            slots = dict(status["turn_slots"]["main"])
            assert slots.pop("overdue") in (1, 2)  # c1's turn, and by now maybe c2's
            assert slots == {"limit": 2, "running": 3, "past_overdue": 1, "past_lowered": 0, "waiting": EMPTY}
            provider.let_all_go()
            assert await gw.bus.drain(20)
            assert gw.bus.status()["turn_slots"]["main"]["past_overdue"] == 0
        finally:
            provider.let_all_go()

    with provider:
        run(main)
