"""Session reset policy: daily 04:00 / idle / both with explicit datetimes, overrides, DST, /new parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from hermit.config.schema import AgentSettings, SessionConfig
from hermit.sessions.reset import (
    ResetCheck,
    ResetCommand,
    ResetPolicy,
    expiry_times,
    is_expired,
    next_daily_boundary,
    parse_reset_command,
    resolve_reset_policy,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
DAILY = ResetPolicy(mode="daily", at_hour=4)
IDLE = ResetPolicy(mode="idle", idle_minutes=60)
BOTH = ResetPolicy(mode="both", at_hour=4, idle_minutes=60)


def berlin(y: int, mo: int, d: int, h: int, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=BERLIN)


# --- daily ---------------------------------------------------------------------------------------


def test_daily_expires_when_4am_lies_between_last_activity_and_now() -> None:
    assert is_expired(DAILY, berlin(2025, 1, 10, 3, 59), berlin(2025, 1, 10, 4, 1), BERLIN) == (True, "daily")


def test_daily_same_side_of_4am_does_not_expire() -> None:
    assert is_expired(DAILY, berlin(2025, 1, 10, 4, 1), berlin(2025, 1, 11, 3, 59), BERLIN) == (False, None)
    assert is_expired(DAILY, berlin(2025, 1, 10, 0, 30), berlin(2025, 1, 10, 3, 59), BERLIN) == (False, None)


def test_daily_across_midnight_without_reaching_4am_does_not_expire() -> None:
    assert not is_expired(DAILY, berlin(2025, 1, 10, 23, 0), berlin(2025, 1, 11, 1, 0), BERLIN).expired


def test_daily_boundary_is_inclusive_at_now_and_exclusive_at_last_activity() -> None:
    assert is_expired(DAILY, berlin(2025, 1, 10, 23, 0), berlin(2025, 1, 11, 4, 0), BERLIN).expired
    assert not is_expired(DAILY, berlin(2025, 1, 11, 4, 0), berlin(2025, 1, 11, 5, 0), BERLIN).expired


def test_daily_multi_day_gap_expires() -> None:
    assert is_expired(DAILY, berlin(2025, 1, 10, 12, 0), berlin(2025, 1, 14, 12, 0), BERLIN) == (
        True,
        "daily",
    )
    assert is_expired(DAILY, berlin(2025, 1, 10, 5, 0), berlin(2025, 1, 11, 4, 30), BERLIN).expired


def test_daily_uses_local_time_of_the_given_zone() -> None:
    # 04:00 Berlin is 03:00 UTC in winter; the same instants judged in New York (22:59 → 23:01) cross nothing.
    last = datetime(2025, 1, 10, 2, 59, tzinfo=UTC)
    now = datetime(2025, 1, 10, 3, 1, tzinfo=UTC)
    assert is_expired(DAILY, last, now, BERLIN).expired
    assert not is_expired(DAILY, last, now, NEW_YORK).expired


def test_custom_at_hour() -> None:
    policy = ResetPolicy(mode="daily", at_hour=0)
    assert is_expired(policy, berlin(2025, 1, 10, 23, 59), berlin(2025, 1, 11, 0, 0), BERLIN).expired
    assert not is_expired(policy, berlin(2025, 1, 11, 0, 1), berlin(2025, 1, 11, 23, 59), BERLIN).expired


# --- idle and both -------------------------------------------------------------------------------


def test_idle_after_60_minutes() -> None:
    last = berlin(2025, 1, 10, 10, 0)
    assert is_expired(IDLE, last, last + timedelta(minutes=59, seconds=59), BERLIN) == (False, None)
    assert is_expired(IDLE, last, last + timedelta(minutes=60), BERLIN) == (True, "idle")
    # Idle mode ignores the 04:00 boundary.
    assert not is_expired(IDLE, berlin(2025, 1, 10, 3, 50), berlin(2025, 1, 10, 4, 10), BERLIN).expired


def test_both_reports_whichever_expired_first() -> None:
    # 04:00 comes before last + 60 min (04:30).
    assert is_expired(BOTH, berlin(2025, 1, 10, 3, 30), berlin(2025, 1, 10, 4, 10), BERLIN) == (True, "daily")
    # Idle expiry (03:00) comes before 04:00.
    assert is_expired(BOTH, berlin(2025, 1, 10, 2, 0), berlin(2025, 1, 10, 4, 10), BERLIN) == (True, "idle")
    # Idle alone.
    assert is_expired(BOTH, berlin(2025, 1, 10, 12, 0), berlin(2025, 1, 10, 13, 5), BERLIN) == (True, "idle")
    # Neither.
    assert is_expired(BOTH, berlin(2025, 1, 10, 12, 0), berlin(2025, 1, 10, 12, 30), BERLIN) == (False, None)


def test_mode_off_never_expires() -> None:
    policy = ResetPolicy(mode="off")
    assert is_expired(policy, berlin(2025, 1, 1, 12), berlin(2025, 6, 1, 12), BERLIN) == (False, None)
    assert expiry_times(policy, berlin(2025, 1, 1, 12), BERLIN) == {}


def test_now_before_last_activity_is_not_expired() -> None:
    assert not is_expired(BOTH, berlin(2025, 1, 10, 12, 0), berlin(2025, 1, 9, 12, 0), BERLIN).expired


def test_naive_datetimes_are_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        is_expired(DAILY, datetime(2025, 1, 10, 3, 0), berlin(2025, 1, 10, 5, 0), BERLIN)
    with pytest.raises(ValueError, match="timezone-aware"):
        is_expired(DAILY, berlin(2025, 1, 10, 3, 0), datetime(2025, 1, 10, 5, 0), BERLIN)


def test_result_is_a_tuple() -> None:
    check = is_expired(IDLE, berlin(2025, 1, 10, 10), berlin(2025, 1, 10, 12), BERLIN)
    assert isinstance(check, ResetCheck)
    expired, reason = check
    assert expired and reason == "idle"


# --- DST -----------------------------------------------------------------------------------------


def test_berlin_spring_forward_day_boundary_is_4am_local() -> None:
    # 2024-03-31: 02:00 CET → 03:00 CEST. 04:00 CEST = 02:00 UTC; the day before 04:00 CET = 03:00 UTC.
    assert next_daily_boundary(berlin(2024, 3, 30, 12), 4, BERLIN) == datetime(2024, 3, 31, 2, 0, tzinfo=UTC)
    assert next_daily_boundary(berlin(2024, 3, 29, 12), 4, BERLIN) == datetime(2024, 3, 30, 3, 0, tzinfo=UTC)
    # 03:30 CEST (01:30 UTC) → 04:30 CEST (02:30 UTC): one real hour, crossing 04:00 → expired.
    last = datetime(2024, 3, 31, 1, 30, tzinfo=UTC)
    assert is_expired(DAILY, last, last + timedelta(hours=1), BERLIN) == (True, "daily")
    # 01:30 CET → 03:59 CEST is 89 real minutes and no 04:00 → not expired.
    assert not is_expired(DAILY, berlin(2024, 3, 31, 1, 30), berlin(2024, 3, 31, 3, 59), BERLIN).expired


def test_berlin_fall_back_day_boundary_is_4am_local() -> None:
    # 2024-10-27: 03:00 CEST → 02:00 CET. 04:00 CET = 03:00 UTC.
    assert next_daily_boundary(berlin(2024, 10, 26, 12), 4, BERLIN) == datetime(
        2024, 10, 27, 3, 0, tzinfo=UTC
    )
    # 03:30 CET (02:30 UTC) → 03:59 CET: not expired; → 04:01 CET: expired.
    last = datetime(2024, 10, 27, 2, 30, tzinfo=UTC)
    assert not is_expired(DAILY, last, datetime(2024, 10, 27, 2, 59, tzinfo=UTC), BERLIN).expired
    assert is_expired(DAILY, last, datetime(2024, 10, 27, 3, 1, tzinfo=UTC), BERLIN).expired


def test_idle_counts_real_minutes_across_a_dst_jump() -> None:
    # 01:30 CET → 03:29 CEST reads as 119 minutes on the wall clock but is 59 real minutes.
    last, now = berlin(2024, 3, 31, 1, 30), berlin(2024, 3, 31, 3, 29)
    assert now - last != timedelta(minutes=59)  # same-tzinfo subtraction is wall-clock: the trap
    assert is_expired(IDLE, last, now, BERLIN) == (False, None)
    assert is_expired(IDLE, last, berlin(2024, 3, 31, 3, 30), BERLIN) == (True, "idle")


def test_new_york_nonexistent_and_ambiguous_hours() -> None:
    # 2024-03-10 02:00 does not exist in New York; the boundary is the transition instant (07:00 UTC).
    assert next_daily_boundary(datetime(2024, 3, 10, 1, 0, tzinfo=NEW_YORK), 2, NEW_YORK) == datetime(
        2024, 3, 10, 7, 0, tzinfo=UTC
    )
    # 2024-11-03 01:00 happens twice; the first occurrence (01:00 EDT = 05:00 UTC) is the boundary.
    assert next_daily_boundary(datetime(2024, 11, 3, 0, 30, tzinfo=NEW_YORK), 1, NEW_YORK) == datetime(
        2024, 11, 3, 5, 0, tzinfo=UTC
    )
    # Active during the repeated hour's second pass (01:30 EST = 06:30 UTC): the next boundary is tomorrow.
    second_pass = datetime(2024, 11, 3, 6, 30, tzinfo=UTC)
    assert next_daily_boundary(second_pass, 1, NEW_YORK) == datetime(2024, 11, 4, 6, 0, tzinfo=UTC)


def test_default_4am_on_new_york_dst_days() -> None:
    # Spring forward: 04:00 EDT = 08:00 UTC. Fall back: 04:00 EST = 09:00 UTC.
    assert next_daily_boundary(datetime(2024, 3, 10, 0, 0, tzinfo=NEW_YORK), 4, NEW_YORK) == datetime(
        2024, 3, 10, 8, 0, tzinfo=UTC
    )
    assert next_daily_boundary(datetime(2024, 11, 3, 0, 0, tzinfo=NEW_YORK), 4, NEW_YORK) == datetime(
        2024, 11, 3, 9, 0, tzinfo=UTC
    )


# --- policy resolution ---------------------------------------------------------------------------


def session_cfg(raw: dict[str, object]) -> SessionConfig:
    return SessionConfig.model_validate(raw)


def test_default_policy() -> None:
    assert resolve_reset_policy(SessionConfig(), "dm", "telegram") == ResetPolicy("daily", 4, 60)
    assert resolve_reset_policy(SessionConfig(), None, None) == ResetPolicy("daily", 4, 60)


def test_overrides_by_type_then_channel() -> None:
    cfg = session_cfg(
        {
            "reset": {"mode": "daily", "at_hour": 5, "idle_minutes": 90},
            "reset_by_type": {"group": {"mode": "idle", "idle_minutes": 30}, "thread": {"mode": "idle"}},
            "reset_by_channel": {"Discord": {"idle_minutes": 10}, "slack": {"mode": "both", "at_hour": 6}},
        }
    )
    # Type override, partial: at_hour inherited from the default.
    assert resolve_reset_policy(cfg, "group", "telegram") == ResetPolicy("idle", 5, 30)
    assert resolve_reset_policy(cfg, "thread", None) == ResetPolicy("idle", 5, 90)
    # Channel wins over type, key by key (mode from type, idle_minutes from channel).
    assert resolve_reset_policy(cfg, "group", "discord") == ResetPolicy("idle", 5, 10)
    assert resolve_reset_policy(cfg, "group", "DISCORD") == ResetPolicy("idle", 5, 10)
    assert resolve_reset_policy(cfg, "group", "slack") == ResetPolicy("both", 6, 30)
    # No type override for dm: default + channel.
    assert resolve_reset_policy(cfg, "dm", "slack") == ResetPolicy("both", 6, 90)
    assert resolve_reset_policy(cfg, "dm", "webchat") == ResetPolicy("daily", 5, 90)
    # Cron / sub-agent sessions (no chat type) still get channel overrides if a channel is known.
    assert resolve_reset_policy(cfg, None, "discord") == ResetPolicy("daily", 5, 10)


def test_session_config_validation() -> None:
    with pytest.raises(ValidationError):
        session_cfg({"reset": {"at_hour": 24}})
    with pytest.raises(ValidationError):
        session_cfg({"reset": {"idle_minutes": 0}})
    with pytest.raises(ValidationError):
        session_cfg({"reset": {"mode": "weekly"}})
    with pytest.raises(ValidationError):
        session_cfg({"reset_by_type": {"channel": {"mode": "idle"}}})
    with pytest.raises(ValidationError):
        session_cfg({"reset_by_channel": {"slack": {"atHour": 3}}})
    with pytest.raises(ValidationError, match="one non-empty word"):
        session_cfg({"reset_triggers": ["/new chat"]})
    settings = AgentSettings.model_validate(
        {"session": {"reset": {"mode": "both"}, "reset_triggers": ["/fresh"]}}
    )
    assert settings.session.reset.mode == "both" and settings.session.reset_triggers == ("/fresh",)
    assert AgentSettings().session.reset_triggers == ("/new", "/reset")


# --- /new and /reset -----------------------------------------------------------------------------

TRIGGERS = ("/new", "/reset")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/new hello there", ResetCommand(True, "/new", "hello there")),
        ("/reset", ResetCommand(True, "/reset", "")),
        ("/new", ResetCommand(True, "/new", "")),
        ("  /NEW   Hello There  ", ResetCommand(True, "/new", "Hello There")),
        ("/Reset\nfirst line\n  second line", ResetCommand(True, "/reset", "first line\n  second line")),
        ("\t/new\thi", ResetCommand(True, "/new", "hi")),
        ("/new@hermit_bot what's up", ResetCommand(True, "/new", "what's up")),
        ("/newt", ResetCommand(False, None, "/newt")),
        ("/new/x", ResetCommand(False, None, "/new/x")),
        ("/resetting now", ResetCommand(False, None, "/resetting now")),
        ("hello /new", ResetCommand(False, None, "hello /new")),
        ("new chat", ResetCommand(False, None, "new chat")),
        ("", ResetCommand(False, None, "")),
        ("  plain text ", ResetCommand(False, None, "  plain text ")),
    ],
)
def test_parse_reset_command(text: str, expected: ResetCommand) -> None:
    assert parse_reset_command(text, TRIGGERS) == expected


def test_parse_reset_command_custom_and_overlapping_triggers() -> None:
    assert parse_reset_command("!Fresh start over", ["!fresh"]) == (True, "!fresh", "start over")
    assert parse_reset_command("/new hi", []) == (False, None, "/new hi")
    # The longer trigger wins even when a shorter one is its prefix and listed first.
    assert parse_reset_command("/re-set x", ["/re", "/re-set"]) == (True, "/re-set", "x")
    assert parse_reset_command("/re x", ["/re", "/re-set"]) == (True, "/re", "x")
    is_reset, command, rest = parse_reset_command("/reset", TRIGGERS)
    assert is_reset and command == "/reset" and rest == ""
