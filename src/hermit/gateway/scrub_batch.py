"""Scrubbing deleted messages' copies in batches: a flood of deletes in one session costs one rewrite, not one each.

A delete of a message a session's transcript holds is handled in two steps (gateway/bus.py `_retract_recorded`).
Before the platform is told it was handled: the files the message brought are deleted, its `retracted` entry is
appended (every reader sees a placeholder from then on: sessions/entries.py) and the transcript is written to the
state dir as one still to scrub (gateway/deletes_store.py `want_scrub`). Then, here: the copies of every message
the transcript hides and still holds (sessions/retraction.py `scrub_retracted`: its own text, and what Hermit wrote
after it that quotes it — replies, tool calls, summaries, notes) are scrubbed in one rewrite of the file. A batch
gathers: it starts once no delete came for its transcript for GATHER_QUIET seconds, or GATHER_MAX seconds after it
was first wanted, whichever is first; the deletes that come while it runs go to the next one. So a contact deleting
500 messages one after another costs a rewrite per GATHER_MAX seconds of their flood, not 500 (each a whole read
and write of the transcript, under the lock its appends wait on).

A turn of the session waits for its batch before it starts, and the batch then starts at once (`settled`): the
model never sees a copy of a message already deleted; so does a gateway stopping (`hurry`). Until its batch runs,
a deleted message's copies (not the message: hidden already) stay in the transcript for at most GATHER_MAX
seconds. After a kill, the gateway scrubs what the state dir says is left when it starts (`resume`, at once: no
delete is coming for it to gather); one the store had to forget (more than SCRUBS_KEPT sessions) is scrubbed with
the next delete in its session. A want from a caller being cancelled (a delete's intake as the loop ends or its
channel stops) starts no worker — none would run it or wait for it, and the loop closed with it pending — but is
started by the next want, a turn of the session or a stop (`settled`, `hurry`), and by the next start. The
scrub is wanted in the store before the entry that hides the message is written (gateway/bus.py, retractions.py):
a kill in between leaves a want that finds nothing, never a hidden message no start scrubs.

A transcript of a session that has ended (/new, a reset: an edit or delete after it) has what /new saved of it to
memory scrubbed by the same rule too (`saved_scrub`, agent/session_memory_scrub.py `scrub_saved`).

A failure: a note that cannot be scrubbed is logged and left, the transcript and the other notes still are
(sessions/retraction.py, agent/runtime.py `_reach`). A batch that raises is tried once more at once; failing again,
it stays in the store and in `failed`, and `settled` tries it again before the session's next turn and says it
failed when the session's current transcript still holds the copies: that turn is not run (gateway/bus.py
`_unscrubbed`: an error logged, its sender told), never run with the copies in the model's context.
"""

from __future__ import annotations

import asyncio
import logging

from hermit.agent.runtime import AgentRuntime
from hermit.agent.session_memory_scrub import scrub_saved
from hermit.gateway.agents import AgentHost
from hermit.gateway.deletes_store import RememberedDeletes, Scrub
from hermit.sessions.retraction import Saved, scrub_retracted
from hermit.sessions.scrub import Deleted
from hermit.sessions.transcript import MessageEntry

log = logging.getLogger("hermit.gateway")

GATHER_QUIET = 2.0  # a batch starts once no delete came for its transcript for this long (seconds)...
GATHER_MAX = 10.0  # ...or this long after it was first wanted, or when a turn of the session is about to start


