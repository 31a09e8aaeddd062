"""What the web app shows of stored sessions: the session list (kind, last activity, whether the page may
continue it) and one session's conversation.

Read from sessions.json and the JSONL transcript (the truth), so a reloaded page, a reconnect or
another tab sees exactly what was recorded, including a turn the gateway marked interrupted and a turn
that failed (its error is kept in the transcript and shown).

Which sessions the owner may continue from the page: the main session, the owner's own DMs (a DM the
owner's messages are routed to: console.Console.owner_dm) and sessions started at the CLI under a name of one's own
(`hermit chat --session test2`: only the owner has the CLI). Everything else is read-only there:
writing into a group's, a contact's, a cron job's or a sub-agent's session would put the owner's words
into that chat's transcript, answered in its sandbox, and seen by nobody in that chat.

A photo sent with a user turn is kept in the transcript as an image part (gateway/attachments.py); asked for
(`images`, for the owner's own sessions only), a user item names those images (`imageRefs`: `images: [{mediaType,
sha256, size}]`, the SHA-256 of the image's bytes) and the page brings each one once with chat.image
(session_image: only an image of that session's own user turns), keeping it for the tab's life — opening a
session again sends no photo twice. Where each photo is in that version of the transcript is left in the gateway's
image_index.PhotoIndex by the history call (or the first chat.image), so each chat.image reads and decodes one. Without `imageRefs` (a page loaded before the gateway had chat.image), the
images come as stored (`images: [{mediaType, data}]`, base64: Hermit has no image library to make thumbnails
with; the page draws them small), the newest first within HISTORY_IMAGE_BUDGET per response — an older one past
it comes as `{mediaType, size, omitted: true}`. Only JPEG, PNG, GIF and WebP ever do.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, cast

from hermit.agent.speakers import recorded_sender, speaker
from hermit.config.schema import SessionConfig
from hermit.errors import SessionError
from hermit.gateway.image_index import (
    Inbox,
    PhotoIndex,
    Photos,
    digest,
    drawable,
    index_photos,
    photo_at,
    upload_image,
    version_of,
)
from hermit.messages import FiledFile, stored_text
from hermit.sessions.background import HEARTBEAT_MARK, BeatLines, is_silent
from hermit.sessions.entries import ENDED_TYPE, parse_transcript
from hermit.sessions.files import open_own, read_own
from hermit.sessions.keys import ChatType, SessionKey, SessionKind, is_main_session_key, parse_session_key
from hermit.sessions.reset import is_expired, resolve_reset_policy
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import (
    CustomEntry,
    Entry,
    MessageEntry,
    format_timestamp,
    parse_timestamp,
    read_transcript,
)

log = logging.getLogger("hermit.gateway.webchat")

# A parsed DM key -> whether it is the owner's own DM session (what the owner's DMs are routed to).
OwnerCheck = Callable[[SessionKey], bool]

READ_ONLY = {
    "group": "a group chat: what you typed here would enter the group's conversation and be answered in its "
             "sandbox, yet nobody in the group would see it. Read it here; answer in the group.",
    "dm": "a contact's DM: your words would become part of their conversation with the assistant. Read it "
          "here; to make them an owner, list them under the channel account's owners.",
    "cron": "a scheduled job's session: its next run would take your words as part of the job. Run the job "
            "from Operations instead.",
    "subagent": "a sub-agent's run: it belongs to the task that started it.",
}


def describe_session(key: str, owner_dm: OwnerCheck) -> dict[str, Any]:
    """The kind of a session, a short label, and `mode`: "chat" (the page may continue it) or "read-only"
    (with `why`)."""
    try:
        k = parse_session_key(key)
    except SessionError:  # only the CLI names sessions freely, and only the owner has the CLI
        return {"kind": "cli", "label": key, "mode": "chat"}
    where = f" · thread {k.thread_id}" if k.thread_id else f" · topic {k.topic_id}" if k.topic_id else ""
    if k.kind is SessionKind.MAIN:
        return {"kind": "main", "label": "Main session" + (f" ({k.agent_id})" if k.agent_id != "main" else ""),
                "mode": "chat"}
    if k.kind is SessionKind.DM and k.peer_id is not None:
        label = f"DM {k.channel + ' ' if k.channel else ''}{k.peer_id}{where}"
        if owner_dm(k):
            return {"kind": "dm", "label": label, "mode": "chat", "owner": True}
        return {"kind": "dm", "label": label, "mode": "read-only", "why": READ_ONLY["dm"]}
    if k.kind in (SessionKind.GROUP, SessionKind.CHANNEL):
        noun = "group" if k.kind is SessionKind.GROUP else "channel"
        return {"kind": "group", "label": f"{k.channel} {noun} {k.peer_id}{where}", "mode": "read-only",
                "why": READ_ONLY["group"]}
    if k.kind is SessionKind.CRON:
        return {"kind": "cron", "label": f"cron job {k.job_id}", "mode": "read-only", "why": READ_ONLY["cron"]}
    return {"kind": "subagent", "label": f"sub-agent {k.run_id}", "mode": "read-only", "why": READ_ONLY["subagent"]}


def list_sessions(stores: Mapping[str, SessionStore], owner_dm: OwnerCheck) -> list[dict[str, Any]]:
    """Every agent's sessions, most recently updated first."""
    out: list[dict[str, Any]] = []
    for agent_id, store in stores.items():
        for r in store.list():
            out.append({"key": r.key, "agentId": agent_id, "sessionId": r.session_id,
                        "updatedAt": format_timestamp(r.updated_at), "main": is_main_session_key(r.key),
                        "channel": r.origin_channel, **describe_session(r.key, owner_dm)})
    out.sort(key=lambda s: str(s["updatedAt"]), reverse=True)
    return out


