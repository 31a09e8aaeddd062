"""Schedule math: cron (5 and 6 fields) on wall-clock time across DST days, `every` with an anchor, `at`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hermit.errors import JobError
from hermit.scheduler.jobs import Job, build_job
from hermit.scheduler.schedule import (
    check_cron_expr,
    cron_next,
    every_next,
    host_zone,
    parse_at,
    parse_duration_ms,
    resolve_zone,
    to_instant,
)

LA = ZoneInfo("America/Los_Angeles")
BERLIN = ZoneInfo("Europe/Berlin")


def fires(expr: str, tz: ZoneInfo, start: datetime, days: int = 7) -> list[str]:
    """Every fire time in [start, start + days), as UTC ISO strings (unambiguous across DST)."""
    out: list[str] = []
    at = start - timedelta(microseconds=1)
    end = start + timedelta(days=days)
    while True:
        at = cron_next(expr, at, tz)
        if at >= end:
            return out
        out.append(at.astimezone(UTC).strftime("%m-%d %H:%M:%S"))


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_los_angeles_spring_forward_week_fires_once_after_the_gap() -> None:
    # 2026-03-08 02:00 PST -> 03:00 PDT: 02:30 does not exist that day.
    week = fires("30 2 * * *", LA, datetime(2026, 3, 5, tzinfo=LA))
    assert week == ["03-05 10:30:00", "03-06 10:30:00", "03-07 10:30:00",
                    "03-08 10:00:00",  # 03:00 PDT: the first instant after the gap, once
                    "03-09 09:30:00", "03-10 09:30:00", "03-11 09:30:00"]
    # Every slot inside the gap collapses into that one run; 03:00 itself is not a second run.
    day = fires("*/20 2-3 * * *", LA, datetime(2026, 3, 8, tzinfo=LA), days=1)
    assert day == ["03-08 10:00:00", "03-08 10:20:00", "03-08 10:40:00"]


def test_los_angeles_fall_back_week_fires_once_in_the_repeated_hour() -> None:
    # 2026-11-01 02:00 PDT -> 01:00 PST: 01:30 happens twice; the job runs at the first (PDT) one only.
    week = fires("30 1 * * *", LA, datetime(2026, 10, 29, tzinfo=LA))
    assert week == ["10-29 08:30:00", "10-30 08:30:00", "10-31 08:30:00",
                    "11-01 08:30:00",
                    "11-02 09:30:00", "11-03 09:30:00", "11-04 09:30:00"]
    hourly = fires("0 * * * *", LA, datetime(2026, 11, 1, tzinfo=LA), days=1)
    # 00:00 PDT, 01:00 PDT, then 02:00 PST: the wall-clock 01:00 slot is not repeated.
    assert hourly[:3] == ["11-01 07:00:00", "11-01 08:00:00", "11-01 10:00:00"] and len(hourly) == 24


def test_berlin_dst_days() -> None:
    # 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
    spring = fires("30 2 * * *", BERLIN, datetime(2026, 3, 27, tzinfo=BERLIN), days=4)
    assert spring == ["03-27 01:30:00", "03-28 01:30:00", "03-29 01:00:00", "03-30 00:30:00"]
    autumn = fires("*/20 2 * * *", BERLIN, datetime(2026, 10, 25, tzinfo=BERLIN), days=2)
    assert autumn == ["10-25 00:00:00", "10-25 00:20:00", "10-25 00:40:00",  # CEST only
                      "10-26 01:00:00", "10-26 01:20:00", "10-26 01:40:00"]


def test_six_field_expressions_have_seconds_first_and_the_same_dst_rules() -> None:
    assert check_cron_expr(" 30  15 10 * * * ") == "30 15 10 * * *"
    assert fires("30 15 10 * * *", BERLIN, datetime(2026, 6, 1, tzinfo=BERLIN), days=2) == [
        "06-01 08:15:30", "06-02 08:15:30"]
    # Seconds: every 20 s inside minute 0 of 09:00 on weekdays (2026-06-06 is a Saturday).
    assert fires("*/20 0 9 * * 1-5", BERLIN, datetime(2026, 6, 5, tzinfo=BERLIN), days=4) == [
        "06-05 07:00:00", "06-05 07:00:20", "06-05 07:00:40",
        "06-08 07:00:00", "06-08 07:00:20", "06-08 07:00:40"]
    # cronsim alone would skip this run on the spring-forward day (6-field jobs get no DST fix-up there).
    assert fires("0 30 2 * * *", LA, datetime(2026, 3, 7, tzinfo=LA), days=3) == [
        "03-07 10:30:00", "03-08 10:00:00", "03-09 09:30:00"]
    assert fires("0 30 1 * * *", LA, datetime(2026, 10, 31, tzinfo=LA), days=3) == [
        "10-31 08:30:00", "11-01 08:30:00", "11-02 09:30:00"]


def test_every_counts_real_time_from_its_anchor_across_dst() -> None:
    anchor = datetime(2026, 3, 7, 23, 15, tzinfo=LA)
    every = 90 * 60_000
    out, at = [], anchor - timedelta(seconds=1)
    for _ in range(4):
        at = every_next(every, anchor, at)
        out.append(at)
    assert [(b - a) for a, b in zip(out, out[1:], strict=False)] == [timedelta(minutes=90)] * 3
    assert out[0] == anchor  # an anchor in the future is the first run
    # 00:45 PST, then 02:15 PST does not exist: real time continues, 03:15 PDT is 90 minutes later.
    assert [t.astimezone(LA).strftime("%H:%M %Z") for t in out] == ["23:15 PST", "00:45 PST", "03:15 PDT",
                                                                   "04:45 PDT"]
    assert every_next(every, anchor, anchor) == anchor + timedelta(minutes=90)
    day_later = anchor.astimezone(UTC) + timedelta(days=1, seconds=1)  # UTC: real elapsed time
    assert every_next(every, anchor, day_later) == anchor.astimezone(UTC) + timedelta(minutes=90 * 17)


def test_at_reads_wall_clock_time_in_the_jobs_zone() -> None:
    assert parse_at("2026-03-08T09:30", LA) == utc(2026, 3, 8, 16, 30)
    assert parse_at("2026-03-08T09:30:00+01:00", LA) == utc(2026, 3, 8, 8, 30)
    assert parse_at("2026-03-08T09:30Z", LA) == utc(2026, 3, 8, 9, 30)
    assert parse_at("2026-03-08T02:30", LA) == utc(2026, 3, 8, 10, 0)  # in the gap: 03:00 PDT
    with pytest.raises(JobError, match="invalid time"):
        parse_at("next tuesday", LA)


def test_at_in_the_past_is_due_at_once_and_then_done() -> None:
    now = utc(2026, 6, 1, 12)
    job = build_job({"schedule": {"kind": "at", "at": "2026-06-01T09:00"}, "message": "m"}, now=now)
    zone = resolve_zone(None, "Europe/Berlin")
    first = job.first_run(now, zone)
    assert first == utc(2026, 6, 1, 7) and first < now  # the scheduler starts it at its next tick
    assert job.next_after(now, zone) is None
    assert job.deletes_after_success


def test_no_timezone_means_the_configured_one_else_the_hosts_never_silently_utc(tmp_path: Path) -> None:
    assert resolve_zone("America/Los_Angeles", "Europe/Berlin").name == "America/Los_Angeles"
    configured = resolve_zone(None, "Europe/Berlin")
    assert configured.name == "Europe/Berlin" and configured.source == "config"
    host = resolve_zone(None, None)
    assert host.source == "host"
    # The host's zone keeps its DST rules: read from /etc/localtime's target, not a fixed offset.
    link = tmp_path / "localtime"
    link.symlink_to("/usr/share/zoneinfo/America/Los_Angeles")
    tz, name = host_zone(link, {})  # without TZ, which would name the zone first
    assert name == "America/Los_Angeles"
    assert datetime(2026, 1, 1, tzinfo=tz).utcoffset() != datetime(2026, 7, 1, tzinfo=tz).utcoffset()
    with pytest.raises(JobError, match="unknown time zone"):
        resolve_zone("Mars/Olympus", None)


def test_bad_expressions_and_intervals_are_refused_with_a_hint() -> None:
    with pytest.raises(JobError, match="has 4 fields") as e:
        check_cron_expr("0 9 * *")
    assert "6 with seconds first" in e.value.hint
    with pytest.raises(JobError, match="invalid cron expression"):
        check_cron_expr("0 25 * * *")
    with pytest.raises(JobError, match="invalid cron expression"):
        check_cron_expr("0 0 30 2 *")  # 30 February never comes
    assert parse_duration_ms("90s") == 90_000 and parse_duration_ms("2h") == 7_200_000
    with pytest.raises(JobError, match="invalid interval"):
        parse_duration_ms("soon")
    with pytest.raises(JobError, match="invalid job"):
        build_job({"schedule": {"kind": "cron", "expr": "61 * * * *"}, "message": "m"}, now=utc(2026, 1, 1))
    with pytest.raises(JobError, match="announce"):
        build_job({"schedule": {"kind": "every", "every_ms": 60_000}, "message": "m",
                   "delivery": {"mode": "announce"}}, now=utc(2026, 1, 1))


def test_a_gap_time_maps_to_the_end_of_the_gap_and_a_repeated_time_to_its_first_occurrence() -> None:
    assert to_instant(datetime(2026, 3, 29, 2, 30), BERLIN) == utc(2026, 3, 29, 1, 0)
    assert to_instant(datetime(2026, 10, 25, 2, 30), BERLIN) == utc(2026, 10, 25, 0, 30)
    assert isinstance(build_job({"schedule": {"kind": "cron", "expr": "0 9 * * *"}, "message": "m"},
                                now=utc(2026, 1, 1)), Job)