class ScrubBatches:
    """One worker per transcript with messages to scrub; `want` after the transcript was written as one to the
    store (`RememberedDeletes.want_scrub`)."""

    def __init__(self, host: AgentHost, deletes: RememberedDeletes, *, quiet: float = GATHER_QUIET,
                 most: float = GATHER_MAX) -> None:
        self.host = host
        self.quiet, self.most = quiet, most  # this instance's GATHER_QUIET and GATHER_MAX (a test's are shorter)
        self._deletes = deletes
        self._again: set[Scrub] = set()  # wanted since its worker last read the transcript
        self._poked: dict[Scrub, asyncio.Event] = {}  # set by every `want`: the batch gathers on
        self._now: set[Scrub] = set()  # a turn (or a stop) waits for it: no more gathering
        self._tasks: dict[Scrub, asyncio.Task[None]] = {}
        self._unstarted: set[Scrub] = set()  # wanted by a caller being cancelled: no worker yet (`want`)
        self._after: dict[Scrub, list[asyncio.Event]] = {}  # turns of the session to end before its batch reads it
        self._threads = asyncio.Semaphore(1)  # one rewrite at a time: a flood holds one of the threads, not all
        self.batches = 0  # rewrites begun (a batch that found nothing to scrub writes nothing)
        self.parked: set[Scrub] = set()  # batches waiting for a turn of their session to end (`want`'s `after`)
        self.failed: set[Scrub] = set()  # whose last batch failed twice running: left in the store, tried again

    def want(self, scrub: Scrub, after: asyncio.Event | None = None) -> None:
        """`after`: set when a turn running in the session now is over (it may still write a copy of what an edit
        took back: the batch reads the transcript once it is; a turn waiting in `settled` waits for both)."""
        if after is not None:
            self._after.setdefault(scrub, []).append(after)
        self._again.add(scrub)
        self._poked.setdefault(scrub, asyncio.Event()).set()
        running = self._tasks.get(scrub)
        if running is None or running.done():  # done, its callback not run yet: this want is not its any more
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                # Wanted as its caller is cancelled (a delete's intake at a stop: asyncio.run cancelling what is
                # left, a channel stopped): a worker started now no stop would wait for, and the loop may close
                # with it pending. Started by the next want, a turn of the session (`settled`) or a stop
                # (`hurry`); the store has it for the next start meanwhile.
                self._unstarted.add(scrub)
                return
            self._unstarted.discard(scrub)
            task = asyncio.create_task(self._work(scrub), name=f"scrub:{scrub[1]}")
            self._tasks[scrub] = task
            task.add_done_callback(lambda t: self._done(scrub, t))

    def _done(self, scrub: Scrub, task: asyncio.Task[None]) -> None:
        if self._tasks.get(scrub) is task:
            del self._tasks[scrub]
            self._poked.pop(scrub, None)
            self._now.discard(scrub)
            self._after.pop(scrub, None)

    def resume(self) -> None:
        """Scrub what the store says is left (a gateway killed before its batches were done), at once: its deletes
        came before the start, none is to gather (one coming now makes another batch)."""
        scrubs = self._deletes.scrubs()
        for scrub in scrubs:
            self.want(scrub)
        self.hurry([s for s in scrubs if s in self._tasks])

    async def settled(self, agent_id: str, session_key: str) -> bool:
        """Wait until no batch of the session's transcripts is pending or running (one that failed before is tried
        again first). False when the scrub of the session's current transcript failed: it still holds copies of a
        message its sender deleted or edited, which a turn would send to the model (the caller runs none)."""
        for scrub in [s for s in self.failed | self._unstarted if s[:2] == (agent_id, session_key)
                      and s not in self._tasks]:
            self.want(scrub)
        mine = [s for s in self._tasks if s[:2] == (agent_id, session_key)]
        self.hurry(mine)
        if mine:
            await asyncio.wait([self._tasks[s] for s in mine])
        failed = {s[2] for s in self.failed if s[:2] == (agent_id, session_key)}
        if not failed:
            return True
        runtime = self.host.runtimes.get(agent_id)
        record = runtime.store.get(session_key) if runtime is not None else None
        return record is None or record.session_id not in failed  # an ended transcript's copies reach no turn

    def hurry(self, scrubs: list[Scrub] | None = None) -> None:
        """Start the batches of `scrubs` (all: those not started yet too) now, without gathering more deletes."""
        for scrub in list(self._unstarted) if scrubs is None else ():
            self.want(scrub)
        for scrub in self._tasks if scrubs is None else scrubs:
            self._now.add(scrub)
            if (poked := self._poked.get(scrub)) is not None:
                poked.set()

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._tasks.values())

    async def _gather(self, scrub: Scrub) -> None:
        """Wait for the deletes of a flood to come (see the module's rule)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.most
        poked = self._poked.setdefault(scrub, asyncio.Event())
        while scrub not in self._now and (left := min(self.quiet, until - loop.time())) > 0:
            poked.clear()
            try:
                await asyncio.wait_for(poked.wait(), left)
            except TimeoutError:
                return

    async def _work(self, scrub: Scrub) -> None:
        confirm = False  # the last batch scrubbed some and no delete came since: looked at once more, at once
        while confirm or scrub in self._again:
            if not confirm or scrub in self._again:
                await self._gather(scrub)
            while self._after.get(scrub):
                self.parked.add(scrub)
                try:
                    await self._after[scrub].pop().wait()
                finally:
                    self.parked.discard(scrub)
            confirm = False
            self._again.discard(scrub)
            stamp = self._deletes.wanted(scrub)
            try:
                # Once more when it scrubbed some: until a look finds nothing, none hidden meanwhile is left over.
                confirm = await self._batch(scrub) > 0
            except Exception as e:  # noqa: BLE001 - a passing failure (a full disk freed, a lock let go): once more
                log.warning("could not scrub the deleted messages of session %s (%s): trying once more", scrub[1],
                            type(e).__name__)
                try:
                    confirm = await self._batch(scrub) > 0
                except Exception:  # noqa: BLE001 - left in the store: tried again at the session's next turn,
                    # the next delete and the next start; its turns are not run meanwhile (`settled`)
                    log.exception("could not scrub the deleted messages of session %s: its turns are not run until "
                                  "they are (they would send the copies to the model)", scrub[1])
                    self.failed.add(scrub)
                    return
            self.failed.discard(scrub)
            if confirm or scrub in self._again or stamp is None:
                continue
            try:
                await asyncio.to_thread(self._deletes.scrubbed, scrub, stamp)
            except OSError:  # scrubbed again (finding nothing) at the next start
                log.exception("could not write to the state dir that session %s was scrubbed", scrub[1])

    async def _batch(self, scrub: Scrub) -> int:
        async with self._threads:
            self.batches += 1
            return await asyncio.to_thread(self._scrub, scrub)

    def _scrub(self, scrub: Scrub) -> int:
        """How many messages were scrubbed."""
        agent_id, session_key, session_id = scrub
        runtime = self.host.runtimes.get(agent_id)
        if runtime is None:  # an agent no longer configured: nothing of it to scrub here
            return 0
        path = runtime.store.transcript_path(session_id)
        try:
            # a note it cannot scrub is logged and left: never raises for it
            done = scrub_retracted(path, session_key, saved_scrub(runtime, session_key, session_id))
        except FileNotFoundError:  # the session was removed since
            return 0
        if done:
            log.info("scrubbed the copies of %d deleted message(s) in %s", done, session_key)
        return done


def saved_scrub(runtime: AgentRuntime, session_key: str, session_id: str) -> Saved | None:
    """What /new saved of the session `session_id` to memory, scrubbed as its transcript is (agent/session_memory.py
    `scrub_saved`, by the same copy rule) when the session has ended (/new, a reset: an edit or a delete after it);
    None for the key's current session (nothing saved of it yet)."""
    record = runtime.store.get(session_key)
    if record is not None and record.session_id == session_id:
        return None

    def saved(deleted: Deleted, entries: list[MessageEntry]) -> None:
        if entries and scrub_saved(runtime.agent.workspace, session_id, entries, runtime.timezone,
                                   edited=deleted.edited, rule=deleted.rule) and runtime.memory is not None:
            runtime.memory.mark_dirty()
    return saved