def _filed(raw: Any) -> list[str]:
    """The files recorded with a user message (`inbox/<name>`, as its file lines name them): the page draws a
    trailing "(file received with this message: …)" line as Hermit's note only for one of these — the sender can
    type such a line too."""
    files = raw if isinstance(raw, list) else []
    return [f"inbox/{f.name}" for f in map(FiledFile.from_dict, files) if f is not None]


def _sender(raw: Any) -> dict[str, Any] | None:
    """Who wrote a group's message, as recorded with it (agent/speakers.py): id, name and whether it was the
    owner, with `label` ("Gus (3001)", "Ann (1001) — the owner") for the page to show. None for a message
    that recorded no sender (a DM, the main session, older transcripts)."""
    who = recorded_sender(raw)
    return None if who is None else {"id": who.id, "name": who.name, "owner": who.owner, "label": speaker(who)}


# Base64 characters of images in one chat.history response: the newest photos of a session (an image in a
# transcript has at most 5 MiB of base64: attachments.MAX_IMAGE_BYTES).
HISTORY_IMAGE_BUDGET = 12 * 1024 * 1024


def chat_history(store: SessionStore, session_key: str, limit: int, session_id: str | None = None, *,
                 images: bool = False, image_refs: bool = False, photos: PhotoIndex | None = None,
                 inbox: Inbox | None = None) -> dict[str, Any]:
    """The session's user/assistant messages, newest `limit` items (`total`: how many there are). With
    `session_id`, that session of the key, current or ended (SessionError when the sessions dir holds no such
    transcript of this key: a page names only what sessions.list gave it). `images`: with the images of its
    user turns (HISTORY_IMAGE_BUDGET), for the owner's own sessions only (the caller's to decide); with
    `image_refs`, only named (`{mediaType, sha256, size}`: session_image brings one), with no budget, and where
    each is left in `photos` for session_image (gateway/image_index.py); with `inbox` (the session's own inbox:
    the workspace's, or its room's), a photo the owner sent that the transcript records only as filed there (a
    model that reads text only was not shown it) is named too, as long as it still holds it (image_index.own_uploads)."""
    where = _where(store, session_key, session_id)
    if where is None:
        return {"sessionKey": session_key, "sessionId": None, "messages": [], "total": 0}
    session_id, path, current = where
    read = _read(path, session_key, session_id, current)
    named: Mapping[int, list[dict[str, Any]]] | None = None
    if images and image_refs:
        found = _photos(path, read, photos, inbox)
        named = found.named
    items = transcript_items(read.entries, images=images, refs=image_refs, named=named)
    shown = items[-limit:]
    if images and not image_refs:
        _within_budget(shown)
    return {"sessionKey": session_key, "sessionId": session_id, "messages": shown, "total": len(items)}


@dataclass(frozen=True)
class _Read:
    """One read of a transcript: its header's session key, its entries, its bytes and their version."""

    session_key: str | None
    entries: list[Entry]
    data: bytes
    version: tuple[int, int, int, int, int]


def _where(store: SessionStore, session_key: str, session_id: str | None) -> tuple[str, Path, bool] | None:
    """(session id, transcript path, whether it is the key's current session) of the key's current session
    (None: it has none yet) or of `session_id`, one of its sessions (SessionError when the sessions dir holds
    no such transcript)."""
    record = store.get(session_key)
    current = session_id is None or (record is not None and record.session_id == session_id)
    if current:
        if record is None:
            return None
        session_id = record.session_id
    assert session_id is not None
    path = store.transcript_path(session_id)
    if not path.is_file():
        raise SessionError(f"no session {session_id!r} of {session_key}", "pick a session from sessions.list")
    return session_id, path, current


