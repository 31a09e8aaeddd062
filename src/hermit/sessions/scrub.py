"""Taking a deleted message's text out of what Hermit wrote from its session afterwards (sessions/retraction.py).

A `retracted` entry hides the user message itself from every reader, but the assistant's replies may quote it
("your card 4111 1111 1111 1111 is noted"), and so may its tool calls, a compaction summary written after it and
the memory flush's notes. Those copies are scrubbed: replaced by MARK.

What counts as a copy is `Verbatim`'s rule (sessions/verbatim.py): a run of 12+ characters holding an uncommon word,
a secret-looking word, a 6+ digit number — only what the deleted message alone brought into its session.

Where: the transcript's lines from the deleted message's on — the message itself (its text and images give
way to RETRACTED_TEXT, as every reader already shows it), the assistant's messages (text, thinking, tool-call
arguments), tool results, compaction summaries and the memory flush's entries. Never another user message (the
user's own words, even quoting it), never a line before the message, never another transcript.

How: the file is rewritten whole (a temp file in the sessions folder, fsynced, renamed over it) under the flock
every append takes (sessions/transcript.py), so a kill leaves the old file or the new one; an append waiting on
that lock opens the file again when the name has moved to the new one. Only the lines that change are encoded
again; the others keep their bytes, a damaged line included. The deletes of a batch (gateway/scrub_batch.py) are
scrubbed in one rewrite: each text is walked once, and given only the rules that may hold a copy in it
(`Candidates`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermit.durable import write_atomic
from hermit.locks import lock_fd
from hermit.sessions.entries import EDITED_MARK, EDITED_TYPE, RETRACTED_TEXT, edit, retract, retracted_refs
from hermit.sessions.files import open_own, read_fd
from hermit.sessions.verbatim import MARK as MARK
from hermit.sessions.verbatim import MIN_RUN as MIN_RUN
from hermit.sessions.verbatim import MIN_TOKEN as MIN_TOKEN
from hermit.sessions.verbatim import STOPWORDS as STOPWORDS
from hermit.sessions.verbatim import Candidates, Verbatim, _folded

log = logging.getLogger("hermit.sessions")

FLUSH_ENTRY = "memory_flush"  # custom entries holding the flush's messages (agent/flush.py writes them)
NOTE_TOOLS = frozenset({"write", "edit"})  # the tools whose calls may add text to a memory note (tools/files.py)
# Set (True) in a note call's arguments as `note_calls` gives them when the call's result says it created the file
# (tools/files.py: "created <path> (…)"): the file was not there before it, so its every line is the call's. A NUL
# starts it, so it names no argument a tool takes; a model's own argument by that name is dropped.
CREATED = "\x00created"
_EDITED_BYTES = b'"customType":' + json.dumps(EDITED_TYPE).encode()  # as an `edited` entry's line holds it
# Keys of a message's JSON whose strings are text someone could have quoted in; `arguments` is scrubbed whole.
_TEXT_KEYS = frozenset({"text", "thinking", "content", "errorMessage", "summary"})


@dataclass(frozen=True)
class Deleted:
    """A deleted user message as its transcript recorded it: its text(s), the rule for copies of them, the line
    its first copy is on, and the write and edit calls (name, arguments) made after it — the memory flush's and
    the turns' own (NOTE_TOOLS: a note the model took in the turn answering it) — whose notes the caller scrubs
    (agent/flush.py) before the transcript loses the text they were found by."""

    ref: str
    rule: Verbatim
    line: int
    note_calls: tuple[tuple[str, dict[str, Any]], ...]
    # Edited after its answer, not deleted (gateway/retractions.py): its line is shown with this text (entries.edit),
    # and what of its old text this text still holds is no copy.
    edited: str | None = None
    transcript: Path | None = None  # the file it was found in (its agent's folder: agent/owner_notes.py)


@dataclass
class Scrubbed:
    """What a transcript's scrub changed: copies per kind of line, never the text."""

    path: Path
    copies: dict[str, int] = field(default_factory=dict)
    size: int = -1  # the file's size as the scrub left it, read under its lock (-1: not read)

    @property
    def total(self) -> int:
        return sum(self.copies.values())

    def add(self, kind: str, n: int) -> None:
        if n:
            self.copies[kind] = self.copies.get(kind, 0) + n


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def _obj(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def user_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content or () if isinstance(p, dict) and isinstance(p.get("text"), str))


