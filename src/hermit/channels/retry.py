"""Platform HTTP calls with bounded retries: 429 (Retry-After / retry_after), 5xx and dropped connections.

The policy and the Retry-After header parser are hermit.retry's; a channel's send is background work,
so a platform's long wait is shortened to the policy's `max_retry_after` and tried again rather than
given up (`long_wait="cap"`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from hermit.errors import ChannelError
from hermit.retry import RetryPolicy, retry_after_seconds

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

# Five attempts, 0.5 s doubling; a platform's Retry-After is honoured up to a minute.
DEFAULT_POLICY = RetryPolicy(max_retries=4, base_delay=0.5, max_delay=60.0, max_retry_after=60.0, long_wait="cap")


def retry_after(resp: httpx.Response) -> float | None:
    """The platform's own wait: the Retry-After header (Slack, WhatsApp) or Telegram's parameters.retry_after."""
    header = retry_after_seconds(resp.headers)
    if header is not None:
        return header
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        value = resp.json().get("parameters", {}).get("retry_after")
        if value is not None:
            return max(0.0, float(value))
    return None


async def request(client: httpx.AsyncClient, method: str, url: str, *, what: str,
                  policy: RetryPolicy = DEFAULT_POLICY, sleep: Sleep = asyncio.sleep,
                  **kwargs: Any) -> httpx.Response:
    """One platform call, retried on 429, 5xx and transport errors; other statuses are returned as they are.

    A dropped connection is retried like a 5xx: the fakes and the real platforms answer a request they did
    not process with a reset, so a retry delivers the message once. (A reset *after* the platform acted
    cannot be told apart over plain HTTP; no platform here offers an idempotency key for sends.)
    """
    attempts = policy.max_retries + 1
    attempt = 0
    while True:
        wait: float | None = None
        try:
            resp = await client.request(method, url, **kwargs)
        except httpx.TransportError as e:
            last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        else:
            if resp.status_code != 429 and resp.status_code < 500:
                return resp
            last = f"HTTP {resp.status_code}"
            wait = retry_after(resp)
        delay = policy.delay(attempt, wait)
        if delay is None:
            break
        attempt += 1
        log.info("%s failed (%s); retry %d/%d in %.1fs", what, last, attempt, attempts - 1, delay)
        await sleep(delay)
    raise ChannelError(f"{what} failed after {attempts} attempts: {last}",
                       "the platform is unreachable or overloaded; the gateway keeps the channel running and "
                       "retries the next message — check `hermit channels status` and your network")
