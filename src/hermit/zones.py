"""The machine's own time zone, with its DST rules, for everything that has no configured zone.

Both the agent runtime (today's daily log, the session reset hour) and the scheduler (cron jobs, the
heartbeat's active hours) use this one answer, so they never disagree. A fixed UTC offset taken when the
process starts would be wrong half the year: a gateway running across a DST change would reset an hour
late and write the first hour of a day to the previous day's log.

Order: `TZ` when it names a zone (`Europe/Berlin`, `:Europe/Berlin`, or a `:/path/to/zonefile`), then
/etc/localtime (its link target's name, or the file itself); a POSIX `TZ` rule string such as
`CET-1CEST,M3.5.0,M10.5.0/3` cannot be read by zoneinfo, and only then is the process's current
offset used. No zone database entry at all means the host clock is UTC.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

LOCALTIME = Path("/etc/localtime")


def _from_file(path: Path, key: str) -> ZoneInfo:
    with path.open("rb") as f:
        return ZoneInfo.from_file(f, key=key)


def _from_tz(value: str) -> tuple[tzinfo, str] | None:
    name = value[1:] if value.startswith(":") else value
    if not name:
        return None
    try:
        if name.startswith("/"):
            return _from_file(Path(name), name), name
        return ZoneInfo(name), name
    except (OSError, ValueError, ZoneInfoNotFoundError):
        if value.startswith(":"):
            return None
        current = datetime.now().astimezone().tzinfo  # a POSIX rule string: what the C library made of it
        return (current, value) if current is not None else None


def host_zone(localtime: Path = LOCALTIME, environ: Mapping[str, str] | None = None) -> tuple[tzinfo, str]:
    """The machine's zone and a name for it (an IANA name where there is one)."""
    tz = (os.environ if environ is None else environ).get("TZ")
    if tz:
        found = _from_tz(tz)
        if found is not None:
            return found
    try:
        target = str(localtime.resolve())
        if "zoneinfo/" in target:
            name = target.split("zoneinfo/", 1)[1]
            return ZoneInfo(name), name
        return _from_file(localtime, "localtime"), "localtime"
    except (OSError, ValueError, ZoneInfoNotFoundError):
        return UTC, "UTC"