def _sender_id(message: dict[str, Any]) -> str | None:
    """Who sent a user message, as a group's transcript records it; None in a chat of one person (no sender)."""
    sender = message.get("sender")
    return str(sender.get("id")) if isinstance(sender, dict) and sender.get("id") is not None else None


def _is_deleted(obj: dict[str, Any], ref: str) -> bool:
    message = obj.get("message")
    return (obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "user"
            and message.get("ref") == ref)


def deleted_in(objs: Iterable[dict[str, Any] | None], ref: str, known: Deleted | None = None) -> Deleted | None:
    """The message `ref` as the transcript's lines (parsed, in order) recorded it, or None when they hold no text
    of it (never recorded, or scrubbed already). `known`: what an earlier scrub found of it, used when its text is
    gone (copies written since: by a turn that was running when it was deleted), with the flush calls as now."""
    objs = list(objs)
    gone = retracted_refs(objs) | {ref}
    at, by = next(((n, _sender_id(o["message"])) for n, o in enumerate(objs, start=1)
                   if o is not None and _is_deleted(o, ref)), (0, None))
    at = known.line if known is not None else at  # its first line that held text
    if known is None and not any(o is not None and _is_deleted(o, ref) and user_text(o["message"]).strip()
                                 and user_text(o["message"]) != RETRACTED_TEXT for o in objs):
        return None  # never recorded, or scrubbed already: nothing to look for
    texts: list[str] = []
    kept: list[str] = []  # what the session holds apart from it (the module's rules)
    first = known.line if known is not None else 0
    calls: list[tuple[str, dict[str, Any]]] = []
    failed, created = _call_outcomes(objs)
    for number, obj in enumerate(objs, start=1):
        if obj is None:
            continue
        message = obj.get("message")
        if _is_deleted(obj, ref):
            text = user_text(obj["message"])
            if text.strip() and text != RETRACTED_TEXT:
                texts.append(text)
                first = first or number
        elif obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "user":
            if message.get("ref") not in gone and (number < at or _sender_id(message) != by):  # before, or another's
                kept.append(user_text(message))
        elif number < at:  # before it: the session held that already
            kept.extend(_texts_of(obj))
        elif obj.get("type") == "custom" and obj.get("customType") == FLUSH_ENTRY:
            message = obj.get("data", {}).get("message") if isinstance(obj.get("data"), dict) else None
            calls.extend(_note_calls(message, failed, created, number))
        elif obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "assistant":
            calls.extend(_note_calls(message, failed, created, number))  # a turn's own write or edit: a note taken
    if texts:
        return Deleted(ref, Verbatim(tuple(texts), kept), first, tuple(calls))
    return Deleted(ref, Verbatim(known.rule.texts, kept), known.line, tuple(calls)) if known is not None else None


