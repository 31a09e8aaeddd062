"""Taking a deleted message's text out of what Hermit wrote from its session afterwards (sessions/retraction.py).

A `retracted` entry hides the user message itself from every reader, but the assistant's replies may quote it
("your card 4111 1111 1111 1111 is noted"), and so may its tool calls, a compaction summary written after it and
the memory flush's notes. Those copies are scrubbed: replaced by MARK.

What counts as a copy (`Verbatim`), decided so that a user can predict it and ordinary words survive:

- a run of the deleted text of at least MIN_RUN characters, compared with whitespace collapsed and case
  ignored, that starts at the beginning of a word and ends at the end of one and holds at least one word that
  is not a common one (STOPWORDS) or holds a digit: "my password is correcthorse" makes "correcthorse battery"
  in a reply a copy, "can you tell me" never is;
- wherever it stands, a word of the deleted text that looks like a secret or an identifier: at least
  MIN_TOKEN characters mixing letters and digits (hunter22, A1B2C3, a booking code), or a number of at least
  MIN_TOKEN digits however it is grouped (a card or phone number, "4111 1111 1111 1111" = "4111-1111-1111-1111").
  A short number on its own (a 4-digit PIN, a year, a time) is not one: it would take every "2026" with it; it
  goes only inside a longer run.

A copy is only what the deleted message brought into its session: a word, number or run that another sender's
message in the session holds (the owner's, another member's — before or after it) or that the session held before
it (a reply, a tool result, a summary, its sender's own earlier message) is not one (`kept`). A group member who quoted
the owner, or guessed a code the owner later said, and deleted that message, took the owner's words out of every
later reply and the flush's notes; their message took back only what it alone said.

Where: the transcript's lines from the deleted message's on — the message itself (its text and images give
way to RETRACTED_TEXT, as every reader already shows it), the assistant's messages (text, thinking, tool-call
arguments), tool results, compaction summaries and the memory flush's entries. Never another user message (the
user's own words, even quoting it), never a line before the message, never another transcript.

How: the file is rewritten whole (a temp file in the sessions folder, fsynced, renamed over it) under the flock
every append takes (sessions/transcript.py), so a kill leaves the old file or the new one; an append waiting on
that lock opens the file again when the name has moved to the new one. Only the lines that change are encoded
again; the others keep their bytes, a damaged line included.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from hermit.durable import _remove_stale_temps, fsync_dir, held_temp, write_all
from hermit.locks import lock_fd
from hermit.sessions.entries import RETRACTED_TEXT, retract, retracted_refs
from hermit.sessions.files import open_own, read_fd

log = logging.getLogger("hermit.sessions")

MARK = "[deleted]"
MIN_RUN = 12  # characters (whitespace collapsed) of a run of the deleted text that make a copy
MIN_TOKEN = 6  # characters of a letters+digits word, or digits of a number, that make one on their own
MAX_DELETED = 20_000  # characters of the deleted text looked for (a longer message: its start)
FLUSH_ENTRY = "memory_flush"  # custom entries holding the flush's messages (agent/flush.py writes them)
NOTE_TOOLS = frozenset({"write", "edit"})  # the tools whose calls may add text to a memory note (tools/files.py)
_STOPWORD_TEXT = """
a about above after again all also am an and any are as at be because been before being below between both but by
can could did do does doing done down during each else even few for from further get got had has have having he
her here hers him his how i if in into is it its just let like me more most my no nor not now of off on once only
or other our ours out over own please same she should so some such than thank thanks that the their them then
there these they this those through to too under until up us very was we well were what when where which while
who whom why will with would yes yet you your yours hello hi okay ok sure want need know think make one two new
maybe really good great right see look tell said says
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"\w+")
_ALNUM = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s")
_SPACES = re.compile(r" {2,}")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[ \-./]\d+)*(?![\w])")
_PUNCT = "\"'`.,;:!?()[]{}<>*_~"
# Keys of a message's JSON whose strings are text someone could have quoted in; `arguments` is scrubbed whole.
_TEXT_KEYS = frozenset({"text", "thinking", "content", "errorMessage", "summary"})


