"""A message handed to the gateway only after the edits and deletes that came before it in its conversation.

discord.py runs each event's handler as a task of its own, so a delete's handler that awaits (a channel fetched,
the bus writing the retraction) can be overtaken by the next message's. A sender deleting a message and at once
writing the next ("my card is …", deleted, "oops, wrong chat") had the next message's turn start before the
retraction was written, and the deleted text went to the model once more (s21). A change (edit, delete) is
`pending` while its handler runs; a message notes the changes pending as it arrives (before its handler's first
await) and waits for them just before it is published. Changes themselves wait for nothing (the gateway takes a
change of a message it has not seen yet), and messages do not wait for each other (a download stays side by side).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Earlier = tuple["asyncio.Future[None]", ...]


class InOrder:
    """The changes being handled, per conversation key (a channel id)."""

    def __init__(self) -> None:
        self._pending: dict[str, set[asyncio.Future[None]]] = {}

    @contextmanager
    def pending(self, key: str) -> Iterator[None]:
        """A change's handler runs inside this: messages arriving meanwhile wait for it."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, set()).add(mine)
        try:
            yield
        finally:
            mine.set_result(None)
            left = self._pending.get(key)
            if left is not None:
                left.discard(mine)
                if not left:
                    del self._pending[key]

    def earlier(self, key: str) -> Earlier:
        """The changes pending now: taken as a message arrives."""
        return tuple(self._pending.get(key, ()))


# A change's handler may ask Discord for its channel (an archived thread): one that hangs holds the conversation's
# next message this long at most, then it is handed on as before.
MAX_WAIT_SECONDS = 30.0


async def after(earlier: Earlier, timeout: float = MAX_WAIT_SECONDS) -> None:
    """Wait until those changes were handed on (or dropped), at most `timeout` seconds."""
    if earlier:
        await asyncio.wait(earlier, timeout=timeout)  # (never cancels them)


class BySentTime:
    """Messages of one conversation handed on in the order they were sent, when their handlers overlap.

    WhatsApp delivers each message in a webhook of its own, and Meta sends them in parallel and retries failed ones:
    a text sent after a photo was handed on while the photo still downloaded, and the model read "yes, that one"
    before the photo it answers (s22). A message is `running` from its webhook's start until it is handed on (or
    dropped); before it is handed on it waits for the messages of its conversation still running that were sent
    before it (the platform's timestamp; the same second: the one whose webhook came first). It never waits for a
    message not delivered yet (that would hold every message for a guess), nor for one sent after it, so two never
    wait for each other; a download that hangs holds the next message MAX_WAIT_SECONDS at most."""

    def __init__(self) -> None:
        self._running: dict[str, dict[asyncio.Future[None], tuple[float, int]]] = {}
        self._arrived = 0

    @contextmanager
    def running(self, key: str, sent_at: float) -> Iterator[Callable[[], Earlier]]:
        """Yields `before()`: the messages of `key` still running that were sent before this one, taken just before
        it is handed on."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._arrived += 1
        place = (sent_at, self._arrived)
        chat = self._running.setdefault(key, {})
        chat[mine] = place

        def before() -> Earlier:
            return tuple(f for f, at in self._running.get(key, {}).items() if at < place)

        try:
            yield before
        finally:
            mine.set_result(None)
            left = self._running.get(key)
            if left is not None:
                left.pop(mine, None)
                if not left:
                    del self._running[key]
