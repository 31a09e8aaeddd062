"""Platform HTTP calls with bounded retries: 429 (Retry-After / retry_after), 5xx and dropped connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from hermit.errors import ChannelError

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a channel tries one platform call before it gives up and reports the failure."""

    attempts: int = 5
    base_delay: float = 0.5  # doubles per attempt
    max_delay: float = 60.0  # also caps a platform's Retry-After


DEFAULT_POLICY = RetryPolicy()


def retry_after(resp: httpx.Response) -> float | None:
    """The platform's own wait: the Retry-After header (Slack, WhatsApp) or Telegram's parameters.retry_after."""
    header = resp.headers.get("retry-after")
    if header:
        with contextlib.suppress(ValueError):
            return max(0.0, float(header))
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
    last = ""
    for attempt in range(policy.attempts):
        delay = min(policy.base_delay * (2 ** attempt), policy.max_delay)
        try:
            resp = await client.request(method, url, **kwargs)
        except httpx.TransportError as e:
            last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        else:
            if resp.status_code != 429 and resp.status_code < 500:
                return resp
            last = f"HTTP {resp.status_code}"
            wait = retry_after(resp)
            if wait is not None:
                delay = min(wait, policy.max_delay)
        if attempt + 1 < policy.attempts:
            log.info("%s failed (%s); retry %d/%d in %.1fs", what, last, attempt + 1, policy.attempts - 1, delay)
            await sleep(delay)
    raise ChannelError(f"{what} failed after {policy.attempts} attempts: {last}",
                       "the platform is unreachable or overloaded; the gateway keeps the channel running and "
                       "retries the next message — check `hermit channels status` and your network")