def _check_key(named: str | None, session_key: str, session_id: str, current: bool) -> None:
    """A transcript that names no chat (its header line damaged, not yet repaired) is shown only as the key's
    current session, which sessions.json ties to it: as a past session it could be any chat's."""
    if named != session_key and not (current and named is None):
        raise SessionError(f"session {session_id!r} is not one of {session_key}", "pick a session from sessions.list")


def _read(path: Path, session_key: str, session_id: str, current: bool) -> _Read:
    try:
        data, st = read_own(path, "the transcript")  # never through a link, only the user's own file
    except FileNotFoundError:
        raise SessionError(f"no session {session_id!r} of {session_key}", "pick a session from sessions.list") from None
    except OSError as e:
        raise SessionError(f"cannot read transcript {path}: {e.strerror or e}",
                           "check the file's permissions (it should be readable by you, mode 0600)") from e
    parsed = parse_transcript(path, data)
    _check_key(parsed.header.session_key, session_key, session_id, current)
    return _Read(parsed.header.session_key, list(parsed.entries), data, version_of(st, len(data)))


def _photos(path: Path, read: _Read, photos: PhotoIndex | None, inbox: Inbox | None = None) -> Photos:
    """Where the read transcript's photos are (each decoded and hashed once), left in `photos` for chat.image."""
    found = index_photos(read.data, read.version, read.session_key, read.entries, inbox)
    if photos is not None:
        photos.put(path, dataclasses.replace(found, named={}))  # the places only: the names are this call's
    return found


def session_image(store: SessionStore, session_key: str, session_id: str | None, sha256: str,
                  photos: PhotoIndex | None = None, inbox: Inbox | None = None) -> dict[str, Any] | None:
    """chat.image: the image of a user turn of that session's transcript whose bytes have this SHA-256
    (`{sha256, mediaType, data}`, base64 as stored), or None when none of its user turns has it — an image of
    another session, or of a group's or a contact's turn, is not found by naming its hash here. With `photos`,
    from where the history call (or the first chat.image) of this version of the transcript found it: that one
    line read, that one image decoded (gateway/image_index.py). With `inbox`, also a photo the owner sent that a
    user turn records only as filed there (image_index.upload_image: that file, while it holds those bytes)."""
    where = _where(store, session_key, session_id)
    if where is None:
        return None
    session_id, path, current = where
    if photos is not None:
        try:
            fd, st = open_own(path, os.O_RDONLY, "the transcript")
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                known = photos.get(path, version_of(st))
                if known is not None:
                    _check_key(known.session_key, session_key, session_id, current)
                    place = known.places.get(sha256)
                    if place is None:
                        return _upload(known, sha256, inbox)
                    if (found := photo_at(os.pread(fd, place.length, place.offset), place, sha256)) is not None:
                        return found
            finally:
                os.close(fd)
    read = _read(path, session_key, session_id, current)  # not indexed yet, or changed: read whole, once
    indexed = _photos(path, read, photos)
    place = indexed.places.get(sha256)
    if place is None:
        return _upload(indexed, sha256, inbox)
    return photo_at(read.data[place.offset:place.offset + place.length], place, sha256)


def _upload(found: Photos, sha256: str, inbox: Inbox | None) -> dict[str, Any] | None:
    """The owner's upload of this hash that a user turn of the transcript (not deleted) records, if the session's
    inbox of the place it was filed in still holds it."""
    named = found.uploads.get(sha256)
    if named is None or inbox is None or inbox.place != named[2]:
        return None
    return upload_image(inbox.folder, named[0], named[1], sha256)


