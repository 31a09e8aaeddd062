"""Retracting a message its sender deleted on the platform: in the session's current transcript, or in one of the
key's ended transcripts when the delete comes after its session ended (/new, the daily or idle reset).

A `retracted` entry (sessions/entries.py) hides its message from every reader; the files the message brought
(`files` of its user message: messages.FiledFile) are deleted first, by the caller's `remove`, so that a kill
between the two leaves no file of a deleted message for another reader, only a message whose delete was not
written yet (as a kill before the delete was seen would). So is what was saved of an ended session at /new
(`saved`: agent/session_memory_scrub.scrub_saved).

Its copies go too (`scrub_copies`, sessions/scrub.py): what Hermit wrote after it from that session and quotes it
(replies, tool calls, compaction summaries, the flush's entries in the transcript; the notes the flush or a turn's
write/edit took after it, by the sessions folder's `reach`, agent/runtime.py), and the message's own text in the
file. Found by the text the transcript holds, the notes are scrubbed first: a kill in between leaves them findable
by it. The gateway hides a deleted message at once and scrubs a flood of them in one rewrite (`retract_in(scrub=
False)`, then `scrub_retracted`: gateway/scrub_batch.py).

An ended transcript is found by the `sessionKey` in its header, and only among the key's last ENDED_SESSIONS
sessions that changed in the last ENDED_DAYS days: a flood of deletes never reads every transcript. The key's
transcripts are listed once per change of the sessions folder (a new session adds a file; an append does not
change the folder), and a transcript is parsed only when its bytes name the message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hermit.errors import SessionError
from hermit.messages import FiledFile
from hermit.sessions.entries import (
    EDITED_MARK,
    EDITED_TYPE,
    RETRACTED_TEXT,
    RETRACTED_TYPE,
    edited_texts,
    entry_from_json,
    retracted_refs,
)
from hermit.sessions.files import open_own, read_fd
from hermit.sessions.headers import header_key
from hermit.sessions.scrub import (
    Deleted,
    deleted_many,
    edit_entry,
    find_deleted,
    read_objs,
    scrub_transcript,
    user_text,
)
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import CustomEntry, MessageEntry, Transcript

log = logging.getLogger("hermit.sessions")

# `edited` entries one message gets in a transcript: each edit is a line holding its whole text, and an edit runs no
# turn (no queue bound, no turn's cost), so a member editing one message back and forth grew the group's transcript
# without end. The edit after the last of them takes the message back whole, as a delete does (`edit_in`).
MAX_EDITS = 24
ENDED_SESSIONS = 8  # the key's ended sessions a late delete is looked for in, newest first
ENDED_DAYS = 30  # ...among those written to in this many days
MAX_HEADERS = 512  # transcripts whose header is read to find them, newest first
_LISTINGS: OrderedDict[tuple[str, str], tuple[int, tuple[str, ...]]] = OrderedDict()
_LISTINGS_KEPT = 256
_guard = threading.Lock()

Remove = Callable[[Sequence[FiledFile]], None]  # deletes the files a retracted message brought
Reach = Callable[[str | None, Deleted], None]  # scrubs a deleted message's copies a session (its key) wrote elsewhere
_REACHES: dict[str, weakref.WeakMethod[Reach]] = {}
# What a scrub found of a deleted message, kept in this process only (never on disk) for a while: the transcript
# no longer holds its text, and a turn that was running when it was deleted may still write a reply quoting it.
# Retracted again after that turn (runtime.retract), its copies are found by this.
RECENT_SECONDS = 3600
RECENT_KEPT = 64
# With the transcript's size after that scrub: retracted again with nothing written since (the same delete again:
# a webhook retried, a client sending its revoke over and over), the transcript is not read again.
_RECENT: OrderedDict[tuple[str, str], tuple[float, Deleted, int]] = OrderedDict()


def ref_bytes(ref: str) -> bytes:
    """How a user message's ref appears in a transcript line (transcript._dumps: compact, not ASCII-escaped)."""
    return b'"ref":' + json.dumps(ref, ensure_ascii=False).encode("utf-8", "surrogatepass")


def names(path: Path, ref: str) -> bool:
    """Whether the transcript at `path` may hold the message `ref` (its bytes name it): read, not parsed. True when
    it cannot be read, for the caller's own open to say why."""
    try:
        fd, st = open_own(path, os.O_RDONLY, "the transcript")
    except (OSError, SessionError):
        return True
    try:
        return ref_bytes(ref) in read_fd(fd, st.st_size)
    except OSError:
        return True
    finally:
        os.close(fd)


