"""The one retry policy and Retry-After parser (hermit.retry) that the transport, embedder and channels share."""

from __future__ import annotations

import email.utils

import httpx

from hermit.retry import RetryPolicy, retry_after_seconds


def test_backoff_doubles_up_to_the_cap_and_stops_after_max_retries() -> None:
    p = RetryPolicy(max_retries=4, base_delay=0.5, max_delay=3.0)
    assert [p.delay(i) for i in range(6)] == [0.5, 1.0, 2.0, 3.0, None, None]


def test_a_servers_wait_wins_and_a_long_one_is_given_up_or_capped() -> None:
    interactive = RetryPolicy(max_retries=3, max_retry_after=60.0, long_wait="give_up")
    background = RetryPolicy(max_retries=3, max_retry_after=60.0, long_wait="cap")
    for p in (interactive, background):
        assert p.delay(0, 7.0) == 7.0  # not the backoff
        assert p.delay(0, 0.0) == 0.0
        assert p.delay(3, 1.0) is None  # retries spent, whatever the server says
    assert interactive.delay(0, 61.0) is None
    assert background.delay(0, 600.0) == 60.0


def test_retry_after_forms() -> None:
    now = 1_800_000_000.0
    later = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds(httpx.Headers({"Retry-After": "7"})) == 7.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after_seconds(httpx.Headers({"retry-after": later}), now=lambda: now) == 30.0
    assert retry_after_seconds(httpx.Headers({"retry-after": "-3"})) == 0.0
    for bad in ("soon", "inf", "nan"):
        assert retry_after_seconds(httpx.Headers({"retry-after": bad})) is None
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "x", "retry-after": "2"})) == 2.0
    assert retry_after_seconds(httpx.Headers()) is None