def _images_of(message: Mapping[str, Any], refs: bool, named: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A stored user message's images that a page may draw: as base64, or (`refs`) named by the SHA-256 of their
    bytes with their type and size, for chat.image to bring each once (`named`: as image_index found them)."""
    if not refs:
        return [image for _, image, _ in drawable(message)]
    if named is not None:
        return named
    return [{"mediaType": image["mediaType"], "sha256": digest(raw), "size": len(raw)}
            for _, image, raw in drawable(message)]


def _within_budget(items: list[dict[str, Any]]) -> None:
    """Keep the newest images' data within HISTORY_IMAGE_BUDGET; an older one past it is only named."""
    left = HISTORY_IMAGE_BUDGET
    for item in reversed(items):
        for i, image in enumerate(item.get("images", ())):
            size = len(image["data"])
            if size <= left:
                left -= size
            else:
                item["images"][i] = {"mediaType": image["mediaType"], "size": size * 3 // 4, "omitted": True}


def transcript_items(entries: Sequence[Entry], *, images: bool = False, refs: bool = False,  # noqa: C901 - one pass over a transcript's entry kinds
                     named: Mapping[int, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """What the page draws of a transcript. Tool calls (with done/failed from their results) are shown on the
    assistant reply that followed them, as the live page shows them. `images`: a user turn's images too
    (`named`: by line, as image_index named them)."""
    items: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    carried: list[dict[str, Any]] = []  # calls of tool-only assistant messages, shown on the next reply
    beats = BeatLines()  # a heartbeat's prompt and acknowledgements (HEARTBEAT_OK) are hidden; its alerts shown
    for entry in entries:
        if isinstance(entry, CustomEntry):
            if entry.custom_type == HEARTBEAT_MARK:
                beats.mark()
            elif entry.custom_type == "interrupted":
                items.append({"role": "notice", "text": "(this reply was interrupted when the gateway stopped)",
                              "timestamp": entry.timestamp})
            continue
        if not isinstance(entry, MessageEntry):
            continue
        m = entry.message
        role = m.get("role")
        if role == "toolResult":
            tool = tools.get(str(m.get("toolCallId")))
            if tool is not None:
                tool["status"] = "failed" if m.get("isError") else "done"
            continue
        if role not in ("user", "assistant"):
            continue
        if role == "user" and beats.user():
            continue
        item: dict[str, Any] = {"role": role, "text": stored_text(m), "timestamp": entry.timestamp}
        if role == "user" and (who := _sender(m.get("sender"))) is not None:
            item["sender"] = who
        if role == "user" and (filed := _filed(m.get("files"))):
            item["files"] = filed
        if role == "user" and images and (pictures := _images_of(m, refs, None if named is None else named.get(entry.line, []))):
            item["images"] = pictures
        if role == "assistant":
            kept = beats.assistant(item["text"])
            if kept is None:
                continue  # an acknowledgement or a tool step of a heartbeat: no channel ever saw it
            item["text"] = kept
        if role == "assistant":
            failed = m.get("stopReason") == "error"
            why = str(m.get("errorMessage") or "the model call failed")
            calls = []
            for part in m.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "toolCall":
                    tool = {"name": part.get("name"), "callId": part.get("id"), "status": "running"}
                    tools[str(part.get("id"))] = tool
                    calls.append(tool)
            if is_silent(item["text"]):
                item["text"] = ""  # a silent NO_REPLY was never delivered
            # A failed turn stays visible with its reason, after a reload too; one cut short by a stopping
            # gateway is said by the `interrupted` notice that follows it.
            if failed and (item["text"] or not why.startswith("interrupted")):
                item["error"] = why
            if not item["text"] and not item.get("error"):
                carried += calls
                continue
            item["tools"], carried = carried + calls, []
        elif carried:  # the tools ran but no reply followed (interrupted or failed)
            items.append({"role": "assistant", "text": "", "tools": carried, "timestamp": entry.timestamp})
            carried = []
        items.append(item)
    if carried:
        items.append({"role": "assistant", "text": "", "tools": carried, "timestamp": entries[-1].timestamp})
    return items


# ---- ended sessions ----------------------------------------------------------------------------------------
# sessions.json names only each key's current session; after `/new`, a daily or idle reset, or a cron job's next
# run, the old transcript stays in the sessions dir with its key in its header (as `hermit sessions list --all`
# reads them). An ended session is read-only everywhere: nothing runs in it again.

# (session key, its last activity, when the next session of the key started) -> why the session ended
EndReason = Callable[[str, datetime, datetime], str]


@dataclass(frozen=True)
class _Summary:
    """What the session list says of one transcript file."""

    key: str | None
    started: datetime | None
    last: datetime | None
    messages: int  # user and assistant messages
    size: int
    reason: str | None = None  # why it ended, as recorded when the next session started (older ones: none)


# Read once per version of a file: an ended transcript does not change, so listing them again costs a stat each.
_SUMMARIES: dict[Path, tuple[tuple[int, int], _Summary]] = {}
_SUMMARIES_MAX = 10_000


def _summary(path: Path) -> _Summary | None:
    try:
        st = path.stat()
    except OSError:
        return None
    version = (st.st_size, st.st_mtime_ns)
    hit = _SUMMARIES.get(path)
    if hit is not None and hit[0] == version:
        return hit[1]
    try:
        read = read_transcript(path)
    except SessionError as e:  # unreadable: left out of the list, and said
        log.warning("past session %s left out of the web app's list: %s", path.name, e.message)
        return None
    messages = sum(1 for e in read.entries if isinstance(e, MessageEntry) and e.message.get("role") in ("user", "assistant"))
    ended = [e for e in read.entries if isinstance(e, CustomEntry) and e.custom_type == ENDED_TYPE]
    recorded = ended[-1].data.get("reason") if ended and isinstance(ended[-1].data, dict) else None
    # The last activity is the last message's or tool's, not the end mark's (written when the next one began).
    stamps = [t for t in (parse_timestamp(e.timestamp) for e in read.entries if e not in ended) if t is not None]
    summary = _Summary(read.header.session_key, parse_timestamp(read.header.timestamp),
                       max(stamps) if stamps else None, messages, st.st_size,
                       recorded if isinstance(recorded, str) and recorded in ENDED_REASONS else None)
    if len(_SUMMARIES) >= _SUMMARIES_MAX:
        _SUMMARIES.clear()
    _SUMMARIES[path] = (version, summary)
    return summary


ENDED_REASONS = frozenset({"/new", "/reset", "daily reset", "idle reset"})


def end_reason(store: SessionStore, settings: SessionConfig, tz: tzinfo) -> EndReason:
    """Why a session ended that has no recorded reason (ended before Hermit recorded it), as far as the files
    tell: a cron job's session ends
    with the job's next run; one whose reset policy had expired it by the time its successor started ended by
    that reset ("daily reset", "idle reset"); any other by `/new` (or `/reset`)."""

    def reason(key: str, last: datetime, ended: datetime) -> str:
        try:
            if parse_session_key(key).kind is SessionKind.CRON:
                return "the job's next run"
        except SessionError:
            pass  # a CLI name
        record = store.get(key)
        policy = resolve_reset_policy(settings, cast(ChatType | None, record.chat_type if record else None),
                                      record.origin_channel if record else None)
        check = is_expired(policy, last, ended, tz)
        return f"{check.reason} reset" if check.expired else "/new"

    return reason


def ended_why(ended_at: str, reason: str) -> str:
    return (f"this session ended on {ended_at} ({reason}) and is kept as it was; nothing more can be added to it. "
            "Open the chat's current session to go on.")


def ended_sessions(store: SessionStore, agent_id: str, owner_dm: OwnerCheck, reason: EndReason) -> list[dict[str, Any]]:
    """The agent's ended sessions (transcripts sessions.json no longer names), most recently ended first, each
    with when it started and ended, why, and its size (messages, bytes)."""
    current = {r.session_id: r for r in store.list()}
    starts: dict[str, list[datetime]] = {}
    for r in current.values():
        starts.setdefault(r.key, []).append(r.created_at)
    ended: list[tuple[str, _Summary, datetime]] = []
    for path in store.directory.glob("*.jsonl"):
        if path.stem in current:
            continue
        summary = _summary(path)
        if summary is None or summary.key is None or summary.started is None:
            continue  # a transcript that names no key (or no start) is no chat's past session
        ended.append((path.stem, summary, summary.started))
        starts.setdefault(summary.key, []).append(summary.started)
    out: list[dict[str, Any]] = []
    for session_id, s, started in ended:
        assert s.key is not None
        last = s.last or started
        later = [t for t in starts[s.key] if t > started]
        at = min(later) if later else last
        why = (s.reason or reason(s.key, last, at)) if later else "ended"
        view = describe_session(s.key, owner_dm)
        out.append({**view, "key": s.key, "agentId": agent_id, "sessionId": session_id,
                    "startedAt": format_timestamp(started), "endedAt": format_timestamp(at), "reason": why,
                    "messages": s.messages, "bytes": s.size, "mode": "read-only",
                    "why": ended_why(format_timestamp(at), why)})
    out.sort(key=lambda e: str(e["endedAt"]), reverse=True)
    return out


def ended_session(store: SessionStore, agent_id: str, session_key: str, session_id: str, owner_dm: OwnerCheck,
                  reason: EndReason) -> dict[str, Any] | None:
    """One ended session of `session_key` as ended_sessions lists it; None when `session_id` is the key's
    current session (or no session of it)."""
    record = store.get(session_key)
    if record is not None and record.session_id == session_id:
        return None
    for e in ended_sessions(store, agent_id, owner_dm, reason):
        if e["sessionId"] == session_id and e["key"] == session_key:
            return e
    return None
