"""What a sender takes back after their message was queued or answered, besides a delete's retraction (gateway/bus.py).

An edit after the answer (`edit_recorded`). On Telegram, which never tells bots of deletes, editing is the only way a
person takes words back: "my PIN is 4711-2290" edited to "my PIN is (removed)" once the bot answered. An edit of a
message the session's transcript holds, by the sender its line names, writes an `edited` entry (sessions/entries.py):
the model and every reader see the new text, marked "(edited)", from then on; no turn runs for it. When the new text
drops words the old one had, the transcript is written to the state dir as one to scrub (deletes.json's `scrubs`),
all before publish returns (the channel then acknowledges the update), and the scrub batch (gateway/scrub_batch.py)
rewrites the message's line with its new text and scrubs the copies of what the old text alone brought and the new
one does not hold — replies, tool calls, summaries, notes — by a delete's copy rule (sessions/scrub.py), never a user
message's words. A turn running in the session then is waited for first: it had the old text and may still quote it.
An edit that only adds words changes the record only. Another sender's edit of the message's id changes nothing.
An edit of a message whose session ended since (/new, a daily or idle reset) is looked for in the key's ended
transcripts, as a late delete is (sessions/retraction.py's bounds); what /new saved of that session to memory loses
what the edit dropped too, by the same rule (gateway/scrub_batch.py `saved_scrub`).

A delete that found nothing is remembered for its message coming later (`remember_delete`).

How a transcript names a platform message (`message_ref`): by channel, account and the platform's id — and, for a DM
in the agent's main session (dm_scope main: every owner's DM chat in one session), by its chat too: Telegram counts
message ids per chat, so owner B's delete or edit of their message 5 retracted or edited owner A's message 5. A
transcript written before names a main session's DM message without its chat (`ref_in`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from hermit.channels.base import InboundMessage, OutboundMessage, Target
from hermit.errors import ChannelError, SessionError
from hermit.gateway import attachments
from hermit.gateway.deletes_store import Scrub
from hermit.gateway.replies import send_safely
from hermit.gateway.scrub_batch import saved_scrub
from hermit.sessions.files import read_own
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.retraction import edit_in, ended_transcripts, names, ref_bytes, scrub_retracted
from hermit.sessions.scrub import read_objs
from hermit.sessions.store import SessionRecord, SessionStore
from hermit.sessions.transcript import Transcript

if TYPE_CHECKING:
    from hermit.gateway.bus import Bus, Routed, _Job

log = logging.getLogger("hermit.gateway")


def message_ref(msg: InboundMessage, session_key: str) -> str | None:
    """How the transcript of `session_key` names the platform message `msg` (messages.UserMessage.ref), for its
    sender's delete or edit: see the module."""
    if not msg.message_id:
        return None
    if msg.peer_kind == "dm" and is_main_session_key(session_key):
        return f"{msg.channel}:{msg.account_id}:dm:{msg.peer_id}:{msg.message_id}"
    return f"{msg.channel}:{msg.account_id}:{msg.message_id}"


def ref_in(path: Path, msg: InboundMessage, ref: str, owner: bool) -> str | None:
    """The ref by which the transcript at `path` holds the message: `ref`, or the one a transcript written before
    refs named their chat (a main session's DM) holds it by — the old one, when a user message holds it whose
    sender is the DM's peer or, an owner's, not recorded (such a message's chat is not known: an owner's delete or
    edit finds it as before). `owner`: `msg`'s sender is an owner (`owner_sent`) — a contact's message 5 in a main
    session shared with contacts was taken for an owner's message 5, its edit written over the owner's words (shown
    to the model as the owner's) and its delete hiding them. None when its bytes name neither (read once, parsed
    only for the old one: anyone may send deletes and edits); `ref` when it cannot be read, for the caller's own
    open to say why."""
    try:
        data, _ = read_own(path, "the transcript")
    except (OSError, SessionError):
        return ref
    legacy = f"{msg.channel}:{msg.account_id}:{msg.message_id}"
    if ref_bytes(ref) in data:
        return ref
    if legacy == ref or ref_bytes(legacy) not in data:
        return None
    try:
        objs = read_objs(path)
    except (OSError, SessionError):
        return None
    for obj in objs:
        message = obj.get("message") if obj is not None and obj.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "user" and message.get("ref") == legacy and (
                owner if not isinstance(sender := message.get("sender"), dict) else str(sender.get("id")) == msg.peer_id):
            return legacy  # an owner's has no sender: which chat it came from is not known (as before)
    return None


