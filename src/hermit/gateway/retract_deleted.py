"""A sender's delete or edit of a message the bus holds (gateway/bus.py): one waiting in its session's queue is
dropped (a delete: no turn, its files deleted) or runs with its new text (an edit); one its session's transcript
holds is retracted there before publish returns (a delete), or once the turn that had it in its context is over.
An edit after the answer is gateway/retractions.py's `edit_recorded`; a delete that found nothing is remembered
(`remember_delete`, the same module).

A change of settings moves a chat to another session (`session.dm_scope`, an owner removed from `owners` or added,
`bindings` pointing it at another agent): the message was said in the session the config of its time routed it to,
and a delete or an edit looked only in the one the config routes the chat to now — the words taken back stayed
where they were said (an ex-owner's PIN in the owner's main session, read by the owner's model every turn). So one
found nowhere now is looked for in the chat's other sessions (`earlier_routes`): the same chat's keys under every
DM scope, owner or not, in every agent this gateway runs — sessions that exist only, each naming this chat (a DM's
main-session line names its chat: `message_ref`), so no one's delete reaches another chat's message. A main session
is looked in only when one of its transcripts names the chat at all (`_chat_said_in`, remembered per file version):
anyone may send deletes, and a stranger's flood of them scanned a 5 MB main transcript each (500: 3.4 s CPU).

These are the Bus's methods (`Bus._change_waiting`, `_retract_recorded`, `_later`, `_retract`, `_remover`), kept
here so bus.py holds the queues and turns; each takes the bus first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, get_args

from hermit.agent.routing import RouteInput, session_key_for
from hermit.channels.base import InboundMessage
from hermit.config.schema import DmScope
from hermit.errors import HermitError
from hermit.gateway import attachments, retractions
from hermit.gateway.deletes_store import Scrub
from hermit.gateway.retractions import message_ref, ref_in
from hermit.messages import FiledFile
from hermit.sessions.files import open_own, read_fd
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.retraction import ended_transcripts, ref_bytes, retract_in
from hermit.sessions.store import SessionStore

if TYPE_CHECKING:
    from hermit.gateway.bus import Bus, Routed, _Job

log = logging.getLogger("hermit.gateway")


def change_waiting(bus: Bus, msg: InboundMessage) -> tuple[Routed, str, _Job | None] | None:
    """A message its sender deleted or edited on the platform while it waits for its turn: a deleted one is
    dropped (no turn, its files deleted), an edited one runs with the text as it is now, as its sender
    expects of a message not answered yet. One whose turn has started is left: it is being answered. For a
    delete or an edit of one not waiting: what `_retract_recorded` (`edit_recorded`) needs to find it."""
    if not msg.message_id:
        return None
    try:
        routed = bus._route(msg)
    except HermitError:
        return None
    q = bus._queues.get((routed.agent_id, routed.session_key))
    found = False
    for job in q.waiting if q is not None else ():
        m = job.msg
        # A delete may name no author (Discord's, unless cached; a moderator may delete anyone's).
        if m is None or job.dropped or (m.channel, m.account_id, m.peer_id, m.message_id) != (
                msg.channel, msg.account_id, msg.peer_id, msg.message_id) or (
                msg.sender_id != m.sender_id and (msg.change == "edited" or msg.sender_id)):
            continue
        found = True
        if msg.change == "deleted":
            job.dropped = True
            if job.place is not None:  # waiting for a slot: its place goes to the next turn
                job.place.withdraw()
            attachments.discard(m)
            log.info("a message waiting in %s was deleted by its sender: not answered", routed.session_key)
        else:
            job.text, job.msg = msg.text, replace(m, text=msg.text, mentioned=m.mentioned or msg.mentioned)
            log.info("a message waiting in %s was edited by its sender: its new text runs", routed.session_key)
    if found or routed.agent_id not in bus.host.runtimes:
        return None
    # Answered, or being answered. One taken from the queue whose turn has not recorded it yet (its admission
    # check, its files being filed, a flush before it) is waited for: looked for before, it was not found,
    # and its text stayed in use.
    running = q.running if q is not None else None
    starting = running if running is not None and running.msg is not None and (
        running.msg.channel, running.msg.account_id, running.msg.peer_id, running.msg.message_id) == (
        msg.channel, msg.account_id, msg.peer_id, msg.message_id) else None
    ref = message_ref(msg, routed.session_key)
    return (routed, ref, starting) if ref is not None else None


async def retract_recorded(bus: Bus, routed: Routed, ref: str, starting: _Job | None, msg: InboundMessage) -> bool:
    """Retract a deleted message the session's transcript holds now, before publish returns: the channel
    then tells the platform the event was handled (Slack's ack and saved event ids; Discord and WhatsApp
    never send it again), so a retraction left for later (after a running turn) was lost when Hermit was
    killed meanwhile. The entry
    may come before lines the running turn still writes: a `retracted` entry hides its message wherever it
    stands (sessions/entries.py), so one whose turn is starting (`starting`) gets it now too, ahead of its line;
    it is looked for again once its turn is over (the turn may have started a new session first). A delete that
    comes after its session ended (/new, a daily or idle reset) retracts it in the key's ended transcript
    (sessions/retraction.py). The files the message brought are deleted first (attachments.remove_filed): a
    kill between the two leaves none of them. Those of one whose turn is starting are not filed, or deleted
    now if they were (`_file`): left for after its turn, a kill during the turn kept them. False when nothing
    of it was found."""
    runtime = bus.host.runtime(routed.agent_id)
    remove = bus._remover(routed)
    after = starting.finished if starting is not None else None
    wants: list[Scrub] = []
    owner = retractions.owner_sent(bus, routed.agent_id, msg)

    def now() -> bool:
        if starting is not None:
            with starting.guard:
                starting.deleted, early = True, starting.filed
            if early:
                remove(early)
        record = runtime.store.get(routed.session_key)
        if record is None:  # no session (a refused sender's chat): nothing to retract, nothing written
            return False
        # Parsed only when its bytes name the message: anyone may send deletes, each was a parse of the whole
        # transcript (35 ms for 5 MB), and a flood of them held the threads the owner's turns need.
        if after is not None:
            return retract_in(runtime.store.open_transcript(record), ref, remove, ahead=True)
        if (here := ref_in(runtime.store.transcript_path(record.session_id), msg, ref, owner)) is not None:
            # The scrub is wanted in the state dir before the entry hides the message: a kill in between leaves
            # a want that finds nothing (harmless), never a hidden message whose copies no start scrubs.
            scrub = (routed.agent_id, routed.session_key, record.session_id)
            try:
                bus._deleted.want_scrub(scrub)
                wants.append(scrub)  # its copies go in the session's next batch (gateway/scrub_batch.py)
            except OSError:  # not in the state dir: scrubbed now, as a kill would otherwise leave it
                log.exception("could not write a delete's scrub to the state dir: scrubbing it now")
            if retract_in(runtime.store.open_transcript(record), here, remove, scrub=not wants):
                return True
        return runtime.retract_ended(routed.session_key, ref, remove, current=record.session_id) or (
            (also := retractions.old_ref(msg, ref, owner)) is not None
            and runtime.retract_ended(routed.session_key, also, remove, current=record.session_id))

    try:
        try:
            async with bus._looking:  # one at a time: a flood of deletes holds one of the threads, not all
                found = await asyncio.to_thread(now)
        finally:
            for scrub in wants:  # held or not (named in a reply only), raised or not: the batch settles it
                bus.scrubs.want(scrub)
        if found:
            log.info("a message in %s was deleted by its sender: its text is retracted", routed.session_key)
            q = bus._queues.get((routed.agent_id, routed.session_key))
            running = q.running if q is not None else None
            if after is None and running is not None:
                # A turn running now had the message in its context and may quote it in what it still
                # writes: once it is over, the retraction runs again and scrubs those copies too (the
                # scrub keeps what it found: sessions/scrub.py).
                bus._later(routed, ref, running.finished)
            return True
    except Exception:  # noqa: BLE001 - the platform's event is handled; the later look may still do it
        log.exception("could not retract a deleted message in %s", routed.session_key)
        return True
    if after is None:
        return False  # not in the session now, and no turn of it is starting: nothing of it to retract
    bus._later(routed, ref, after)
    return True


def later(bus: Bus, routed: Routed, ref: str, after: asyncio.Event) -> None:
    """Retract `ref` again once `after` is set (a turn of the session is over)."""
    task = asyncio.create_task(bus._retract(routed, ref, after))
    bus._retractions.add(task)
    task.add_done_callback(bus._retractions.discard)


async def retract(bus: Bus, routed: Routed, ref: str, after: asyncio.Event | None = None) -> None:
    runtime = bus.host.runtime(routed.agent_id)
    try:
        if after is not None:
            await after.wait()
        # A chat without a session (a refused sender's, a thread never answered in) has nothing to retract,
        # and retracting takes the session's lock, whose file stays: one per such chat, without end.
        if await asyncio.to_thread(runtime.store.get, routed.session_key) is None:
            return
        if await asyncio.to_thread(runtime.retract, routed.session_key, ref, bus._remover(routed)):
            log.info("a message in %s was deleted by its sender: its text is retracted", routed.session_key)
    except Exception:  # noqa: BLE001 - a background task: logged, the gateway goes on
        log.exception("could not retract a deleted message in %s", routed.session_key)


def remover(bus: Bus, routed: Routed) -> Callable[[Sequence[FiledFile]], None]:
    runtime = bus.host.runtime(routed.agent_id)
    return lambda files: attachments.remove_filed(runtime, routed.session_key, files)


def earlier_routes(bus: Bus, msg: InboundMessage, now: Routed) -> list[Routed]:
    """The sessions other than `now` that `msg`'s chat may have been routed to under an earlier config (see the
    module), existing ones only: each agent this gateway runs, each DM scope, the sender an owner or not."""
    from hermit.gateway.bus import Routed

    if msg.channel in bus._trusted:
        return []  # the web chat names its session itself
    inp = RouteInput(msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.thread_id, msg.topic_id,
                     msg.guild_id, msg.team_id)
    chat = ref_bytes(f"{msg.channel}:{msg.account_id}:dm:{msg.peer_id}:")[:-1]  # a main-session line's ref, open
    out: list[Routed] = []
    for agent_id, runtime in bus.host.runtimes.items():
        keys = {session_key_for(agent_id, scope, replace(inp, sender_is_owner=owner))
                for scope in get_args(DmScope) for owner in (True, False)}
        for key in sorted(keys):
            if (agent_id, key) == (now.agent_id, now.session_key) or (record := runtime.store.get(key)) is None:
                continue
            if is_main_session_key(key) and not _chat_said_in(runtime.store, key, record.session_id, chat):
                continue
            out.append(Routed(agent_id, key))
    return out


_SAID: OrderedDict[tuple[str, int, int, int, bytes], bool] = OrderedDict()
_SAID_KEPT = 4096
_said_guard = threading.Lock()


def _chat_said_in(store: SessionStore, key: str, current: str, chat: bytes) -> bool:
    """Whether any transcript of `key` (the current one, `current`, and the ended ones within retraction's bounds)
    holds a line whose ref starts with `chat`; remembered per file version (path, inode, size, mtime), so a flood
    of one chat's deletes reads each file once. A file that cannot be read counts as naming it."""
    for path in [store.transcript_path(current), *ended_transcripts(store, key, current)]:
        try:
            st = os.stat(path)
        except OSError:
            continue
        k = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, chat)
        with _said_guard:
            said = _SAID.get(k)
        if said is None:
            try:
                fd, seen = open_own(path, os.O_RDONLY, "the transcript")
                try:
                    said = chat in read_fd(fd, seen.st_size)
                finally:
                    os.close(fd)
            except (OSError, HermitError):
                said = True
            with _said_guard:
                _SAID[k] = said
                while len(_SAID) > _SAID_KEPT:
                    _SAID.popitem(last=False)
        if said:
            return True
    return False


async def change_elsewhere(bus: Bus, msg: InboundMessage, now: Routed) -> bool:
    """Apply a delete or an edit that found nothing in `now` (the chat's session by the config in force) in the
    chat's earlier sessions (`earlier_routes`); True when one of them held the message."""
    try:
        routes = await asyncio.to_thread(earlier_routes, bus, msg, now)
    except HermitError:  # a key this chat cannot have (an id a key cannot carry): nothing earlier either
        return False
    for routed in routes:
        ref = message_ref(msg, routed.session_key)
        if ref is None:
            return False
        if msg.change == "edited":
            if await retractions.edit_recorded(bus, routed, ref, None, msg):
                return True
        elif await bus._retract_recorded(routed, ref, None, msg):
            return True
    return False
