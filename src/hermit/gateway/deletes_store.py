"""Platform deletes that found no message yet, remembered across restarts (gateway/bus.py `_remember_delete`).

A message can come after its own delete: platforms reorder events, Slack and WhatsApp retry webhooks. The bus
remembers such a delete so the message, when it comes, is neither answered nor stored. Kept in memory only,
that memory was gone after a restart, and the message was answered and its text written to the transcript.

So each one is written, before the delete is acknowledged to the platform, to `<state>/channels/deletes.json`
(0600, written atomically through durable.write_atomic: a kill -9 mid-write leaves the old file or the new one),
under the lock file `deletes.json.lock` (flock: a second process's additions are read and kept, not
overwritten). Bounded as in memory: the last DELETES_KEPT, at most DELETES_PER_SENDER of one sender on one channel
account, whatever the chat (anyone may send deletes: a stranger's flood evicts only their own, however many
channels of a server they post in), and of deletes that name nobody in one chat, and each for DELETE_KEPT_SECONDS — a
message sent longer ago than that is not redelivered any more (WhatsApp refuses one older than 24 hours, Slack
retries for minutes). A file that cannot be read (damaged, a link, another user's) is logged and renamed aside
(`deletes.json.corrupt-<time>`), never fatal: Hermit goes on with what it remembers in memory.

    {"version": 1, "deletes": [["whatsapp", "default", "1555", "wamid.X", "1555", 1767000000.0], ...]}

Each entry is (channel, account, peer, message id, who deleted — "" when the platform did not say, time), oldest
first.

The same file keeps the sessions whose deleted messages are hidden but not yet scrubbed (`scrubs`, gateway/bus.py:
a delete of a recorded message writes its `retracted` entry and this, before it is acknowledged; the copies are
scrubbed after, a batch of them in one rewrite of the transcript): after a kill, the gateway scrubs them when it
starts again. Each is (agent, session key, session id, time); at most SCRUBS_KEPT, the oldest forgotten first (its
transcript is scrubbed with the next delete in that session, which scrubs every message it hides and still holds):

    {"version": 1, "deletes": [...], "scrubs": [["main", "agent:main:whatsapp:dm:1555", "5f0c…", 1767000000.0]]}
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from hermit.config.paths import not_own_opened
from hermit.durable import write_atomic
from hermit.locks import locked

log = logging.getLogger("hermit.gateway")

DELETES_KEPT = 1024  # deletes that found nothing, remembered for a message coming after its delete
DELETES_PER_SENDER = 64  # ...of which one sender's in one chat: their flood evicts only their own
DELETE_KEPT_SECONDS = 24 * 3600.0  # ...each for as long as its message may still be delivered
DELETES_FILE = "deletes.json"
_VERSION = 1
_MAX_BYTES = 4 << 20  # far more than DELETES_KEPT entries take: a bigger file is not ours

SCRUBS_KEPT = 1024  # sessions whose hidden messages' copies are still to be scrubbed
Key = tuple[str, str, str, str]  # channel, account, peer, message id
Scrub = tuple[str, str, str]  # agent, session key, session id: a transcript whose hidden messages are not scrubbed
_Entries = OrderedDict[Key, tuple[str, float]]
_Scrubs = OrderedDict[Scrub, float]


def deletes_path(state_dir: Path) -> Path:
    return state_dir / "channels" / DELETES_FILE


class RememberedDeletes:
    """Deletes that found nothing: `deleter(key)` says who deleted a message not seen yet, `remember` adds one
    (and writes the file before it returns). `path=None` keeps them in memory only (a bus built without a state
    dir). `remember` blocks on file I/O: call it off the event loop."""

    def __init__(self, path: Path | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._guard = threading.Lock()  # one remember at a time in this process (the flock is between processes)
        self._stamp: tuple[int, int, int] | None = None  # the file as last read or written
        self._entries: OrderedDict[Key, tuple[str, float]] = OrderedDict()
        self._scrubs: OrderedDict[Scrub, float] = OrderedDict()
        if path is not None:
            with self._guard:
                loaded = self._read()
                if loaded is not None:
                    self._entries, self._scrubs = loaded

    def deleter(self, key: Key) -> str | None:
        """Who deleted the message `key` names ("" when the platform did not say), or None when no delete of it
        is remembered (or it is older than DELETE_KEPT_SECONDS)."""
        found = self._entries.get(key)
        if found is None or found[1] < self._clock() - DELETE_KEPT_SECONDS:
            return None
        return found[0]

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, key: Key, sender: str) -> None:
        """Remember the delete of `key` by `sender`; written to the file (with what another process added to it
        meanwhile) before this returns. OSError when it cannot be written: it is still remembered in memory."""
        now = self._clock()
        self._update(lambda entries, scrubs: (_bounded(entries, key, sender, now), scrubs))

    def scrubs(self) -> list[Scrub]:
        """The transcripts whose hidden messages are still to be scrubbed, oldest first."""
        return list(self._scrubs)

    def want_scrub(self, scrub: Scrub) -> None:
        """Remember that `scrub`'s transcript hides messages not scrubbed yet; written before this returns
        (OSError when it cannot be: remembered in memory)."""
        now = self._clock()

        def add(entries: _Entries, scrubs: _Scrubs) -> tuple[_Entries, _Scrubs]:
            out = OrderedDict((k, v) for k, v in scrubs.items() if k != scrub)
            out[scrub] = max(now, scrubs.get(scrub, -math.inf) + 0.001)  # later than the one a batch started from
            while len(out) > SCRUBS_KEPT:
                log.warning("more than %d sessions with deleted messages to scrub: session %s is scrubbed with its "
                            "next delete", SCRUBS_KEPT, out.popitem(last=False)[0][1])
            return entries, out

        self._update(add)  # its time too, when it was wanted already: a batch running now may not have seen it

    def wanted(self, scrub: Scrub) -> float | None:
        """When `scrub` was last wanted (a stamp `scrubbed` takes), or None."""
        return self._scrubs.get(scrub)

    def scrubbed(self, scrub: Scrub, stamp: float) -> None:
        """`scrub`'s transcript was scrubbed of what it hid when it was wanted at `stamp` (`wanted`): forgotten,
        unless it was wanted again since (a delete that came while the batch ran)."""
        def drop(entries: _Entries, scrubs: _Scrubs) -> tuple[_Entries, _Scrubs]:
            return entries, OrderedDict((k, v) for k, v in scrubs.items() if k != scrub or v > stamp)

        self._update(drop)

    def _update(self, change: Callable[[_Entries, _Scrubs], tuple[_Entries, _Scrubs]]) -> None:
        """Apply `change` to what is remembered (with what another process wrote meanwhile) and write the file
        before returning."""
        with self._guard:
            if self.path is None:
                self._entries, self._scrubs = change(self._entries, self._scrubs)
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with locked(self.path.with_name(self.path.name + ".lock")):
                current = self._read() if self._changed() else None
                base = current if current is not None else (self._entries, self._scrubs)
                self._entries, self._scrubs = change(*base)
                write_atomic(self.path, _dump(self._entries, self._scrubs), mode=0o600, keep_mode=False)
                self._stamp = _stamp_of(self.path)

    def _changed(self) -> bool:
        """Whether the file is not the one this process last read or wrote (another process wrote it)."""
        assert self.path is not None
        return _stamp_of(self.path) != self._stamp

    def _read(self) -> tuple[_Entries, _Scrubs] | None:
        """The file's entries still in force; None when there is no file, or it could not be read (then it is
        logged and renamed aside)."""
        assert self.path is not None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            self._stamp = None
            return None
        except OSError as e:  # a symlink (ELOOP), unreadable
            self._aside(f"cannot be opened ({e.strerror})")
            return None
        try:
            st = os.fstat(fd)
            why = not_own_opened(st)
            if why is None and st.st_size > _MAX_BYTES:
                why = f"is {st.st_size} bytes, far more than {DELETES_KEPT} deletes take"
            data = b"" if why is not None else os.read(fd, _MAX_BYTES + 1)
        except OSError as e:  # an I/O error: not fatal either
            why = f"cannot be read ({e.strerror})"
        finally:
            os.close(fd)
        if why is not None:
            self._aside(why)
            return None
        try:
            entries = _parse(json.loads(data.decode("utf-8")), self._clock())
        # ArithmeticError: an integer too large for a float; RecursionError: JSON nested too deep.
        except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as e:
            self._aside(f"is damaged ({e})")
            return None
        self._stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        return entries

    def _aside(self, why: str) -> None:
        """Rename the unreadable file to `deletes.json.corrupt-<time>[-n]` (a name not taken), and say so."""
        assert self.path is not None
        stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%dT%H%M%SZ")
        aside, n = self.path.with_name(f"{self.path.name}.corrupt-{stamp}"), 1
        while aside.exists() or aside.is_symlink():
            aside, n = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}"), n + 1
        try:
            os.rename(self.path, aside)
        except OSError as e:
            log.error("the remembered deletes in %s %s, and could not be moved aside (%s): Hermit goes on with "
                      "those it remembers in memory; remove the file", self.path, why, e.strerror)
            return
        self._stamp = None
        log.error("the remembered deletes in %s %s: moved it to %s; Hermit goes on with those it remembers in "
                  "memory (a message deleted before it arrived, during the last %.0f hours, may be answered)",
                  self.path, why, aside.name, DELETE_KEPT_SECONDS / 3600)


def _stamp_of(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _bounded(entries: OrderedDict[Key, tuple[str, float]], key: Key, sender: str,
             now: float) -> OrderedDict[Key, tuple[str, float]]:
    """`entries` with the delete of `key` by `sender` added last, those expired dropped, at most DELETES_PER_SENDER
    of `sender` on `key`'s channel account (of deletes naming nobody: in `key`'s chat) and DELETES_KEPT in all (the
    oldest go). A new dict: readers keep the old one."""
    oldest = now - DELETE_KEPT_SECONDS
    out = OrderedDict((k, v) for k, v in entries.items() if v[1] >= oldest and k != key)
    out[key] = (sender, now)
    # One sender's on the whole channel account (a stranger in a server of many channels deleted as many in each,
    # and evicted everyone's); a delete that names nobody, per chat: "" is not one sender.
    scope = 2 if sender else 3
    theirs = [k for k, (who, _) in out.items() if who == sender and k[:scope] == key[:scope]]
    for old in theirs[:-DELETES_PER_SENDER]:
        del out[old]
    while len(out) > DELETES_KEPT:
        out.popitem(last=False)
    return out


def _dump(entries: _Entries, scrubs: _Scrubs) -> str:
    rows = [[*k, who, at] for k, (who, at) in entries.items()]
    data: dict[str, object] = {"version": _VERSION, "deletes": rows}
    if scrubs:
        data["scrubs"] = [[*k, at] for k, at in scrubs.items()]
    return json.dumps(data, ensure_ascii=False) + "\n"


def _parse(data: object, now: float) -> tuple[_Entries, _Scrubs]:
    return _parse_deletes(data, now), _parse_scrubs(data)


def _parse_scrubs(data: object) -> _Scrubs:
    rows = data.get("scrubs", []) if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError("malformed scrubs")
    out: _Scrubs = OrderedDict()
    for row in rows:
        if not (isinstance(row, list) and len(row) == 4 and all(isinstance(x, str) for x in row[:3])
                and isinstance(row[3], int | float) and not isinstance(row[3], bool) and math.isfinite(row[3])):
            raise ValueError(f"malformed scrub {str(row)[:80]!r}")
        out[(row[0], row[1], row[2])] = float(row[3])
    while len(out) > SCRUBS_KEPT:
        out.popitem(last=False)
    return out


def _parse_deletes(data: object, now: float) -> _Entries:
    if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("deletes"), list):
        raise ValueError(f"not a version {_VERSION} deletes file")
    out: OrderedDict[Key, tuple[str, float]] = OrderedDict()
    oldest = now - DELETE_KEPT_SECONDS
    for row in data["deletes"]:
        if not (isinstance(row, list) and len(row) == 6 and all(isinstance(x, str) for x in row[:5])
                and isinstance(row[5], int | float) and not isinstance(row[5], bool) and math.isfinite(row[5])):
            raise ValueError(f"malformed entry {str(row)[:80]!r}")
        if row[5] >= oldest:
            out[(row[0], row[1], row[2], row[3])] = (row[4], float(row[5]))
    while len(out) > DELETES_KEPT:  # a file written by hand: no more than Hermit keeps
        out.popitem(last=False)
    return out