def old_ref(msg: InboundMessage, ref: str, owner: bool) -> str | None:
    """The old ref (`ref_in`) an owner's delete or edit looks for in the key's ended transcripts when `ref` is in
    none of them: a main session ended before refs named their chat holds an owner's DM message by it (a PIN sent
    the day before the upgrade, deleted the day after, was found by neither). None when there is none to look for,
    or `msg`'s sender is not an owner (their message 5 is not the owner's)."""
    legacy = f"{msg.channel}:{msg.account_id}:{msg.message_id}"
    return legacy if owner and legacy != ref else None


def owner_sent(bus: Bus, agent_id: str, msg: InboundMessage) -> bool:
    """Whether `msg`'s sender is one of the owner's (hermit.yaml as it is now: the runtime's owner check, which the
    gateway always sets; a runtime with none tells nobody apart, as before). A delete naming no author (Discord's,
    uncached) in a DM is its peer's: the chat's."""
    runtime = bus.host.runtime(agent_id)
    return runtime.owner_check is None or runtime.channel_sender(
        msg.channel, msg.account_id, msg.sender_id or msg.peer_id, None, msg.sender_username).owner


async def edit_recorded(bus: Bus, routed: Routed, ref: str, starting: _Job | None, msg: InboundMessage) -> bool:
    """An edit of a message not waiting in its queue (answered, or its turn starting: `starting`): see the module.
    True when the session (its current or an ended transcript) holds the message, or its turn is starting."""
    if starting is not None and (starting.msg is None or starting.msg.sender_id != msg.sender_id):
        return True  # another sender's edit of the message whose turn is starting: not theirs to change
    runtime = bus.host.runtime(routed.agent_id)
    q = bus._queues.get((routed.agent_id, routed.session_key))
    after = q.running.finished if q is not None and q.running is not None else None
    owner = owner_sent(bus, routed.agent_id, msg)
    remove = bus._remover(routed)

    def now() -> Scrub | None:
        record = runtime.store.get(routed.session_key)
        if record is None:
            return None
        path = runtime.store.transcript_path(record.session_id)
        found = ref if starting is not None else ref_in(path, msg, ref, owner)
        here = found or ref  # the current transcript names it (found), or an ended one may
        transcript = _holding(runtime.store, routed.session_key, record, here, found is not None)
        if transcript is None and starting is None and (also := old_ref(msg, ref, owner)) is not None:
            transcript = _holding(runtime.store, routed.session_key, record, here := also, False)
        if transcript is None:
            return None
        held.append(True)
        path = transcript.path
        scrub = (routed.agent_id, routed.session_key, transcript.header.session_id)

        def dropping() -> None:
            """Wanted in the state dir before the entry is written: a kill in between leaves a want that finds
            nothing (harmless), never an edit whose dropped words no start scrubs."""
            try:
                bus._deleted.want_scrub(scrub)
                wants.append(scrub)
            except OSError:  # not in the state dir: scrubbed now, as a kill would otherwise leave it
                log.exception("could not write an edit's scrub to the state dir: scrubbing it now")

        if not edit_in(transcript, here, msg.sender_id, msg.text, ahead=starting is not None, dropping=dropping,
                       remove=remove):
            return None  # not recorded, not theirs, or only words added: the entry is the whole change
        if not wants and after is None:
            scrub_retracted(path, routed.session_key, saved_scrub(runtime, routed.session_key, scrub[2]))
            return None
        return scrub

    wants: list[Scrub] = []
    held: list[bool] = []
    scrub: Scrub | None = None
    try:
        async with bus._looking:  # one at a time, with deletes: a flood of them holds one of the threads, not all
            scrub = await asyncio.to_thread(now)
    except Exception:  # noqa: BLE001 - the platform's event is handled; the gateway goes on
        log.exception("could not apply an edit of an answered message in %s", routed.session_key)
    finally:
        for wanted in wants:
            if wanted != scrub:  # it raised (or was cancelled: a stop) after the want: the batch settles it
                bus.scrubs.want(wanted, after)
    if scrub is not None:
        log.info("a message in %s was edited by its sender after its answer: what it dropped is scrubbed",
                 routed.session_key)
        bus.scrubs.want(scrub, after)
    return bool(held) or starting is not None