def messages_of(transcript: Transcript, ref: str) -> list[MessageEntry]:
    """The user message(s) `ref` of a transcript, as read now."""
    return [e for e in transcript.messages() if e.message.get("role") == "user" and e.message.get("ref") == ref]


def held(transcript: Transcript, ref: str) -> list[FiledFile] | None:
    """The files recorded with the user message(s) `ref` of a transcript (may be empty); None when it holds none."""
    found = messages_of(transcript, ref)
    if not found:
        return None
    raw = [f for e in found if isinstance(files := e.message.get("files"), list) for f in files]
    return [f for f in map(FiledFile.from_dict, raw) if f is not None]


def register_reach(directory: Path, reach: Reach) -> None:
    """`reach` (a bound method: held weakly) scrubs what a session of the sessions folder `directory` wrote
    elsewhere (the agent's memory notes: agent/runtime.py registers it); the last registered for a folder is used."""
    with _guard:
        _REACHES[os.path.realpath(directory)] = weakref.WeakMethod(reach)


def _reach_for(directory: Path) -> Reach | None:
    with _guard:
        ref = _REACHES.get(os.path.realpath(directory))
    return ref() if ref is not None else None


def _recent(key: tuple[str, str]) -> tuple[Deleted, int] | None:
    with _guard:
        found = _RECENT.get(key)
        if found is not None and time.monotonic() - found[0] > RECENT_SECONDS:
            del _RECENT[key]
            found = None
    return (found[1], found[2]) if found is not None else None


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def scrub_copies(transcript: Transcript, ref: str) -> None:
    """Copies of the deleted message `ref` scrubbed from what Hermit wrote after it (sessions/scrub.py): first the
    memory notes its session's flush wrote (the folder's `reach`), found by the text the transcript still holds,
    then the transcript itself, its message included. A failure is logged: the `retracted` entry still hides
    the message."""
    key = (os.path.realpath(transcript.path), ref)
    try:
        recent = _recent(key)
        if recent is not None and recent[1] == _size(transcript.path):
            return  # scrubbed, and nothing written since
        deleted = find_deleted(transcript.path, ref, recent[0] if recent is not None else None)
        if deleted is None:
            return
        reach = _reach_for(transcript.path.parent)
        if reach is not None and deleted.note_calls:
            reach(transcript.header.session_key, deleted)
        size = scrub_transcript(transcript.path, deleted).size  # not read after: an append may have come since
        with _guard:
            _RECENT[key] = (time.monotonic(), deleted, size)
            _RECENT.move_to_end(key)
            while len(_RECENT) > RECENT_KEPT:
                _RECENT.popitem(last=False)
    except (OSError, SessionError) as e:
        log.warning("could not take the copies of a deleted message out of %s: %s", transcript.path.name, e)


def unscrubbed(objs: Sequence[dict[str, Any] | None]) -> list[str]:
    """The refs the transcript's lines (parsed, in order) retract whose user message still holds its text: hidden
    from every reader by their `retracted` entry, their copies not scrubbed yet (`retract_in(scrub=False)`, or a
    scrub that failed or was killed)."""
    gone = retracted_refs(objs)
    out: dict[str, None] = {}
    for obj in objs:
        message = obj.get("message") if obj is not None and obj.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "user" and message.get("ref") in gone:
            text = user_text(message)
            if text.strip() and text != RETRACTED_TEXT:
                out[str(message["ref"])] = None
        elif (said := edit_entry(obj)) is not None and said[0] in gone and said[1].strip() and said[1] != RETRACTED_TEXT:
            out[said[0]] = None  # an edit of it still holds its text
    return list(out)


Saved = Callable[[Deleted, list[MessageEntry]], None]  # scrubs what /new saved of an ended session (its messages)


