"""What lets a held job's target in again is told by the admission rule that refused it (channels/access.Rule, carried
by scheduler/targets.Refused), not by the words of the reason: `let_in_again` matched "dm_policy is disabled" and
"is disabled: enabled is false" in the sentence, which also holds the peer's id as the job names it — a job aimed at
a stranger whose peer text held those words was said to need `dm_policy`/`enabled` changed (which lets nobody in),
not an approval. Through the real config, cron store, scheduler warnings and doctor's health check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.scheduler import CronJobs
from hermit.scheduler.health import let_in_health
from hermit.scheduler.targets import not_let_in

HOUR = {"kind": "every", "every_ms": 3_600_000}


def telegram(home: Path, **account: Any) -> LoadedConfig:
    return build_config({"agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                                 "heartbeat": {"every_minutes": 0}}},
                         "channels": {"telegram": {"accounts": {"default": {"owners": ["1"], **account}}}}},
                        StatePaths(home))


def job_to(home: Path, loaded: LoadedConfig, to: str) -> tuple[CronJobs, Any]:
    cron = CronJobs(home, loaded)
    cron.add({"id": "plan", "message": "plan", "schedule": HOUR,
              "delivery": {"mode": "announce", "channel": "telegram", "to": to}})
    [job] = cron.load().jobs
    return cron, job


def test_a_strangers_peer_text_naming_a_disabled_account_still_asks_for_an_approval(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = telegram(home)
    to = "42 (telegram/default is disabled: enabled is false)"
    cron, job = job_to(home, loaded, to)
    warning = cron.not_let_in(job)
    assert warning is not None and "pairing approve" in warning.text, warning
    assert "enabled to true" not in warning.text, warning
    status, _, hints = let_in_health(home, loaded)
    assert status == "warn"
    assert "pairing approve" in hints and "enabled to true" not in hints, hints


def test_a_strangers_peer_text_naming_dm_policy_still_asks_for_an_approval(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded = telegram(home)
    cron, job = job_to(home, loaded, "42 dm_policy is disabled")
    warning = cron.not_let_in(job)
    assert warning is not None and "pairing approve" in warning.text and "dm_policy to pairing" not in warning.text, warning


def test_the_fix_follows_the_rule_whatever_the_words(tmp_path: Path) -> None:
    """The rule rides with the words (`text`; `str()` of it, as before, for the log and the run record), and the fix
    follows it."""
    from hermit.channels.access import Rule  # s18: imported here, so the tests above run on a tree without it

    home = tmp_path / "home"
    off = not_let_in(telegram(home, dm_policy="disabled"), "telegram", None, "dm", "1")
    assert off is not None and off.rule == Rule.DM_DISABLED and "dm_policy is disabled" in off.text and str(off) == off.text
    cron, job = job_to(home, telegram(home, dm_policy="disabled"), "1")
    said = cron.not_let_in(job)
    assert said is not None and said.rule == Rule.DM_DISABLED and "dm_policy to pairing or allowlist" in said.text, said
    stranger = not_let_in(telegram(home), "telegram", None, "dm", "42")
    assert stranger is not None and stranger.rule == Rule.STRANGER
    disabled = not_let_in(telegram(home, enabled=False), "telegram", None, "dm", "42")
    assert disabled is not None and disabled.rule == Rule.ACCOUNT_DISABLED
