"""Session reset policy: when a session has expired (daily / idle / both) and parsing /new and /reset (SPEC §11).

Pure functions over explicit datetimes, so the caller injects the clock and the timezone (the agent's
`timezone` setting, else the machine's local zone); reset is evaluated when the next message arrives.

Decisions:

- Daily: a session expires when a local `at_hour`:00 boundary lies in (last_activity, now]. Boundaries
  are computed on local calendar dates with zoneinfo and compared in UTC, so DST days are right: on a
  spring-forward day an `at_hour` that does not exist (02:00 in New York) falls at the transition
  instant; on a fall-back day the first of the two occurrences counts (fold=0).
- Idle: expired when now − last_activity ≥ idle_minutes (elapsed real time, not wall-clock time).
- Both: whichever expires first; the reason names the one whose expiry instant is earlier.
- Mode "off" never expires (for channels or chat types that should only reset on /new).
- Precedence: reset_by_channel over reset_by_type over reset, key by key (partial overrides).
- Reset commands are matched case-insensitively as a whole word at the start of the message (after
  whitespace), optionally with a Telegram-style `@botname` suffix; "/newt" is not "/new".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Literal, NamedTuple, TypeAlias

from hermit.config.schema import ResetModeName, ResetOverride, SessionConfig
from hermit.sessions.keys import ChatType

ResetMode: TypeAlias = ResetModeName
ResetReason: TypeAlias = Literal["daily", "idle"]


@dataclass(frozen=True)
class ResetPolicy:
    """The resolved reset policy of one session."""

    mode: ResetMode = "daily"
    at_hour: int = 4
    idle_minutes: int = 60


class ResetCheck(NamedTuple):
    """Whether the session has expired, and why ("daily" or "idle"; None when it has not)."""

    expired: bool
    reason: ResetReason | None


class ResetCommand(NamedTuple):
    """A parsed message: `command` is the configured trigger that matched, `rest` the text after it.

    For a message that is not a reset command, `rest` is the message unchanged.
    """

    is_reset: bool
    command: str | None
    rest: str


def resolve_reset_policy(cfg: SessionConfig, chat_type: ChatType | None, channel: str | None) -> ResetPolicy:
    """The policy for a chat: the default, overridden by its chat type, overridden by its channel.

    `chat_type` None (cron and sub-agent sessions) and unknown channels use what is left.
    """
    base = cfg.reset
    policy = ResetPolicy(mode=base.mode, at_hour=base.at_hour, idle_minutes=base.idle_minutes)
    if chat_type is not None and chat_type in cfg.reset_by_type:
        policy = _apply(policy, cfg.reset_by_type[chat_type])
    if channel is not None and channel.lower() in cfg.reset_by_channel:
        policy = _apply(policy, cfg.reset_by_channel[channel.lower()])
    return policy


def _apply(policy: ResetPolicy, override: ResetOverride) -> ResetPolicy:
    return ResetPolicy(
        mode=override.mode if override.mode is not None else policy.mode,
        at_hour=override.at_hour if override.at_hour is not None else policy.at_hour,
        idle_minutes=override.idle_minutes if override.idle_minutes is not None else policy.idle_minutes,
    )


def _aware_utc(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def next_daily_boundary(after: datetime, at_hour: int, tz: tzinfo) -> datetime:
    """The first local `at_hour`:00 in `tz` strictly after `after`, as a UTC datetime."""
    after_utc = _aware_utc(after, "after")
    day = after_utc.astimezone(tz).date()
    # Compare in UTC: aware datetimes sharing a tzinfo compare by wall clock, which is wrong across DST.
    while True:
        candidate = datetime.combine(day, time(at_hour), tzinfo=tz).astimezone(UTC)
        if candidate > after_utc:
            return candidate
        day += timedelta(days=1)


def expiry_times(policy: ResetPolicy, last_activity: datetime, tz: tzinfo) -> dict[ResetReason, datetime]:
    """When a session last active at `last_activity` expires, per rule the policy uses (UTC)."""
    out: dict[ResetReason, datetime] = {}
    if policy.mode in ("daily", "both"):
        out["daily"] = next_daily_boundary(last_activity, policy.at_hour, tz)
    if policy.mode in ("idle", "both"):
        out["idle"] = _aware_utc(last_activity, "last_activity") + timedelta(minutes=policy.idle_minutes)
    return out


def is_expired(policy: ResetPolicy, last_activity: datetime, now: datetime, tz: tzinfo) -> ResetCheck:
    """Whether a session last active at `last_activity` must be reset when a message arrives at `now`."""
    now_utc = _aware_utc(now, "now")
    due = [(at, reason) for reason, at in expiry_times(policy, last_activity, tz).items() if at <= now_utc]
    if not due:
        return ResetCheck(False, None)
    _, reason = min(due)
    return ResetCheck(True, reason)


def parse_reset_command(text: str, triggers: tuple[str, ...] | list[str]) -> ResetCommand:
    """Split "/new hello there" into ("/new", "hello there"); other messages are returned unchanged."""
    stripped = text.lstrip()
    # Longest first, so a trigger that is a prefix of another ("/re", "/reset") cannot shadow it.
    for trigger in sorted(triggers, key=len, reverse=True):
        if not trigger:
            continue
        pattern = re.compile(re.escape(trigger) + r"(?:@[A-Za-z0-9_]+)?(?=\s|$)", re.IGNORECASE)
        match = pattern.match(stripped)
        if match:
            return ResetCommand(True, trigger, stripped[match.end() :].strip())
    return ResetCommand(False, None, text)
