"""Recently seen platform event ids, bounded: platforms redeliver (Slack retries, WhatsApp webhooks)."""

from __future__ import annotations

from collections import OrderedDict


class RecentIds:
    def __init__(self, limit: int = 10_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def seen(self, event_id: str) -> bool:
        """True if `event_id` was seen before; otherwise remembers it and returns False."""
        if not event_id:
            return False
        if event_id in self._ids:
            self._ids.move_to_end(event_id)
            return True
        self._ids[event_id] = None
        if len(self._ids) > self._limit:
            self._ids.popitem(last=False)
        return False

    def forget(self, event_id: str) -> None:
        """Undo `seen` when handling failed, so the platform's redelivery is handled."""
        self._ids.pop(event_id, None)
