"""Platform event ids already handled, kept in a file: platforms redeliver (Slack retries, WhatsApp webhooks)
and a signed request can be captured and replayed, after a restart too. Slack's signature is accepted
within 5 minutes either side of its timestamp, so its ids are needed for minutes; WhatsApp's signature has
no timestamp, so the id and the message's own timestamp are all that tell an old delivery from a new one,
for the 24 hours such a message is accepted.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from hermit.durable import write_atomic

log = logging.getLogger(__name__)


class SeenIds:
    """Message ids with the time each message was sent, kept in `path` (JSON `{"ids": {id: epoch}, "floor":
    epoch}`; `path=None` keeps them in memory only, for a channel built without a state dir).

    `seen` claims an id in memory (a redelivery racing the first delivery is dropped); `commit` writes
    it to the file once the message was handed on, so a crash in between means a redelivery is handled
    again rather than lost. Ids are dropped only by age, once older than `max_age` (the channel refuses
    such messages by their timestamp, or their signature has expired). `limit` (None: no limit) bounds
    memory without forgetting a fresh id: when a flood fills it, the ids sent longest ago are let go and
    the newest sent time among them becomes the floor, and a message sent at or before the floor (or
    without a time while one holds) counts as seen — refused, since it could be one of those let go. An
    empty id cannot be told from a replay and counts as seen too. A file that cannot be read is reported
    and replaced, never fatal: losing it only weakens replay protection back to the timestamp check.
    """

    def __init__(self, path: Path | None, *, max_age: float, limit: int | None = 5_000,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._max_age = max_age
        self._limit = limit
        self._clock = clock
        self._ids: dict[str, float] = {}
        self._claimed: set[str] = set()
        self._floor = -math.inf
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as e:
            log.warning("could not read the seen message ids in %s (%s): starting without them; messages "
                        "older than the freshness bound are still refused", self.path, e)
            return
        try:
            data = json.loads(raw)
            entries = sorted(((float(at), str(mid)) for mid, at in data["ids"].items()))
            # A time that is not a finite number (NaN, 1e999) would never be pruned, nor compare sanely.
            entries = [(at, mid) for at, mid in entries if math.isfinite(at)]
            floor = float(data.get("floor", -math.inf))
        # ArithmeticError: an integer too large for a float; RecursionError: JSON nested too deep.
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError) as e:
            log.warning("the seen message ids in %s are corrupt (%s): ignoring the file, it is rewritten with "
                        "the next message; messages older than the freshness bound are still refused", self.path, e)
            return
        for at, mid in entries:
            self._ids[mid] = at
        if math.isfinite(floor):
            self._floor = floor
        self._prune()

    def seen(self, message_id: str, sent_at: float | None = None) -> bool:
        """True if the id was handled before (in this run or, from the file, an earlier one), is being
        handled now, or cannot be told from one of those (no id; sent at or before the floor); otherwise
        claims it and returns False."""
        if not message_id or message_id in self._ids or message_id in self._claimed:
            return True
        if self._floor_holds() and (sent_at is None or sent_at <= self._floor):
            return True
        self._claimed.add(message_id)
        return False

    def forget(self, message_id: str) -> None:
        """Release a claim whose handling failed, so the platform's redelivery is handled."""
        self._claimed.discard(message_id)

    def commit(self, message_id: str, sent_at: float) -> None:
        """Record a handled id durably; raises OSError when the file cannot be written (the id stays
        known in memory)."""
        self._claimed.discard(message_id)
        if not message_id:
            return
        self._ids[message_id] = sent_at
        self._prune()
        if self.path is None:
            return
        data: dict[str, object] = {"ids": self._ids}
        if self._floor_holds():
            data["floor"] = self._floor
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(data, ensure_ascii=False))

    def _floor_holds(self) -> bool:
        return self._floor >= self._clock() - self._max_age

    def _prune(self) -> None:
        oldest = self._clock() - self._max_age
        for mid in [m for m, at in self._ids.items() if at < oldest]:
            del self._ids[mid]
        if self._limit is None or len(self._ids) <= self._limit:
            return
        let_go = heapq.nsmallest(len(self._ids) - self._limit, self._ids.items(), key=lambda item: item[1])
        if not self._floor_holds():
            log.warning("%d message ids were seen within %.0f hours, the most kept: messages sent before the "
                        "oldest one kept are refused as possible replays until it is %.0f hours old",
                        self._limit, self._max_age / 3600, self._max_age / 3600)
        for mid, _ in let_go:
            del self._ids[mid]
        self._floor = max(self._floor, let_go[-1][1])