def deleted_many(objs: Sequence[dict[str, Any] | None], refs: Iterable[str],
                 edits: dict[str, str] | None = None) -> list[Deleted]:
    """`deleted_in` of each of `refs` (those the lines hold text of), the lines walked once for all of them: a
    flood of deletes cost a walk of the whole transcript each (gateway/scrub_batch.py). A ref `edits` names was
    edited to that text, not deleted: its old text is the one to find copies of, what the new one holds is kept."""
    edits = edits or {}
    gone = retracted_refs(objs) | set(refs)
    users: dict[int, tuple[Any, str | None, str]] = {}  # line -> ref, sender, text of a user message
    pieces: list[str] = []  # each line's text as the rule compares it (`_folded`)
    calls: list[list[tuple[str, dict[str, Any]]]] = []
    edited: dict[str, list[str]] = {}  # ref -> the texts its `edited` entries still hold
    failed, created = _call_outcomes(objs)
    for number, obj in enumerate(objs, start=1):
        message = obj.get("message") if obj is not None else None
        mine: list[tuple[str, dict[str, Any]]] = []
        if obj is None:
            pieces.append("")
        elif obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "user":
            users[number] = (message.get("ref"), _sender_id(message), text := user_text(message))
            pieces.append(_folded([text]))
        elif (said := edit_entry(obj)) is not None:  # an edit's text: the message's, as its line's is
            pieces.append("")
            if said[1].strip() and said[1] != RETRACTED_TEXT:
                edited.setdefault(said[0], []).append(said[1])
        else:
            pieces.append(_folded(_texts_of(obj)))
            if obj.get("type") == "custom" and obj.get("customType") == FLUSH_ENTRY:
                data = obj.get("data")
                mine = _note_calls(data.get("message") if isinstance(data, dict) else None, failed, created, number)
            elif obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "assistant":
                mine = _note_calls(message, failed, created, number)
        calls.append(mine)
    out: list[Deleted] = []
    for ref in dict.fromkeys(refs):
        lines = [n for n, (r, _, _) in users.items() if r == ref]
        shown = edits[ref] + EDITED_MARK if ref in edits else None
        texts = [(n, users[n][2]) for n in lines if users[n][2].strip() and users[n][2] not in (RETRACTED_TEXT, shown)]
        if lines:  # what an earlier edit said (one of a deleted message: every one) is its text too
            texts += [(lines[0], t) for t in edited.get(ref, ()) if t != edits.get(ref)]
        if not texts:
            continue  # never recorded, or scrubbed already
        at, by = lines[0], users[lines[0]][1]
        kept = "\x00".join(
            piece for n, piece in enumerate(pieces, start=1) if piece and (
                (n < at and n not in users) or (n in users and users[n][0] not in gone and (n < at or users[n][1] != by))))
        if ref in edits:  # what the edited text still says is the sender's, as the session holds it now
            kept = "\x00".join(k for k in (kept, _folded([edits[ref]])) if k)
        found = tuple(c for n in range(at + 1, len(objs) + 1) for c in calls[n - 1])
        out.append(Deleted(ref, Verbatim(tuple(t for _, t in texts), folded_kept=kept), texts[0][0], found,
                           edits.get(ref)))
    return out


def edit_entry(obj: dict[str, Any] | None) -> tuple[str, str] | None:
    """The ref and text of an `edited` entry's line (sessions/entries.py), or None when it is not one."""
    data = obj.get("data") if obj is not None and obj.get("type") == "custom" and obj.get(
        "customType") == EDITED_TYPE else None
    if isinstance(data, dict) and isinstance(data.get("ref"), str) and isinstance(data.get("text"), str):
        return data["ref"], data["text"]
    return None


Call = tuple[int, int]  # a tool call: the line (from 1) of the message that made it, its place among the parts