def _holding(store: SessionStore, key: str, record: SessionRecord, ref: str, current: bool) -> Transcript | None:
    """The key's transcript that holds `ref`: the current one (`current`: it is known to, or its turn is starting),
    or one of the ended ones (answered before its session ended: /new, a daily or idle reset). Parsed only when its
    bytes name the message (anyone may send edits, as deletes: `names`)."""
    if current or names(store.transcript_path(record.session_id), ref):
        return store.open_transcript(record)
    return next((t for p in ended_transcripts(store, key, record.session_id)
                 if names(p, ref) and (t := Transcript.open(p, clock=store.clock, fsync=store.fsync)
                                       ).header.session_key == key), None)


async def remember_delete(bus: Bus, msg: InboundMessage) -> None:
    """A delete that found nothing, for its message coming later: the last DELETES_KEPT, at most
    DELETES_PER_SENDER of one sender on a channel account (of deletes naming nobody: in one chat) — anyone may
    send deletes (a stranger's made-up ids are never checked), and a flood of theirs evicted the one a member's
    late message needed, which was answered.
    Written to the state dir before publish returns, as a retraction is: the channel then tells the platform
    the delete was handled, and a restart in between forgot it. One at a time, as deletes are looked for: a
    flood of them holds one of the threads."""
    key = (msg.channel, msg.account_id, msg.peer_id, msg.message_id)
    try:
        async with bus._looking:
            await asyncio.to_thread(bus._deleted.remember, key, msg.sender_id)
    except OSError:  # remembered in memory: a restart before its message comes forgets it
        log.exception("could not write a delete from %s/%s to the state dir", msg.channel, msg.account_id)


# A turn not run because its session still holds copies of a deleted message (`not_run_unscrubbed`).
UNSCRUBBED = ("Hermit could not yet take a deleted or edited message out of this conversation's record, so it did "
              "not answer this one (the owner's `hermit logs` says why) — please send it again in a while.")


async def not_run_unscrubbed(bus: Bus, job: _Job) -> None:
    """The session's transcript still holds copies of a message deleted or edited in it (its scrub failed twice,
    gateway/scrub_batch.py): the turn would send them to the model, so it is not run; its sender is told."""
    log.error("session %s of agent %s: a turn was not run: the copies of a message deleted or edited in it could "
              "not be scrubbed from its transcript (the error above says why); tried again at its next message "
              "and at the next start", job.session_key, job.agent_id)
    if job.result is not None and not job.result.done():
        job.result.set_exception(ChannelError("the session's deleted messages could not be scrubbed",
                                              "see `hermit logs`; it runs again at its next schedule"))
    elif job.msg is not None:
        channel = bus.channels.get((job.msg.channel, job.msg.account_id))
        if channel is None or not channel.capabilities.replays:  # nothing will ask for its files again
            attachments.discard(job.msg)
        if channel is not None:
            await send_safely(channel, OutboundMessage(Target.of(job.msg), UNSCRUBBED, "notice"))
