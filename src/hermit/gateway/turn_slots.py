"""Turn slots: how many of one agent's turns run at once in the gateway, and whose turn starts next.

The bus runs one turn at a time per session, but sessions side by side without bound: twenty contacts,
a busy group, cron jobs and the heartbeat firing together each started a model call at once, so a
provider's rate limit (429) failed the owner's own turn, a local model was swamped, and the owner's
message waited behind strangers' — a contact could deny the owner service. Each agent has
`max_concurrent_turns` slots (agents.defaults, or an agents.list entry; 4 unless set); a session's next
turn takes a place in its agent's line and starts once it holds a slot.

When a slot frees, the next turn is
1. the owner's (the web chat, the owner's DMs, an owner's message in a group), first come first served;
2. else a scheduled one (cron jobs, the heartbeat): the owner's own work, so ahead of contacts, but never
   more of them at once than `limit - 1` (when the limit is 2 or more): a batch of jobs due at 09:00, or
   a slow one, leaves a slot to chat turns, so the owner's message never waits for a job to finish;
3. else a contact's or a group's, first come first served.

A turn an owner's message waits on — ahead of it in its session's queue: a member's message before the owner's
in a group — takes the owner's place (`promote`): it waited in the contacts' line, behind every contact's turn
that came first, and the owner's message with it.

A turn has no time limit (rounds of tool calls, each model call up to the provider's deadline, a sandboxed
command up to 30 minutes), so contacts' turns that ran long — or one contact's in as many sessions as the bound:
their DM, groups, threads — held every slot and the owner's message waited for hours. A turn that is not the
owner's and has held its slot for OVERDUE_SECONDS no longer counts against the owner: an owner's turn waiting
then starts past the bound, one per such turn (never a contact's or a scheduled one).

The bound follows hermit.yaml (`live_turn_limits`, with the gateway's LiveConfig): it is looked at again as each
turn joins a line, at each status, and when the config is reloaded (`told`: LiveConfig tells its listeners, and the
gateway's config watch reloads it as soon as the file is saved), so a raised bound starts waiting turns at once;
a lowered one starts no more until fewer run than it allows, and cancels none running. Nothing polls.
`status` says what runs past the bound and why: owner's turns let past contacts' overdue ones (`past_overdue`),
turns started before the bound was lowered (`past_lowered`).

The bus's worker asks for one place per session at a time (the session's queue holds the rest, bounded by
`gateway.queue_max_per_session`), so however fast one sender writes they hold at most one place per
session, and their next message joins the back of the line once their turn is over.

A place is given back (`release`) when its turn ends however it ends — done, raised, or its task
cancelled — and leaves the line (`withdraw`) when its turn is no longer wanted before it starts: its
message deleted by its sender, its scheduler gave up on it (a job's timeout), the gateway stopping (`close`).
Everything here runs on the gateway's event loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from hermit.errors import ConfigError

if TYPE_CHECKING:
    from hermit.gateway.live_config import LiveConfig

log = logging.getLogger("hermit.gateway")

OVERDUE_SECONDS = 120.0  # a turn not the owner's holding its slot this long lets a waiting owner's turn start

Kind = Literal["owner", "scheduled", "contact"]
KINDS: tuple[Kind, ...] = ("owner", "scheduled", "contact")  # the order a freed slot is offered in


class Place:
    """One turn's place: waiting in its agent's line, then holding one of its slots, until given back."""

    def __init__(self, line: _Line, kind: Kind, what: str) -> None:
        self.kind = kind
        self.what = what  # for the log: the session it is for
        self.state: Literal["waiting", "running", "done"] = "waiting"
        self.since = 0.0  # the loop's time it was given its slot
        self._line = line
        self._decided: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def wait(self) -> bool:
        """True once the turn holds a slot; False when it left the line first (`withdraw`, the gateway
        stopping). Cancelled while it waits, its place — or the slot given to it meanwhile — goes back."""
        try:
            return await asyncio.shield(self._decided)
        except asyncio.CancelledError:
            self.release()
            raise

    def withdraw(self) -> None:
        """Leave the line if still waiting; a turn that holds its slot keeps it (it is running)."""
        if self.state == "waiting":
            self._line.release(self)

    def release(self) -> None:
        """Give back the place, or the slot once held; again is harmless."""
        self._line.release(self)

    def promote(self) -> None:
        """Wait in the owner's line from now on, if still waiting: an owner's turn waits on this one (it is ahead
        of it in its session's queue), so it goes ahead as the owner's would."""
        if self.state == "waiting" and self.kind != "owner":
            self._line.promote(self)

    def _decide(self, granted: bool) -> None:
        self.state = "running" if granted else "done"
        if not self._decided.done():
            self._decided.set_result(granted)


class _Line:
    """One agent's slots and the turns waiting for them."""

    def __init__(self, agent_id: str, limit: int) -> None:
        self.agent_id = agent_id
        self.limit = limit
        self.waiting: dict[Kind, deque[Place]] = {k: deque() for k in KINDS}
        self.running: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        self.closed = False
        self._others: set[Place] = set()  # running turns not the owner's
        self._past: set[Place] = set()  # running owner's turns started past the bound (contacts' overdue)
        self._timer: asyncio.TimerHandle | None = None  # admits the owner's turn once one of those is overdue
        self._loop = asyncio.get_running_loop()  # its places' loop (a place may be given back from a callback)

    @property
    def scheduled_cap(self) -> int:
        """How many scheduled turns may run at once: all but one slot, so a chat turn always has one."""
        return max(1, self.limit - 1)

    def join(self, place: Place) -> None:
        if self.closed:
            place._decide(False)
            return
        self.waiting[place.kind].append(place)
        self._admit()
        if place.state == "waiting":
            log.info("a turn in %s of agent %s waits for a slot: %d of %d running, %d waiting", place.what,
                     self.agent_id, sum(self.running.values()), self.limit, sum(map(len, self.waiting.values())))

    def release(self, place: Place) -> None:
        if place.state == "waiting":
            self.waiting[place.kind].remove(place)
            place._decide(False)
        elif place.state == "running":
            self.running[place.kind] -= 1
            self._others.discard(place)
            self._past.discard(place)
            place.state = "done"
            self._admit()

    def set_limit(self, limit: int) -> None:
        """A new bound (hermit.yaml changed): raised, waiting turns start now; lowered, running ones go on."""
        if limit == self.limit:
            return
        log.info("agent %s: at most %d turns at once now (was %d; %d running)", self.agent_id, limit, self.limit,
                 sum(self.running.values()))
        self.limit = limit
        self._admit()

    def promote(self, place: Place) -> None:
        self.waiting[place.kind].remove(place)
        place.kind = "owner"
        self.waiting["owner"].append(place)
        self._admit()

    def close(self) -> None:
        """The gateway is stopping: every waiting turn leaves the line (it is answered "not processed")."""
        self.closed = True
        for line in self.waiting.values():
            while line:
                line.popleft()._decide(False)
        self._wake(None)

    def _overdue(self, now: float) -> int:
        return sum(1 for p in self._others if now - p.since >= OVERDUE_SECONDS)

    def _next(self, now: float) -> Place | None:
        busy = sum(self.running.values())
        if self.waiting["owner"] and busy - self._overdue(now) < self.limit:
            return self.waiting["owner"][0]
        if busy >= self.limit:
            return None
        if self.waiting["owner"]:
            return self.waiting["owner"][0]
        if self.waiting["scheduled"] and self.running["scheduled"] < self.scheduled_cap:
            return self.waiting["scheduled"][0]
        if self.waiting["contact"]:
            return self.waiting["contact"][0]
        return None

    def _admit(self) -> None:
        now = self._loop.time()
        while (place := self._next(now)) is not None:
            past = sum(self.running.values()) >= self.limit  # let in by the overdue rule
            self.waiting[place.kind].popleft()
            self.running[place.kind] += 1
            place.since = now
            if place.kind != "owner":
                self._others.add(place)
            elif past:
                self._past.add(place)
            place._decide(True)
        # An owner's turn still waiting: looked at again when the next of the others' turns becomes overdue.
        due = min((p.since + OVERDUE_SECONDS for p in self._others if now - p.since < OVERDUE_SECONDS),
                  default=None) if self.waiting["owner"] else None
        self._wake(due)

    def _wake(self, at: float | None) -> None:
        if self._timer is not None and (at is None or self._timer.when() != at):
            self._timer.cancel()
            self._timer = None
        if at is not None and self._timer is None:
            self._timer = self._loop.call_at(at, self._admit)

    def status(self) -> dict[str, Any]:
        """The bound, turns running (`running` may pass `limit`: `past_overdue` owner's turns let past contacts'
        overdue ones, `past_lowered` started before the bound was lowered), `overdue` (turns not the owner's that
        have held their slot OVERDUE_SECONDS) and turns waiting by kind."""
        running = sum(self.running.values())
        past = max(0, running - self.limit)
        by_overdue = min(past, len(self._past))
        return {"limit": self.limit, "running": running, "past_overdue": by_overdue, "past_lowered": past - by_overdue,
                "overdue": self._overdue(self._loop.time()), "waiting": {k: len(self.waiting[k]) for k in KINDS}}


@runtime_checkable
class Told(Protocol):
    """A bound that says when it may have changed: `on_change(callback)` has `callback()` called then, from any
    thread (LiveTurnLimits: after each reload of hermit.yaml)."""

    def __call__(self, agent_id: str) -> int: ...

    def on_change(self, callback: Callable[[], None]) -> None: ...


class TurnSlots:
    """The gateway's turn slots, one line per agent; `limit_of(agent_id)` is that agent's bound, asked again as
    turns join, at each status and when it says it changed (`Told`; see the module)."""

    def __init__(self, limit_of: Callable[[str], int]) -> None:
        self._limit_of = limit_of
        self._lines: dict[str, _Line] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its lines live on, once one is made
        if isinstance(limit_of, Told):
            limit_of.on_change(self.told)

    def place(self, agent_id: str, kind: Kind, what: str) -> Place:
        """Join the agent's line; `await place.wait()` for the slot, then `release()` it when the turn ends."""
        line = self._lines.get(agent_id)
        if line is None:
            self._loop = asyncio.get_running_loop()
            line = self._lines[agent_id] = _Line(agent_id, self._limit(agent_id, 1))
            line.closed = self._closed
        else:
            line.set_limit(self._limit(agent_id, line.limit))
        place = Place(line, kind, what)
        line.join(place)
        return place

    def _limit(self, agent_id: str, kept: int) -> int:
        """The agent's bound as configured now; `kept` when it cannot be read (the last one applied)."""
        try:
            return self._limit_of(agent_id)
        except Exception as e:  # noqa: BLE001 - the bound stays as it was; the turns go on
            log.warning("the turn bound of agent %s could not be read, %d kept: %s", agent_id, kept, e)
            return kept

    def refresh(self) -> None:
        """Every line's bound as configured now (a raised one starts waiting turns)."""
        for agent_id, line in self._lines.items():
            if not line.closed:
                line.set_limit(self._limit(agent_id, line.limit))

    def told(self) -> None:
        """The bound may have changed (hermit.yaml reloaded): every line looks again on its loop. Safe from any
        thread (a reload runs where `LiveConfig.current()` was called: a worker thread, the config watch)."""
        loop = self._loop
        if loop is None or self._closed:
            return  # no line yet: each takes the bound in force when it is made
        with contextlib.suppress(RuntimeError):  # the loop is closed: the gateway has stopped
            loop.call_soon_threadsafe(self.refresh)

    def close(self) -> None:
        self._closed = True
        for line in self._lines.values():
            line.close()

    def status(self) -> dict[str, dict[str, Any]]:
        """Per agent that ran a turn: its limit (as configured now), turns running (and past the limit, why),
        and turns waiting for a slot by kind."""
        self.refresh()
        return {agent: line.status() for agent, line in sorted(self._lines.items())}


class LiveTurnLimits:
    """Each agent's `max_concurrent_turns` in hermit.yaml as it is now (the last valid one while it is invalid);
    for an agent it no longer names, the bound it started with (its runtime runs until a restart). `on_change`:
    called after each reload of the file (LiveConfig.listen)."""

    def __init__(self, live: LiveConfig) -> None:
        self.live = live

    def __call__(self, agent_id: str) -> int:
        try:
            loaded = self.live.current()
        except ConfigError:
            loaded = self.live.last_good()
        for agent in (*loaded.agents, *self.live.started.agents):
            if agent.id == agent_id:
                return agent.settings.max_concurrent_turns
        return 1

    def on_change(self, callback: Callable[[], None]) -> None:
        self.live.listen(lambda loaded: callback())


def live_turn_limits(live: LiveConfig) -> LiveTurnLimits:
    """The gateway's bound for TurnSlots: hermit.yaml as it is now, told when it is reloaded."""
    return LiveTurnLimits(live)
