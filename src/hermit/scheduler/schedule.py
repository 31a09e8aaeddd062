"""Schedule math: when an `at`, `every` or `cron` schedule fires next, in its IANA time zone, across DST.

Rules (docs/guide.md documents them for users):

- `at`: one instant. An ISO time without an offset is read in the job's zone.
- `every`: a fixed interval of real elapsed time (`every_ms`) from an anchor (default: the job's
  creation), so `every 1h` stays 60 minutes apart through DST changes.
- `cron`: 5 fields, or 6 with seconds first, matched against the *wall clock* of the job's zone. A
  wall-clock slot that does not exist (the spring-forward gap, e.g. 02:30 on the day clocks jump from
  02:00 to 03:00) fires once, at the first instant after the gap (03:00); several slots inside one gap
  collapse into that one run. A wall-clock slot that happens twice (the fall-back hour) fires once, at
  its first occurrence (the summer-time one). cronsim evaluates the fields on naive wall-clock times;
  this module maps them to instants, so 5- and 6-field expressions behave alike (cronsim's own DST
  handling covers only 5-field fixed-time jobs).

No zone on a job means the user's configured zone (`agents.defaults.timezone`), else the host's zone —
never silently UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from hermit.errors import JobError
from hermit.zones import host_zone

MIN_EVERY_MS = 1000
# Looking further than this for a cron match means the expression can never fire (e.g. 30 Feb).
_MAX_SKIPPED = 100_000


@dataclass(frozen=True)
class Zone:
    """A resolved time zone and where it came from (for messages like "09:00 CET (Europe/Berlin)")."""

    tz: tzinfo
    name: str
    source: Literal["job", "config", "host"]

    def describe(self) -> str:
        origin = {"job": "", "config": ", from agents.defaults.timezone", "host": ", the host's zone"}[self.source]
        return f"{self.name}{origin}"


def load_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise JobError(f"unknown time zone {name!r}",
                       "use an IANA name like Europe/Berlin or America/Los_Angeles") from e


def resolve_zone(job_tz: str | None, configured: str | None) -> Zone:
    """The job's zone, else the user's configured zone, else the host's."""
    if job_tz:
        return Zone(load_zone(job_tz), job_tz, "job")
    if configured:
        return Zone(load_zone(configured), configured, "config")
    tz, name = host_zone()
    return Zone(tz, name, "host")


# ---- validation -----------------------------------------------------------------------------------


def check_cron_expr(expr: str) -> str:
    """The expression, normalised; raises JobError saying which field is wrong."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise JobError(f"cron expression {expr!r} has {len(fields)} fields",
                       "use 5 fields (minute hour day month weekday), or 6 with seconds first")
    try:
        CronSim(" ".join(fields), datetime(2026, 1, 1))
    except CronSimError as e:
        raise JobError(f"invalid cron expression {expr!r}: {e}",
                       "fields: [second] minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'") from e
    return " ".join(fields)


def parse_at(text: str, zone: tzinfo) -> datetime:
    """An ISO date-time; without an offset it is wall-clock time in `zone`."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise JobError(f"invalid time {text!r}", "use ISO format like 2026-03-08T09:30 or "
                                                 "2026-03-08T09:30:00+01:00") from e
    if dt.tzinfo is None:
        return to_instant(dt, zone)
    return dt.astimezone(UTC)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """'90s', '30m', '2h', '1d' or plain milliseconds."""
    m = _DURATION.match(text)
    if not m:
        raise JobError(f"invalid interval {text!r}", "use a number with a unit: 90s, 30m, 2h, 1d")
    ms = int(float(m.group(1)) * _UNIT_MS[m.group(2) or "ms"])
    if ms < MIN_EVERY_MS:
        raise JobError(f"interval {text!r} is shorter than one second", "use at least 1s")
    return ms


def format_duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


# ---- wall clock <-> instants ----------------------------------------------------------------------


def _exists(naive: datetime, tz: tzinfo) -> bool:
    aware = naive.replace(tzinfo=tz)
    return aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == naive


def to_instant(naive: datetime, tz: tzinfo) -> datetime:
    """A wall-clock time in `tz` as an instant (in UTC): the first occurrence of a repeated time, and the
    end of the gap for a time that does not exist.

    Instants are kept in UTC throughout: Python compares and adds aware datetimes of one zone on the wall
    clock, and never finds a time inside the fall-back fold equal to one in another zone (PEP 495)."""
    if _exists(naive, tz):
        return naive.replace(tzinfo=tz, fold=0).astimezone(UTC)
    probe = naive.replace(second=0, microsecond=0)
    for _ in range(24 * 60):  # gaps are whole minutes (in practice 30 or 60 of them)
        probe += timedelta(minutes=1)
        if _exists(probe, tz):
            return probe.replace(tzinfo=tz, fold=0).astimezone(UTC)
    raise JobError(f"{naive.isoformat()} has no valid time in the next day of {tz}", "check the time zone")


def cron_next(expr: str, after: datetime, tz: tzinfo) -> datetime:
    """The first fire time of `expr` strictly after the instant `after` (UTC)."""
    after = after.astimezone(UTC)
    local = after.astimezone(tz)
    # Start from the wall-clock time; a fall-back second pass (fold=1) restarts at the same wall time, and
    # the slots it would repeat map to their first occurrence, which is <= after and skipped below.
    try:
        it = CronSim(expr, local.replace(tzinfo=None, fold=0))
    except CronSimError as e:
        raise JobError(f"invalid cron expression {expr!r}: {e}", "check the expression") from e
    for _ in range(_MAX_SKIPPED):
        try:
            slot = next(it)
        except StopIteration:
            break
        instant = to_instant(slot, tz)
        if instant > after:
            return instant
    raise JobError(f"cron expression {expr!r} never fires", "check the day and month fields")


def every_next(every_ms: int, anchor: datetime, after: datetime) -> datetime:
    """The first anchor + k·every strictly after `after` (k ≥ 0), counted in real (UTC) time."""
    anchor, after = anchor.astimezone(UTC), after.astimezone(UTC)
    if after < anchor:
        return anchor
    step = timedelta(milliseconds=every_ms)
    k = (after - anchor) // step + 1
    return anchor + k * step