def _note_calls(message: Any, failed: frozenset[Call] = frozenset(), created: frozenset[Call] = frozenset(),
                number: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """The write and edit calls (NOTE_TOOLS) of an assistant message, on line `number`: what may have added text to a
    note. Not one whose result was an error (`failed`: it wrote nothing, and what the file holds of its text is
    someone else's — the owner's own line in MEMORY.md); one with no result yet (killed while it ran) may have written.
    A call whose result says it created the file (`created`) has CREATED set in its arguments."""
    out: list[tuple[str, dict[str, Any]]] = []
    for index, part in enumerate((message.get("content") or ()) if isinstance(message, dict) else ()):
        if isinstance(part, dict) and part.get("type") == "toolCall" and part.get("name") in NOTE_TOOLS \
                and isinstance(part.get("arguments"), dict) and (number, index) not in failed:
            arguments = {k: v for k, v in part["arguments"].items() if k != CREATED}
            if (number, index) in created:
                arguments[CREATED] = True
            out.append((part["name"], arguments))
    return out


def _call_outcomes(objs: Iterable[dict[str, Any] | None]) -> tuple[frozenset[Call], frozenset[Call]]:
    """The tool calls (the turns' and the flush's) whose result the lines record as an error, and the write calls
    whose result says they created the file they wrote (tools/files.py's "created …": nothing was there before).
    A result is the earliest call before it with its id and tool name that has none yet: ids are not unique — a
    provider that gives none gets `call_<n>` from the client (models/openai_compat.py), the same in every turn, and a
    model may give one id to two calls — so a result was taken for every call with its id: a failed read sharing a
    later write's id hid the write's lines from the scrub, and a read of a file starting "created " made a rewrite of
    the owner's note wholly the turn's."""
    failed: set[Call] = set()
    created: set[Call] = set()
    waiting: dict[tuple[str, Any], list[Call]] = {}  # (id, tool name) -> its calls with no result yet, in order
    for number, obj in enumerate(objs, start=1):
        if obj is None:
            continue
        message = obj.get("message")
        if obj.get("type") == "custom" and obj.get("customType") == FLUSH_ENTRY and isinstance(obj.get("data"), dict):
            message = obj["data"].get("message")
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and isinstance(message.get("content"), list):
            for index, part in enumerate(message["content"]):
                if isinstance(part, dict) and part.get("type") == "toolCall" and isinstance(part.get("id"), str):
                    waiting.setdefault((part["id"], part.get("name")), []).append((number, index))
        elif message.get("role") == "toolResult" and isinstance(message.get("toolCallId"), str):
            calls = waiting.get((message["toolCallId"], message.get("toolName")))
            if not calls:
                continue
            call = calls.pop(0)
            if message.get("isError") is True:
                failed.add(call)
            elif message.get("toolName") == "write" and user_text(message).startswith("created "):
                created.add(call)
    return frozenset(failed), frozenset(created)


def _texts_of(obj: dict[str, Any]) -> list[str]:
    """The text of a line the scrub would look in (`_scrub_line`): a message's, a summary's, a flush entry's."""
    out: list[str] = []

    def collect(text: str) -> str:
        out.append(text)
        return text

    if obj.get("type") == "message" and isinstance(obj.get("message"), dict):
        _scrub_value(obj["message"], collect, False)
    elif obj.get("type") == "compaction":
        _scrub_value(obj.get("summary"), collect, True)
    elif obj.get("type") == "custom" and obj.get("customType") == FLUSH_ENTRY:
        _scrub_value(obj.get("data"), collect, False)
    return out


def read_objs(path: Path) -> list[dict[str, Any] | None]:
    """The transcript at `path` as it is now, each line parsed (None: not a JSON object)."""
    fd, st = open_own(path, os.O_RDONLY, "the transcript")
    try:
        data = read_fd(fd, st.st_size)
    finally:
        os.close(fd)
    return [_obj(raw) for raw in _lines(data)]


def find_deleted(path: Path, ref: str, known: Deleted | None = None) -> Deleted | None:
    """`deleted_in` of the transcript at `path` as it is now."""
    found = deleted_in(read_objs(path), ref, known)
    return dataclasses.replace(found, transcript=path) if found is not None else None


def _scrub_value(value: Any, clean: Callable[[str], str], text: bool) -> Any:
    """`value` (a message's JSON, or part of it) with `clean` applied to its text: the strings under a text key
    (_TEXT_KEYS) and every string of a tool call's `arguments`; ids, names, types and image data as they are."""
    if isinstance(value, str):
        return clean(value) if text else value
    if isinstance(value, list):
        return [_scrub_value(v, clean, text) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_value(v, clean, text or k == "arguments" or (k in _TEXT_KEYS and isinstance(v, str)))
                for k, v in value.items()}
    return value


def _scrub_line(obj: dict[str, Any], number: int, deleted: Sequence[Deleted], cands: Candidates,
                report: Scrubbed) -> dict[str, Any] | None:
    """The line's object (line `number`) with the copies of those of `deleted` it comes after scrubbed, or the
    message of one of them retracted; None when nothing of it changes."""
    count = 0

    def clean(text: str) -> str:
        nonlocal count
        for k in cands.of(text):
            if number >= deleted[k].line:
                text, n = deleted[k].rule.scrub(text)
                count += n
        return text

    kind = obj.get("type")
    message = obj.get("message")
    said = edit_entry(obj)
    if said is not None:  # an edit of one of them: its text gives way to the last edit's, or to a delete's
        last = next((d.edited for d in deleted if d.ref == said[0]), None) if said[0] in cands.refs else None
        if said[0] not in cands.refs or said[1] in (last, RETRACTED_TEXT):
            return None
        report.add("edit", 1)
        return {**obj, "data": {**obj["data"], "text": RETRACTED_TEXT if last is None else last}}
    if kind == "message" and isinstance(message, dict) and message.get("role") == "user":
        ref = message.get("ref")
        if not isinstance(ref, str) or ref not in cands.refs:
            return None  # another user message: the user's own words, never scrubbed
        edited = next((d.edited for d in deleted if d.ref == ref), None)
        new_message = edit(message, {ref: edited}) if edited is not None else retract(message, {ref})
        if new_message.get("content") == message.get("content"):
            return None
        report.add("message", 1)
        return {**obj, "message": new_message}
    if kind == "message" and isinstance(message, dict):
        new = {**obj, "message": _scrub_value(message, clean, False)}
        what = "reply" if message.get("role") == "assistant" else "tool result"
    elif kind == "compaction":
        new = {**obj, "summary": _scrub_value(obj.get("summary"), clean, True)}
        what = "summary"
    elif kind == "custom" and obj.get("customType") == FLUSH_ENTRY and isinstance(obj.get("data"), dict):
        new = {**obj, "data": _scrub_value(obj["data"], clean, False)}
        what = "flush"
    else:
        return None
    report.add(what, count)
    return new if count else None


def scrub_transcript(path: Path, *deleted: Deleted) -> Scrubbed:
    """Scrub the copies of each of `deleted` in the transcript at `path` (see the module's rules): one atomic
    rewrite under the transcript's lock for all of them (a flood of deletes in a session costs one), or nothing
    when no line changes. Raises OSError / SessionError when it cannot read or replace the file (it is then as
    it was)."""
    report = Scrubbed(path)
    if not deleted:
        return report
    first = min(d.line for d in deleted)
    cands = Candidates([d.rule for d in deleted], [d.ref for d in deleted])
    fd = _open_locked(path)
    try:
        data = read_fd(fd, os.fstat(fd).st_size)
        lines = _lines(data)
        out: list[bytes] = []
        changed = False
        for number, raw in enumerate(lines, start=1):
            # Before the first message: only an `edited` entry of one of them (an edit that came as its turn was
            # starting is written ahead of the line the turn then records), which gives way as those after it do.
            obj = _obj(raw) if number >= first or _EDITED_BYTES in raw else None
            new = _scrub_line(obj, number, deleted, cands, report) if obj is not None else None
            if new is None:
                out.append(raw)
                continue
            out.append(json.dumps(new, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
            changed = True
        report.size = len(data)
        if changed:
            _replace(path, fd, new_data := b"\n".join(out) + b"\n")
            report.size = len(new_data)
    finally:
        os.close(fd)  # releases the lock, after the new file has the name
    if changed:
        log.info("scrubbed %d deleted message(s) from %s: %s", len(deleted), path.name,
                 ", ".join(f"{n} in {kind}" for kind, n in sorted(report.copies.items())))
    return report


def _open_locked(path: Path) -> int:
    """The transcript opened and locked: every append waits, then finds the name moved to the new file
    (Transcript._append). Opened again until the name names what is locked: another scrub (of another deleted
    message of the session) may have replaced the file while this one waited, and a rewrite of the old file
    undid that scrub and lost what was appended to the new one meanwhile."""
    while True:
        fd, _ = open_own(path, os.O_RDWR, "the transcript")
        try:
            lock_fd(fd)
            if os.lstat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _replace(path: Path, old: int, data: bytes) -> None:
    """`path` replaced by a file holding `data`, with the old one's mode (0600), while `old` holds its lock. A
    temp file a killed scrub left is removed first (durable.py: only one no live process holds)."""
    write_atomic(path, data, mode=os.fstat(old).st_mode & 0o777, keep_mode=False)
