"""The bus: every inbound message is routed, access-checked and queued per session; turns run one at a
time per session in arrival order, different sessions concurrently up to their agent's
`max_concurrent_turns`: a session's next turn waits for a slot, the owner's first (turn_slots.py).

`publish` (the InboundSink of channels/base.py) returns only once the message is queued or refused,
so a channel that must not lose or repeat a message can commit its offset after it returns. Queues are
bounded: a full queue answers the sender ("busy") instead of growing. A session's worker task exists
only while its queue has work. The bus is also the host the scheduler runs turns through
(`run_turn`, `deliver`, `busy`), so a heartbeat and a user message in one session never overlap.

Routing and access are injected (`route`, `admit`), so this module knows only their results; the
gateway's composition (supervisor.py) adapts agent.routing.Router and channels.access.AccessControl to
them. A message is routed before it is checked, so a group's mention patterns are those of the agent
that would answer; a refused sender is sent only what the policy says (a pairing code or nothing).
The route already knows whether a DM's sender is an owner (owners are config, no file to read): only an
owner's DM can be routed to the main session, a contact's gets a session of its own (SPEC §18).
Access and routing are checked again when a queued message's turn is about to start: a contact revoked
while their messages waited (`hermit pairing revoke`, or an edit of hermit.yaml) gets none of them run,
nor does an owner removed from `owners` whose message waits in the owner's session; such a message is
dropped and logged, and the sender is sent only what the policy says now. They are checked once more when a
turn ends, before its reply is sent: a sender who lost access while it ran gets no reply (it stays in the
transcript). Files a
message brought wait in the state dir until then: deleted when it is refused (at either check) or its
queue is full, filed into the answering session's inbox when its turn starts (attachments.py), its images
attached to the turn's message when the agent's model reads images. A message
the gateway stopped before running keeps its files staged: Telegram's journal hands it over again after
the restart.

A sender's delete or edit of a message waiting or recorded is gateway/retract_deleted.py (the Bus's
`_change_waiting`, `_retract_recorded`, ... methods).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hermit.agent.turn import TurnResult
from hermit.channels.base import Channel, InboundMessage, OutboundMessage, PublishOutcome, Target, TurnEnd
from hermit.errors import ChannelError, HermitError
from hermit.gateway import attachments, retract_deleted, retractions
from hermit.gateway.agents import AgentHost
from hermit.gateway.deletes_store import DELETES_KEPT as DELETES_KEPT
from hermit.gateway.deletes_store import DELETES_PER_SENDER as DELETES_PER_SENDER
from hermit.gateway.deletes_store import RememberedDeletes
from hermit.gateway.replies import BUSY, NOT_PROCESSED, Chunker, deliver_text, run_and_reply, send_safely
from hermit.gateway.retractions import edit_recorded, message_ref, not_run_unscrubbed, remember_delete
from hermit.gateway.scrub_batch import ScrubBatches
from hermit.gateway.state import HowRun
from hermit.gateway.turn_slots import Kind, Place, TurnSlots
from hermit.messages import FiledFile, ImagePart, Sender
from hermit.sessions.keys import is_main_session_key

log = logging.getLogger("hermit.gateway")

@dataclass(frozen=True)
class Routed:
    agent_id: str
    session_key: str


@dataclass(frozen=True)
class Admission:
    allowed: bool
    reply: str | None = None  # what the sender is told when refused (a pairing code, "not allowed"), if anything
    reason: str = ""


RouteFn = Callable[[InboundMessage], Routed]


AdmitFn = Callable[[InboundMessage, str], Admission]  # (message, agent id it is routed to)


@dataclass
class _Job:
    agent_id: str
    session_key: str
    text: str
    msg: InboundMessage | None = None  # None: a scheduler turn, whose result goes back to the caller
    heartbeat: bool = False
    result: asyncio.Future[TurnResult] | None = None
    dropped: bool = False  # its sender deleted it while it waited: no turn runs
    finished: asyncio.Event = field(default_factory=asyncio.Event)  # set once its worker is done with it
    # Its sender deleted it as its turn was starting: its files are not filed, or removed once filed (`filed`).
    deleted: bool = False
    filed: tuple[FiledFile, ...] = ()
    guard: threading.Lock = field(default_factory=threading.Lock)  # `deleted` and `filed`: filing is in a thread
    place: Place | None = None  # its place in its agent's line for a turn slot, once at the head of its queue
    owner: bool = False  # an owner's message (`_kind`, when queued): the owner's have a queue bound of their own


@dataclass
class _SessionQueue:
    jobs: asyncio.Queue[_Job]
    worker: asyncio.Task[None] | None = None
    running: _Job | None = None
    waiting: list[_Job] = field(default_factory=list)  # the jobs in `jobs`, for a delete or an edit to find


class Bus:
    def __init__(self, host: AgentHost, *, route: RouteFn, admit: AdmitFn,
                 channels: Mapping[tuple[str, str], Channel], chunk: Chunker, queue_limit: int = 8,
                 trusted_channels: frozenset[str] = frozenset({"webchat"}),
                 deletes: RememberedDeletes | None = None, turn_limit: Callable[[str], int] | None = None) -> None:
        self.host = host
        self.hint_for: Callable[[HermitError], str | None] | None = None  # a failed turn's better hint (replies.py)
        self._route = route
        self._admit = admit
        self.channels = channels
        self._chunk = chunk
        self._limit = queue_limit
        self._trusted = trusted_channels
        # Turns running at once, per agent: `turn_limit(agent)` is its bound as hermit.yaml says it now.
        self._slots = TurnSlots(turn_limit or self._turn_limit)
        # Keyed by agent and session: a key naming no agent (a CLI session `notes`, `cron:<job>`) may exist
        # in two agents' stores, and those are two sessions.
        self._queues: dict[tuple[str, str], _SessionQueue] = {}
        self._open = True
        self._turn_ids = itertools.count(1)
        self._retractions: set[asyncio.Task[None]] = set()
        self._looking = asyncio.Semaphore(1)  # deletes looked for in transcripts, one at a time
        # Deletes that found nothing, by (channel, account, peer, message id) -> who deleted: a message can come
        # after its delete (a webhook redelivered late, WhatsApp's out of order), and is then never answered.
        # Kept in the state dir when the gateway gives one (gateway/deletes_store.py): a restart forgets none.
        self._deleted = deletes if deletes is not None else RememberedDeletes()
        self.scrubs = ScrubBatches(host, self._deleted)  # deleted messages' copies, a batch per transcript
        self.counts = {"queued": 0, "refused": 0, "queue_full": 0, "ignored": 0, "turns": 0}

    # ---- intake -------------------------------------------------------------------------------------

    async def publish(self, msg: InboundMessage) -> PublishOutcome:
        outcome = await self._publish(msg)
        self.counts[outcome] += 1
        return outcome

    async def _publish(self, msg: InboundMessage) -> PublishOutcome:
        channel = self.channels.get((msg.channel, msg.account_id))
        if channel is None:
            log.error("message from unknown channel account %s/%s dropped", msg.channel, msg.account_id)
            return "ignored"
        if msg.change is not None:
            retraction = self._change_waiting(msg)
            if retraction is not None and msg.change == "edited":  # after its answer (gateway/retractions.py)
                if not await edit_recorded(self, *retraction, msg):
                    await retract_deleted.change_elsewhere(self, msg, retraction[0])  # said before a config change
            elif retraction is not None and not await self._retract_recorded(*retraction, msg) and \
                    not await retract_deleted.change_elsewhere(self, msg, retraction[0]):
                await remember_delete(self, msg)
            return "ignored"
        if msg.message_id and (deleter := self._deleted.deleter(
                (msg.channel, msg.account_id, msg.peer_id, msg.message_id))) is not None and deleter in ("", msg.sender_id):
            attachments.discard(msg)
            log.info("a message from %s/%s came after its sender deleted it: not answered", msg.channel, msg.account_id)
            return "ignored"
        try:
            routed = self._chosen(msg) if msg.session_key and msg.channel in self._trusted else self._route(msg)
        except HermitError as e:
            log.error("could not route %s/%s %s: %s", msg.channel, msg.account_id, msg.peer_id, e)
            return "ignored"
        # Routed first: a group's mention patterns are the answering agent's.
        if not await self._admitted(msg, routed.agent_id, channel):
            return "refused"
        if not self._open:  # shutting down: only a sender let in hears it (a stranger or a group hears nothing)
            attachments.discard(msg)
            await send_safely(channel, OutboundMessage(Target.of(msg), NOT_PROCESSED, "notice"))
            return "refused"
        job = _Job(routed.agent_id, routed.session_key, msg.text, msg=msg)
        if not self._enqueue(job):
            attachments.discard(msg)
            await send_safely(channel, OutboundMessage(Target.of(msg), BUSY, "notice"))
            return "queue_full"
        return "queued"

    async def _admitted(self, msg: InboundMessage, agent_id: str, channel: Channel) -> bool:
        """Whether the sender may reach `agent_id` now; a refused message's files are deleted and the sender
        is sent what the policy says (a pairing code, or nothing). Pairing codes are files in the state
        dir, so the check runs off the loop. The web chat's senders are trusted by construction."""
        if msg.channel in self._trusted:
            return True
        admission = await asyncio.to_thread(self._admit, msg, agent_id)
        if admission.allowed:
            return True
        attachments.discard(msg)
        log.info("refused %s/%s sender %s: %s", msg.channel, msg.account_id, msg.sender_id, admission.reason)
        if admission.reply:
            await deliver_text(channel, Target.of(msg), admission.reply, self._chunk, "pairing")
        return False

    # A sender's delete or edit of a message waiting or recorded (gateway/retract_deleted.py).
    _change_waiting = retract_deleted.change_waiting
    _retract_recorded = retract_deleted.retract_recorded
    _later = retract_deleted.later
    _retract = retract_deleted.retract
    _remover = retract_deleted.remover

    def _chosen(self, msg: InboundMessage) -> Routed:
        """The session the web chat chose, in the agent it resolved (AgentHost.holder)."""
        key = msg.session_key
        assert key is not None
        return Routed(self.host.holder(key, msg.session_agent), key)

    def _enqueue(self, job: _Job) -> bool:
        key = (job.agent_id, job.session_key)
        q = self._queues.setdefault(key, _SessionQueue(asyncio.Queue()))
        # Bounded per kind: a member who filled a group's queue had the owner's message there answered "busy".
        job.owner = job.msg is not None and self._kind(job) == "owner"
        if sum(j.owner == job.owner for j in q.waiting) >= self._limit:
            return False
        q.jobs.put_nowait(job)
        q.waiting.append(job)
        if (head := q.waiting[0].place) is not None and head.kind != "owner" and job.owner:
            head.promote()  # the owner's message waits on the turn ahead of it: that one goes first
        if q.worker is None:
            q.worker = asyncio.create_task(self._work(key, q), name=f"session {job.agent_id}/{job.session_key}")
        return True

    # ---- the scheduler's host interface -------------------------------------------------------------

    async def run_turn(self, agent_id: str, session_key: str, text: str, *, heartbeat: bool = False) -> TurnResult:
        """Run a turn in a session through its queue (after what is already queued there); the result
        comes back to the caller and nothing is sent to any channel. Raises ChannelError when the
        gateway is stopping or the session's queue is full, and whatever the turn raised."""
        if not self._open:
            raise ChannelError("the gateway is stopping", "the job runs again at its next schedule")
        fut: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        if not self._enqueue(_Job(agent_id, session_key, text, heartbeat=heartbeat, result=fut)):
            raise ChannelError(f"session {session_key} is busy (its queue is full)", "try again later")
        return await fut

    async def deliver(self, target: Target, text: str) -> None:
        """Send text to a channel conversation, chunked at the channel's limits."""
        channel = self.channels.get((target.channel, target.account_id))
        if channel is None:
            raise ChannelError(f"no channel account {target.channel}/{target.account_id} in this gateway",
                               "configure it under channels.<name>.accounts and restart the gateway: "
                               f"{HowRun.this_process().restart()}")
        if await deliver_text(channel, target, text, self._chunk) == 0 and text.strip():
            raise ChannelError(f"{target.channel}/{target.account_id} could not deliver the message",
                               "see the gateway log for the channel's error")

    def busy(self, session_key: str, agent_id: str | None = None) -> bool:
        """Whether a turn is queued or running in `session_key` (of `agent_id`, or of any agent)."""
        return any(q.running is not None or not q.jobs.empty() for (agent, key), q in self._queues.items()
                   if key == session_key and agent_id in (None, agent))

    def waiting_for_slot(self, agent_id: str, session_key: str) -> bool:
        """Whether the session's next turn waits for one of its agent's turn slots now (the web app says so)."""
        q = self._queues.get((agent_id, session_key))
        head = q.waiting[0] if q is not None and q.waiting else None
        return head is not None and head.place is not None and head.place.state == "waiting"

    # ---- workers ------------------------------------------------------------------------------------

    async def _work(self, key: tuple[str, str], q: _SessionQueue) -> None:
        try:
            while not q.jobs.empty():
                job = q.waiting[0]  # stays findable (a delete, an edit) while it waits for a slot
                # The session's scrub batch before a slot: a turn waiting for it holds none another session needs.
                await self.scrubs.settled(job.agent_id, job.session_key)
                place = await self._slot(job, q)
                try:
                    taken = q.jobs.get_nowait()
                    assert taken is job
                    q.waiting.remove(job)
                    if job.dropped and job.msg is not None:  # deleted by its sender while it waited
                        channel = self.channels.get((job.msg.channel, job.msg.account_id))
                        if channel is not None:  # finished, for a channel's journal: never answered
                            await send_safely(channel, TurnEnd(Target.of(job.msg), f"t{next(self._turn_ids)}",
                                                               "silent"))
                        continue
                    if not self._open:
                        await self._not_processed(job)
                        continue
                    if place is None:  # its scheduler gave up on it (a job's timeout) before it started
                        log.info("a scheduled turn in %s was given up before it started: not run", key[1])
                        continue
                    q.running = job
                    try:
                        # Again (nothing to wait for, mostly): a delete may have come while the turn waited for a slot.
                        if await self.scrubs.settled(job.agent_id, job.session_key):  # no copy of a deleted message
                            await self._run(job)
                        else:
                            await not_run_unscrubbed(self, job)
                    except Exception:  # noqa: BLE001 - supervision boundary: the session's next messages still run
                        log.exception("session %s of agent %s: handling a message failed", key[1], key[0])
                    finally:
                        q.running = None
                        job.finished.set()
                finally:
                    if place is not None:  # however the turn ended, raised or cancelled: the next one may start
                        self._hand_on(q)
                        place.release()
        finally:
            # No await between the empty check and here: a publish cannot slip in unseen.
            q.worker = None
            if q.jobs.empty() and self._queues.get(key) is q:
                del self._queues[key]

    async def _slot(self, job: _Job, q: _SessionQueue) -> Place | None:
        """Wait for one of the agent's turn slots for `job`; None when no turn of it is to run (deleted by its
        sender, the gateway stopping, its scheduler gave up on it), before or while it waited. In the owner's
        place when an owner's message waits behind it in the session (turn_slots.py)."""
        if job.dropped or not self._open or (job.result is not None and job.result.done()):
            if job.place is not None:  # joined the line as the turn before it ended (`_hand_on`)
                job.place.release()
            return None
        place = job.place = job.place or self._slots.place(job.agent_id, self._kind_in(job, q), job.session_key)
        if job.result is not None:  # the scheduler cancels a run at its timeout: a turn not started leaves the line
            job.result.add_done_callback(lambda _: place.withdraw())
        return place if await place.wait() else None

    def _kind_in(self, job: _Job, q: _SessionQueue) -> Kind:
        """`_kind`, or the owner's when an owner's message waits behind `job` in its session (turn_slots.py)."""
        kind = self._kind(job)
        return "owner" if kind != "owner" and any(self._kind(j) == "owner" for j in q.waiting[1:]) else kind

    def _hand_on(self, q: _SessionQueue) -> None:
        """An owner's next turn in the session joins the line before the ended one's slot is given back (or a contact
        waiting elsewhere took it, and the owner's message waited again)."""
        nxt = q.waiting[0] if q.waiting else None
        if nxt and not nxt.place and nxt.msg and not nxt.dropped and self._open and self._kind_in(nxt, q) == "owner":
            nxt.place = self._slots.place(nxt.agent_id, "owner", nxt.session_key)

    def _kind(self, job: _Job) -> Kind:
        """Whose turn it is, for the order slots are given in (turn_slots.py): the owner's (the web chat, the
        main session, an owner's id on a channel, by hermit.yaml as it is now), a scheduled one, or a contact's."""
        msg = job.msg
        if msg is None:
            return "scheduled"
        if msg.channel in self._trusted or is_main_session_key(job.session_key):
            return "owner"
        try:
            return "owner" if self._sender(job.agent_id, msg).owner else "contact"
        except HermitError:  # no such agent (its turn fails as before) or the owners cannot be read now
            return "contact"

    def _turn_limit(self, agent_id: str) -> int:
        runtime = self.host.runtimes.get(agent_id)
        return runtime.agent.settings.max_concurrent_turns if runtime is not None else 1

    async def _run(self, job: _Job) -> None:
        if job.msg is None:
            self.counts["turns"] += 1
            assert job.result is not None
            try:
                result = await self.host.run_turn(job.agent_id, job.session_key, job.text, heartbeat=job.heartbeat)
            except Exception as e:  # noqa: BLE001 - handed to the scheduler, which logs and backs off
                if not job.result.done():  # the caller may have given up waiting
                    job.result.set_exception(e)
            else:
                if not job.result.done():
                    job.result.set_result(result)
            return
        msg = job.msg
        channel = self.channels[(msg.channel, msg.account_id)]
        turn_id = f"t{next(self._turn_ids)}"
        if not await self._admitted(msg, job.agent_id, channel) or not self._still_routed(job, msg):
            # Revoked (or no longer allowed, or no longer an owner) while the message waited: no turn runs.
            # The channel still hears that the message is finished, so a journal (Telegram's) lets it go.
            attachments.discard(msg)
            log.info("dropped a message queued in %s before its sender lost access", job.session_key)
            await send_safely(channel, TurnEnd(Target.of(msg), turn_id, "silent"))
            return
        self.counts["turns"] += 1
        text = job.text
        images: tuple[ImagePart, ...] = ()
        files: tuple[FiledFile, ...] = ()
        if msg.attachments:
            msg, text, images, files = await asyncio.to_thread(self._file, job, msg)
        await run_and_reply(
            channel, Target.of(msg), turn_id,
            lambda on_event: self.host.run_turn(job.agent_id, job.session_key, text, on_event=on_event,
                                                sender=self._sender(job.agent_id, msg),
                                                ref=message_ref(msg, job.session_key),
                                                images=images, files=files),
            self._chunk, may_send=lambda: self._may_still_reply(job, job.msg or msg, channel), hint_for=self.hint_for)

    def _file(self, job: _Job,
              msg: InboundMessage) -> tuple[InboundMessage, str, tuple[ImagePart, ...], tuple[FiledFile, ...]]:
        """File the message's files into the session's inbox; the turn's text tells of each, and its images
        are attached when the agent's model reads images (attachments.for_model). The turn records what was
        filed with the message, for its sender's delete (attachments.remove_filed)."""
        runtime = self.host.runtime(job.agent_id)
        with job.guard:
            if job.deleted:  # by its sender, as its turn was starting: its files are not kept
                attachments.discard(msg)
                return replace(msg, attachments=()), job.text, (), ()
        msg, looks = attachments.filed(msg, runtime, job.session_key)
        files = attachments.filed_files(msg, looks, runtime.confinement.roomed(job.session_key))
        with job.guard:
            deleted = job.deleted
            job.filed = () if deleted else files
        if deleted:  # while they were being filed
            attachments.remove_filed(runtime, job.session_key, files)
            files = ()
        text, images = attachments.for_model(job.text, msg, looks, reads_images=runtime.model.profile.supports_images)
        return msg, text, images, files

    def _sender(self, agent_id: str, msg: InboundMessage) -> Sender:
        """Who wrote a message: recorded with it in a group's transcript, named in a DM's memory notes. The
        name is the member's own choice, so it is cleaned here, where it comes in, to text that cannot
        imitate a label (speakers.make_sender); the runtime marks the owner's ids (hermit.yaml as it is now)."""
        return self.host.runtime(agent_id).channel_sender(msg.channel, msg.account_id, msg.sender_id,
                                                          msg.sender_name, msg.sender_username)

    async def _may_still_reply(self, job: _Job, msg: InboundMessage, channel: Channel) -> bool:
        """Whether a turn's reply may still go to its sender, asked when the turn ends: revoking must count at once,
        and a turn runs for seconds to minutes (a slow model, a tool loop). An owner removed from `owners` while
        their turn ran in the main session must not get the reply it made from MEMORY.md, nor a contact removed
        from `allow_from` (or `hermit pairing revoke`d) theirs. Refused: the reply stays in the transcript, the
        sender gets only what the policy says to a stranger (`_admitted`: a code once, or nothing), as a message
        of theirs still waiting would (jobs are asked the same before their reply is sent)."""
        if msg.channel in self._trusted:
            return True
        if await self._admitted(msg, job.agent_id, channel):
            try:
                routed = self._route(msg)
            except HermitError:
                routed = None
            # Moved by a change that took nothing from them (dm_scope): the same agent, and the turn's session was
            # not the main one, or they are still its owner.
            if routed is not None and routed.agent_id == job.agent_id and (
                    routed.session_key == job.session_key or not is_main_session_key(job.session_key)
                    or retractions.owner_sent(self, job.agent_id, msg)):
                return True
        log.info("a reply in %s was not sent: its sender lost access while the turn ran", job.session_key)
        return False

    def _still_routed(self, job: _Job, msg: InboundMessage) -> bool:
        """Whether a queued message would still go to the session it waits in: an owner removed from
        `owners` while it waited may still be let in as a contact, but never into the owner's session.
        The web chat's sessions are the token holder's own choice."""
        if msg.channel in self._trusted:
            return True
        try:
            routed = self._route(msg)
        except HermitError as e:
            log.info("message queued in %s cannot be routed now: %s", job.session_key, e)
            return False
        if routed == Routed(job.agent_id, job.session_key):
            return True
        log.info("message queued in %s would now go to %s of agent %s: not run", job.session_key,
                 routed.session_key, routed.agent_id)
        return False

    async def _not_processed(self, job: _Job) -> None:
        if job.result is not None and not job.result.done():
            job.result.set_exception(ChannelError("the gateway stopped before this turn ran",
                                                  "it runs again at its next schedule"))
        elif job.msg is not None:
            channel = self.channels.get((job.msg.channel, job.msg.account_id))
            if channel is None or not channel.capabilities.replays:  # nothing will ask for its files again
                attachments.discard(job.msg)
            # Only a sender still let in hears it: one revoked while its message waited hears nothing (and
            # is sent no pairing code at shutdown).
            if channel is not None and (job.msg.channel in self._trusted or (
                    await asyncio.to_thread(self._admit, job.msg, job.agent_id)).allowed):
                await send_safely(channel, OutboundMessage(Target.of(job.msg), NOT_PROCESSED, "notice"))

    # ---- shutdown -----------------------------------------------------------------------------------

    def close_intake(self) -> None:
        """Stop taking messages: new ones are answered "not processed", queued ones are not started."""
        self._open = False
        self._slots.close()  # turns waiting for a slot are not started either

    def running(self) -> int:
        return sum(1 for q in self._queues.values() if q.running is not None)

    async def drain(self, timeout: float) -> bool:
        """Wait for the session workers to finish (running turns complete, queued ones are answered) and
        the retractions of deleted messages; True when all did within `timeout`."""
        workers: list[asyncio.Task[None]] = [q.worker for q in self._queues.values() if q.worker is not None]
        self.scrubs.hurry()
        workers += [*self._retractions, *self.scrubs.tasks()]
        if not workers:
            return True
        _, pending = await asyncio.wait(workers, timeout=timeout)
        return not pending

    def status(self) -> dict[str, Any]:
        """Live numbers (`waiting`: messages queued behind a running turn now) and, under `since_start`,
        lifetime counters: `accepted` is every message ever queued. They are kept apart because a
        lifetime count under the live key's name once showed as "waiting"."""
        return {"sessions_active": len(self._queues), "turns_running": self.running(),
                "waiting": sum(q.jobs.qsize() for q in self._queues.values()), "queue_limit": self._limit,
                "turn_slots": self._slots.status(),
                "accepting": self._open,
                "since_start": {"accepted": self.counts["queued"],
                                **{k: v for k, v in self.counts.items() if k != "queued"}}}