def scrub_retracted(path: Path, session_key: str | None, saved: Saved | None = None) -> int:
    """Scrub the copies of every message the transcript at `path` retracts and still holds the text of
    (`unscrubbed`), all in one rewrite (sessions/scrub.py): first the notes written after each (the folder's
    `reach`) and, `saved` (an ended session's), what /new saved of it, given each one's user message(s) as the
    transcript holds them before the rewrite; then the transcript. How many messages were scrubbed (0 when the
    transcript's rewrite changed nothing). Raises OSError / SessionError."""
    objs = read_objs(path)
    edits = unscrubbed_edits(objs)
    deleted = [dataclasses.replace(d, transcript=path) for d in deleted_many(objs, [*unscrubbed(objs), *edits], edits)]
    if not deleted:
        return 0
    reach = _reach_for(path.parent)
    for d in deleted:
        if reach is not None and d.note_calls:
            try:
                reach(session_key, d)
            except Exception as e:  # noqa: BLE001 - one note never keeps the transcript's copies (its turns' context)
                log.warning("could not take a deleted message out of the notes of %s (%s): the transcript is scrubbed "
                            "all the same", path.name, type(e).__name__)
        if saved is not None:
            try:
                saved(d, _user_entries(objs, d.ref))
            except Exception as e:  # noqa: BLE001 - as a note's: the transcript is scrubbed all the same
                log.warning("could not take a deleted or edited message out of what /new saved of %s (%s)", path.name,
                            type(e).__name__)
    report = scrub_transcript(path, *deleted)
    size = report.size  # not read after: an append may have come since
    with _guard:
        for d in deleted:
            if d.edited is not None:  # still shown (edited): a later delete of it looks at the transcript again
                continue
            key = (os.path.realpath(path), d.ref)
            _RECENT[key] = (time.monotonic(), d, size)
            _RECENT.move_to_end(key)
        while len(_RECENT) > RECENT_KEPT:
            _RECENT.popitem(last=False)
    # None when the rewrite changed nothing: looked at again, it would find the same (the batch's look once more
    # after a scrub would never end on what it cannot change).
    return len(deleted) if report.total else 0


def _user_entries(objs: Sequence[dict[str, Any] | None], ref: str) -> list[MessageEntry]:
    """The user message(s) `ref` of a transcript's lines (parsed, in order) as entries."""
    out: list[MessageEntry] = []
    for number, obj in enumerate(objs, start=1):
        message = obj.get("message") if obj is not None and obj.get("type") == "message" else None
        if obj is not None and isinstance(message, dict) and message.get("role") == "user" and message.get("ref") == ref:
            entry = entry_from_json(obj, number)
            if isinstance(entry, MessageEntry):
                out.append(entry)
    return out


def unscrubbed_edits(objs: Sequence[dict[str, Any] | None]) -> dict[str, str]:
    """The refs the transcript's lines edit (not retracted) whose user message's line does not hold its edited text
    yet, with that text: shown edited to every reader, the line and the copies of its old text not scrubbed yet."""
    edits = edited_texts(objs)
    gone = retracted_refs(objs)
    out: dict[str, str] = {}
    for obj in objs:
        message = obj.get("message") if obj is not None and obj.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "user" and (ref := message.get("ref")) in edits \
                and ref not in gone and user_text(message) not in (edits[ref] + EDITED_MARK, RETRACTED_TEXT):
            out[ref] = edits[ref]
        elif (said := edit_entry(obj)) is not None and said[0] not in gone and said[1] != edits[said[0]]:
            out[said[0]] = edits[said[0]]  # an earlier edit still holds what a later one dropped
    return out


def edit_in(transcript: Transcript, ref: str, sender: str, text: str, *, ahead: bool = False,
            dropping: Callable[[], None] | None = None, remove: Remove | None = None) -> bool | None:
    """Its sender edited the message `ref` after its answer (gateway/retractions.py): an `edited` entry makes every
    reader see `text` (sessions/entries.py). None when the transcript holds no text of it that `sender` wrote (in a
    group, the one its line names; a deleted one is not brought back), or the text is as shown already; else the
    entry is written, and True when the edit dropped words its old text had (its copies are the caller's to scrub),
    False when it only added some. `ahead`: written when the message is not recorded yet (its turn is starting:
    the caller checked its sender), True. `dropping` is called before the entry is written when it returns True
    (the caller wants the scrub in the state dir first: a kill in between leaves nothing hidden unscrubbed).
    A message edited MAX_EDITS times already is taken back whole by its next edit: its files removed (`remove`),
    a `retracted` entry written (True: its copies are the caller's to scrub, as a delete's)."""
    found = [e.message for e in messages_of(transcript, ref)]
    if not found and not ahead:
        return None
    old = user_text(found[0]) if found else ""
    recorded = found[0].get("sender") if found else None
    if old == RETRACTED_TEXT or (isinstance(recorded, dict) and str(recorded.get("id")) != sender):
        return None
    old = old.removesuffix(EDITED_MARK)
    lines = old.split("\n")
    framed = len(lines)  # the lines Hermit added to the sender's text (a file's: gateway/attachments.described) stay
    while framed > 0 and lines[framed - 1].startswith(_FILE_LINES):
        framed -= 1
    body, frame = "\n".join(lines[:framed]), lines[framed:]
    if found and body == text:  # no change of its text (Slack says so of a thread's new reply, say)
        return None
    if sum(isinstance(e, CustomEntry) and e.custom_type == EDITED_TYPE and isinstance(e.data, dict)
           and e.data.get("ref") == ref for e in transcript.entries()) >= MAX_EDITS:
        if dropping is not None:
            dropping()
        log.info("a message was edited %d times: its next edit takes it back whole, as a delete", MAX_EDITS)
        retract_in(transcript, ref, remove, ahead=True, scrub=dropping is None)
        return True
    kept = set(_words(text))
    drops = not found or any(w not in kept for w in _words(body))
    if drops and dropping is not None:
        dropping()
    transcript.append_custom(EDITED_TYPE, {"ref": ref, "text": "\n".join([text, *frame]) if text else "\n".join(frame)})
    return drops