def _fold(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else c  # one character for one: positions map back to the original


class _Normalized:
    """A text with whitespace as single spaces and case folded (`text`), and where each of its characters came
    from (`origin`): the runs of whitespace collapsed are kept as (position in `text`, in the original)."""

    def __init__(self, text: str) -> None:
        low = text.lower()
        if len(low) != len(text):  # a character that lowers to two (İ): one by one
            low = "".join(map(_fold, text))
        low = _SPACE.sub(" ", low)  # every whitespace character a space: positions unchanged
        pieces: list[str] = []
        self._origin: list[int] = [0]  # where each piece kept (up to a run's first space) starts in the original
        pos = 0
        for m in _SPACES.finditer(low):
            pieces.append(low[pos:m.start() + 1])
            pos = m.end()
            self._origin.append(pos)
        pieces.append(low[pos:])
        self.text = "".join(pieces)
        self._marks: list[int] = list(itertools.accumulate((len(p) for p in pieces[:-1]), initial=0))  # in `text`

    def origin(self, at: int) -> int:
        """The position in the original text of the character at `at`."""
        k = bisect.bisect_right(self._marks, at) - 1
        return self._origin[k] + (at - self._marks[k])


def _token_pattern(tokens: list[str], flags: int = re.IGNORECASE) -> re.Pattern[str] | None:
    return re.compile("(?<!\\w)(?:" + "|".join(map(re.escape, tokens)) + ")(?!\\w)", flags) if tokens else None


def _longest(norm: str, i: int, hay: str) -> int:
    """The length of the longest run from `norm[i]` that `hay` holds (at least MIN_RUN: its first gram is in it)."""
    lo, hi = MIN_RUN, min(len(norm) - i, len(hay))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if norm[i:i + mid] in hay:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _folded(texts: Iterable[str]) -> str:
    """`texts` joined by NUL, case folded and whitespace collapsed as _Normalized does (positions not kept)."""
    joined = "\x00".join(texts)
    low = joined.lower()
    if len(low) != len(joined):
        low = "".join(map(_fold, joined))
    return " ".join(low.split())


def _unshared(hay: str, other: str) -> str:
    """`hay` (the deleted text, normalized) with what `other` (the kept text, `_folded`) holds of it too — runs of
    at least MIN_RUN characters from a word's start — blanked (NUL), so that no run found later reaches into it.
    Looked for from the deleted text's word starts in the kept text as a whole (a C search each): the kept text
    may be a whole transcript."""
    shared = bytearray(len(hay))
    n, done, absent = len(hay), 0, set()
    for word in _ALNUM.finditer(hay):
        i = word.start()
        if i < done or i > n - MIN_RUN or (gram := hay[i:i + MIN_RUN]) in absent:
            continue
        if gram not in other:
            absent.add(gram)
            continue
        stop = hay.find("\x00", i)
        length = _longest(hay[:stop] if stop >= 0 else hay, i, other)
        shared[i:i + length] = b"\x01" * length
        done = i + length
    if not any(shared):
        return hay
    return "".join("\x00" if mark else c for c, mark in zip(hay, shared, strict=True))


def _secretish(word: str) -> bool:
    return len(word) >= MIN_TOKEN and any(c.isdigit() for c in word) and any(c.isalpha() for c in word)


@dataclass(frozen=True)
class Verbatim:
    """The rule for copies of one deleted message (see the module's rules), built from its text(s)."""

    texts: tuple[str, ...]
    # Text the session holds apart from the deleted message (see the module's rules): what of the deleted text it
    # holds too is no copy. Only used to build the rule, never kept (a rule is kept in memory for an hour).
    kept: InitVar[Iterable[str]] = ()
    _hay: str = field(init=False, repr=False)
    _grams: frozenset[str] = field(init=False, repr=False)
    _tokens: re.Pattern[str] | None = field(init=False, repr=False)
    _numbers: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self, kept: Iterable[str]) -> None:
        other = _folded(k for k in kept if k)
        parts = [_Normalized(t[:MAX_DELETED]).text.strip() for t in self.texts]
        hay = "\x00".join(parts)
        grams = frozenset(g for i in range(len(hay) - MIN_RUN + 1) if "\x00" not in (g := hay[i:i + MIN_RUN]))
        if other and grams:
            hay = _unshared(hay, other)
            grams = frozenset(g for i in range(len(hay) - MIN_RUN + 1) if "\x00" not in (g := hay[i:i + MIN_RUN]))
        words = {w.strip(_PUNCT) for t in self.texts for w in t[:MAX_DELETED].split()}
        tokens = sorted({w for w in words if _secretish(w)}, key=len, reverse=True)
        pattern = _token_pattern(tokens)
        if other and pattern is not None:
            folded = _token_pattern([t.lower() for t in tokens], 0)
            held = {m.group(0) for m in folded.finditer(other)} if folded is not None else set()
            pattern = _token_pattern([t for t in tokens if t.lower() not in held])
        numbers = frozenset(d for t in self.texts for m in _NUMBER.finditer(t[:MAX_DELETED])
                            if len(d := re.sub(r"\D", "", m.group(0))) >= MIN_TOKEN)
        if other and numbers:
            numbers -= {re.sub(r"\D", "", m.group(0)) for m in _NUMBER.finditer(other)}
        object.__setattr__(self, "_hay", hay)
        object.__setattr__(self, "_grams", grams)
        object.__setattr__(self, "_tokens", pattern)
        object.__setattr__(self, "_numbers", numbers)

    @property
    def empty(self) -> bool:
        return not (self._grams or self._tokens is not None or self._numbers)

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` with every copy replaced by MARK, and how many were."""
        if self.empty or not text:
            return text, 0
        spans = list(self._runs(text))
        count = len(spans)
        for start, end in reversed(spans):
            text = text[:start] + MARK + text[end:]
        if self._tokens is not None:
            text, n = self._tokens.subn(MARK, text)
            count += n
        if self._numbers:
            def number(m: re.Match[str]) -> str:
                nonlocal count
                if re.sub(r"\D", "", m.group(0)) in self._numbers:
                    count += 1
                    return MARK
                return m.group(0)
            text = _NUMBER.sub(number, text)
        return text, count

    def _runs(self, text: str) -> Iterator[tuple[int, int]]:
        """Spans of `text` (original positions) that are runs of the deleted text (see the module's rules)."""
        if not self._grams:
            return
        normalized = _Normalized(text)
        norm, n, done = normalized.text, len(normalized.text), 0
        for word in _ALNUM.finditer(norm):  # a run starts where a word does
            i = word.start()
            if i < done or i > n - MIN_RUN or norm[i:i + MIN_RUN] not in self._grams:
                continue
            end = i + _longest(norm, i, self._hay)  # the longest run from i that the deleted text holds
            if end < n and norm[end - 1].isalnum() and norm[end].isalnum():
                while end > i and norm[end - 1].isalnum():  # it ends inside a word: back to that word's start
                    end -= 1
            while end > i and not norm[end - 1].isalnum():
                end -= 1
            run = norm[i:end]
            if len(run) >= MIN_RUN and any(w not in STOPWORDS or any(c.isdigit() for c in w) for w in _WORD.findall(run)):
                yield normalized.origin(i), normalized.origin(end - 1) + 1
                done = end


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


@dataclass
class Scrubbed:
    """What a transcript's scrub changed: copies per kind of line, never the text."""

    path: Path
    copies: dict[str, int] = field(default_factory=dict)

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


def _user_text(message: dict[str, Any]) -> str:
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
    if known is None and not any(o is not None and _is_deleted(o, ref) and _user_text(o["message"]).strip()
                                 and _user_text(o["message"]) != RETRACTED_TEXT for o in objs):
        return None  # never recorded, or scrubbed already: nothing to look for
    texts: list[str] = []
    kept: list[str] = []  # what the session holds apart from it (the module's rules)
    first = known.line if known is not None else 0
    calls: list[tuple[str, dict[str, Any]]] = []
    for number, obj in enumerate(objs, start=1):
        if obj is None:
            continue
        message = obj.get("message")
        if _is_deleted(obj, ref):
            text = _user_text(obj["message"])
            if text.strip() and text != RETRACTED_TEXT:
                texts.append(text)
                first = first or number
        elif obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "user":
            if message.get("ref") not in gone and (number < at or _sender_id(message) != by):  # before, or another's
                kept.append(_user_text(message))
        elif number < at:  # before it: the session held that already
            kept.extend(_texts_of(obj))
        elif obj.get("type") == "custom" and obj.get("customType") == FLUSH_ENTRY:
            message = obj.get("data", {}).get("message") if isinstance(obj.get("data"), dict) else None
            calls.extend(_note_calls(message))
        elif obj.get("type") == "message" and isinstance(message, dict) and message.get("role") == "assistant":
            calls.extend(_note_calls(message))  # a turn's own write or edit: the model took a note
    if texts:
        return Deleted(ref, Verbatim(tuple(texts), kept), first, tuple(calls))
    return Deleted(ref, Verbatim(known.rule.texts, kept), known.line, tuple(calls)) if known is not None else None


def _note_calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    """The write and edit calls (NOTE_TOOLS) of an assistant message: what may have added text to a note."""
    return [(part["name"], part["arguments"]) for part in (message.get("content") or ()
                                                           if isinstance(message, dict) else ())
            if isinstance(part, dict) and part.get("type") == "toolCall" and part.get("name") in NOTE_TOOLS
            and isinstance(part.get("arguments"), dict)]


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


def find_deleted(path: Path, ref: str, known: Deleted | None = None) -> Deleted | None:
    """`deleted_in` of the transcript at `path` as it is now."""
    fd, st = open_own(path, os.O_RDONLY, "the transcript")
    try:
        data = read_fd(fd, st.st_size)
    finally:
        os.close(fd)
    return deleted_in(map(_obj, _lines(data)), ref, known)


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


def _scrub_line(obj: dict[str, Any], ref: str, rule: Verbatim, report: Scrubbed) -> dict[str, Any] | None:
    """The line's object with copies scrubbed, or None when nothing of it changes."""
    count = 0

    def clean(text: str) -> str:
        nonlocal count
        new, n = rule.scrub(text)
        count += n
        return new

    kind = obj.get("type")
    message = obj.get("message")
    if _is_deleted(obj, ref):
        assert isinstance(message, dict)
        new_message = retract(message, {ref})
        if new_message.get("content") == message.get("content"):
            return None
        report.add("message", 1)
        return {**obj, "message": new_message}
    if kind == "message" and isinstance(message, dict) and message.get("role") != "user":
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


def scrub_transcript(path: Path, deleted: Deleted) -> Scrubbed:
    """Scrub the copies of `deleted` in the transcript at `path` (see the module's rules): one atomic rewrite
    under the transcript's lock, or nothing when no line changes. Raises OSError / SessionError when it
    cannot read or replace the file (it is then as it was)."""
    report = Scrubbed(path)
    fd = _open_locked(path)
    try:
        data = read_fd(fd, os.fstat(fd).st_size)
        lines = _lines(data)
        out: list[bytes] = []
        changed = False
        for number, raw in enumerate(lines, start=1):
            obj = _obj(raw) if number >= deleted.line else None
            new = _scrub_line(obj, deleted.ref, deleted.rule, report) if obj is not None else None
            if new is None:
                out.append(raw)
                continue
            out.append(json.dumps(new, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
            changed = True
        if changed:
            _replace(path, fd, b"\n".join(out) + b"\n")
    finally:
        os.close(fd)  # releases the lock, after the new file has the name
    if changed:
        log.info("scrubbed a deleted message from %s: %s", path.name,
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
    _remove_stale_temps(path)
    tmp_fd, tmp = held_temp(path)
    try:
        try:
            write_all(tmp_fd, data)
            os.fchmod(tmp_fd, os.fstat(old).st_mode & 0o777)
            os.replace(tmp, path)
        finally:
            os.close(tmp_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
