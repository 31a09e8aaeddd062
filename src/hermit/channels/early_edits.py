"""Edits that come before their message is handed to the gateway.

A channel hands a message on only once its files are downloaded (WhatsApp's media, a Discord attachment: seconds),
and a platform may deliver an edit before the message it names (WhatsApp's webhooks are not ordered; a delivery
that failed is retried later). The gateway changes only a message it holds (gateway/bus.py), so such an edit
changed nothing and the message then ran with its first text: a PIN typed as a photo's caption and at once edited
out was answered and kept. The channel keeps the newest text of each such edit here, by (sender, message id), and
gives it to the message when it is handed on (each time: a failed hand-on is retried).

Bounded: anyone may send edits naming made-up ids, so at most PER_SENDER of one sender (their oldest go first,
never another sender's) and MAX_KEPT in all (the oldest first). Memory only: a restart forgets them, as it forgets
a message still downloading.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_KEPT = 512
PER_SENDER = 16


class EarlyEdits:
    def __init__(self, max_kept: int = MAX_KEPT, per_sender: int = PER_SENDER) -> None:
        self.max_kept = max_kept
        self.per_sender = per_sender
        self._kept: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._count: dict[str, int] = {}
        self._at: dict[tuple[str, str], float] = {}  # the time of the edit kept, when the platform said it

    def keep(self, sender: str, message_id: str, text: str, at: float | None = None) -> bool:
        """The text `sender`'s message `message_id` has now (the last edit wins). With `at`, the platform's time of
        the edit (WhatsApp delivers two edits in no defined order): an edit made before the one kept is not taken,
        and False says so (it must change nothing further on)."""
        key = (sender, message_id)
        if at is not None and self._at.get(key, at) > at:
            return False
        if at is not None:
            self._at[key] = at
        if key in self._kept:
            self._kept[key] = text
            self._kept.move_to_end(key)
            return True
        if self._count.get(sender, 0) >= self.per_sender:
            self._drop(next(k for k in self._kept if k[0] == sender))
        while len(self._kept) >= self.max_kept:
            self._drop(next(iter(self._kept)))
        self._kept[key] = text
        self._count[sender] = self._count.get(sender, 0) + 1
        return True

    def newest(self, sender: str, message_id: str) -> str | None:
        """The edited text of this message, if an edit of its sender came first. Kept, not taken: a delivery whose
        publish fails is delivered again (Slack, WhatsApp) and must get the same text; the bounds drop it."""
        return self._kept.get((sender, message_id))

    def _drop(self, key: tuple[str, str]) -> None:
        del self._kept[key]
        self._at.pop(key, None)
        left = self._count[key[0]] - 1
        if left:
            self._count[key[0]] = left
        else:
            del self._count[key[0]]