# How gateway/attachments.described starts the line it adds to a message's text for each file that came with it.
_FILE_LINES = ("(file received with this message: ", "(a file came with this message but could not be kept")


def _words(text: str) -> list[str]:
    return [w for w in (raw.strip(".,;:!?\"'()[]{}<>").casefold() for raw in text.split()) if w]


def retract_in(transcript: Transcript, ref: str, remove: Remove | None, *, ahead: bool = False,
               scrub: bool = True) -> bool:
    """Retract `ref` in one transcript: its files removed, its copies scrubbed (`scrub_copies`), then the entry
    written. `ahead`: written even when the message is not recorded yet (its turn is starting). `scrub=False`:
    the entry only, the copies left for `scrub_retracted` (the gateway's batch of a flood of deletes). True when
    the transcript held it."""
    files = held(transcript, ref)
    if files and remove is not None:
        remove(files)
    if files is not None and scrub:
        scrub_copies(transcript, ref)
    if (files is not None or ahead) and not _retracted(transcript, ref):  # once: a repeated delete adds nothing
        transcript.append_custom(RETRACTED_TYPE, {"ref": ref})
    return files is not None


def _retracted(transcript: Transcript, ref: str) -> bool:
    return any(isinstance(e, CustomEntry) and e.custom_type == RETRACTED_TYPE and isinstance(e.data, dict)
               and e.data.get("ref") == ref for e in transcript.entries())


def retract_ended(store: SessionStore, key: str, ref: str, remove: Remove | None, *, current: str | None = None,
                  saved: Callable[[str, list[MessageEntry]], None] | None = None) -> int:
    """Retract `ref` in the key's ended transcripts that hold it (see the module's bounds); how many did. `saved`
    is given each one's session id and the message(s) as they were, before its entry is written (what was
    saved of that session at /new: the caller's to change), like the files: a kill leaves the entry to write."""
    done = 0
    for path in ended_transcripts(store, key, current):
        try:
            if not names(path, ref):
                continue
            transcript = Transcript.open(path, clock=store.clock, fsync=store.fsync)
            if transcript.header.session_key != key:  # a repaired header says otherwise
                continue
            before = messages_of(transcript, ref)
            if before and saved is not None:
                saved(transcript.header.session_id, before)
            if retract_in(transcript, ref, remove):
                done += 1
        except (OSError, SessionError) as e:
            log.warning("could not look for a deleted message in %s: %s", path.name, e)
    return done


def ended_transcripts(store: SessionStore, key: str, current: str | None) -> list[Path]:
    """The key's transcripts other than `current` (a session id), newest first, within the module's bounds."""
    directory = store.directory
    try:
        stamp = os.stat(directory).st_mtime_ns
    except OSError:
        return []
    cache_key = (str(directory), key)
    with _guard:
        cached = _LISTINGS.get(cache_key)
    if cached is None or cached[0] != stamp:
        cached = (stamp, _list_key(directory, key))
        with _guard:
            _LISTINGS[cache_key] = cached
            _LISTINGS.move_to_end(cache_key)
            while len(_LISTINGS) > _LISTINGS_KEPT:
                _LISTINGS.popitem(last=False)
    since = time.time() - ENDED_DAYS * 86400
    out: list[Path] = []
    for name in cached[1]:
        if current is not None and name == f"{current}.jsonl":
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            if os.lstat(path).st_mtime >= since:
                out.append(path)
        if len(out) >= ENDED_SESSIONS:
            break
    return out


def _list_key(directory: Path, key: str) -> tuple[str, ...]:
    """Names of the newest transcripts (at most MAX_HEADERS looked at) whose header names `key`, newest first."""
    since = time.time() - ENDED_DAYS * 86400
    found: list[tuple[int, str]] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        st = entry.stat(follow_symlinks=False)
                        if st.st_mtime >= since:
                            found.append((st.st_mtime_ns, entry.name))
    except OSError:
        return ()
    names: list[str] = []
    for _, name in sorted(found, reverse=True)[:MAX_HEADERS]:
        if header_key(directory / name) == key:
            names.append(name)
            if len(names) > ENDED_SESSIONS:  # the current one may be among them
                break
    return tuple(names)
