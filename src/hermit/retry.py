"""When to try a failed HTTP call again: one backoff policy and one Retry-After parser for every client.

The model transport, the remote embedder and the chat channels each keep their own loop, because
what they do between attempts differs (a deadline and a cancel token for a model call, a log line
for a channel, an asyncio sleep or a blocking one); what they share is decided here: how many
retries, how long each wait is, how a server's `Retry-After` is read, and what happens when a server
asks for a wait longer than the caller will honour.

Written in-house rather than with tenacity or stamina: the rules are a dozen lines, while those
libraries would need custom stop, wait and sleep hooks for the transport's deadline and cancel token
and for waits taken from the response, plus a dependency, and stamina adds jitter that would change
the waits the tests and the retry notices show.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

LongWait = Literal["give_up", "cap"]


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one call is tried: `max_retries` after the first attempt, waiting `base_delay` doubled per
    retry up to `max_delay`, unless the server said how long to wait (`Retry-After`).

    A server's wait longer than `max_retry_after` is either not waited for at all (`long_wait="give_up"`:
    an interactive call fails at once and its error names the wait) or shortened to `max_retry_after`
    (`"cap"`: background work such as indexing or a channel's send tries again after that long).
    """

    max_retries: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    long_wait: LongWait = "give_up"

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (0 for the first) when the server named none."""
        return float(min(self.max_delay, self.base_delay * (2 ** retry)))

    def delay(self, retry: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry number `retry` (0 for the first), or None: give up now."""
        if retry >= self.max_retries:
            return None
        if retry_after is None:
            return self.backoff(retry)
        if retry_after > self.max_retry_after:
            return None if self.long_wait == "give_up" else self.max_retry_after
        return max(0.0, retry_after)


def retry_after_seconds(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """The wait a response asks for, in seconds: `retry-after-ms` (OpenAI, Anthropic), else `Retry-After`
    as seconds or as an HTTP date. None when absent or unreadable; never negative or infinite.

    `headers` must look names up case-insensitively (httpx.Headers does)."""
    ms = headers.get("retry-after-ms")
    if ms:
        seconds = _number(ms)
        if seconds is not None:
            return seconds / 1000.0
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None
