"""A one-shot (`--at`) job aimed at a contact who is revoked before its time: its one run is skipped and the job is
disabled, not held (a reminder delivered days late could be wrong). The user was told otherwise: `hermit pairing
revoke` said it "will be skipped until they are approved again", and after its time `hermit cron list` said only
"not delivered: … is not let in", so after approving them again the user waited for a reminder that never came.
Now the revoke says a one-shot is skipped and disabled if its time comes first, `cron list` says it is disabled and
how to run it after all, and that command, followed once they are let in again, delivers it.

Through the real scheduler over real job, run-log and pairing files (schedhelpers' MemoryChannel is the platform's
end) and the real CLI (`pairing revoke`, `cron list` as subprocesses; the edit through CronJobs.update, what `cron edit` calls)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hermit.channels.pairing import PairingStore
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from test_cron_cli import hermit, write_config
from test_cron_revoked import PLAN, Live, approve


def test_a_one_shot_skipped_while_its_contact_is_revoked_says_it_is_disabled_and_how_to_run_it(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, channels={"telegram": {"accounts": {"default": {"owners": ["1"]}}}},
                 heartbeat={"every_minutes": 0})
    store = PairingStore(home)
    approve(store, "42")
    live = Live(home, load_config(StatePaths(home)))
    live.service.jobs.add({"id": "once", "message": "plan", "schedule": {"kind": "at", "at": "2026-06-01T10:00"},
                           "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})  # 08:00 UTC
    live.service.jobs.add({"id": "daily", "message": "plan", "schedule": {"kind": "every", "every_ms": 3_600_000},
                           "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})

    r = hermit(home, "pairing", "revoke", "telegram", "42")
    assert r.returncode == 0, r.stderr
    assert ("2 scheduled jobs aimed at them will be skipped until they are approved again: once — one-shot at "
            "2026-06-01T10:00: if that time comes first it is skipped and disabled, not run later, daily (") in \
        r.stdout, r.stdout

    async def tick(hours: int) -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(hours)
        finally:
            await live.service.stop()

    asyncio.run(tick(1))  # 08:00:01 UTC: its time, while 42 is revoked
    assert live.channel.sent == [] and live.asked == []
    job = live.service.jobs.get("once")
    assert not job.enabled and job.state.last_status == "skipped"
    listed = hermit(home, "cron", "list")
    assert listed.returncode == 0, listed.stderr
    [line] = [ln for ln in listed.stdout.splitlines() if "not delivered" in ln and "one-shot" in ln]
    assert "is not let in" in line and "it is now disabled and will not run when they are let in again" in line
    assert "`hermit cron edit once --at WHEN --enable` sets it again" in line, listed.stdout
    # Not held: approving them again does not bring it back late.
    approve(store, "42")
    live.loaded = load_config(StatePaths(home))
    asyncio.run(tick(2))  # `daily` delivers again; `once` stays as it was
    assert [r["status"] for r in live.runs("once")] == ["skipped"] and not live.service.jobs.get("once").enabled
    assert [r["status"] for r in live.runs("daily")] == ["skipped", "ok"]

    # The user does what it says (`cron edit`'s own update, on the scheduler's clock): delivered, once.
    live.service.jobs.update("once", {"schedule": {"kind": "at", "at": "2026-06-01T12:00"}, "enabled": True})
    asyncio.run(tick(3))  # 10:00:01 UTC: 12:00 Berlin
    [ran] = live.runs("once")[1:]
    assert ran["status"] == "ok" and ran["delivered"], ran
    assert [text for target, text in live.channel.sent if target.peer_id == "42"] == [PLAN] * 3  # daily twice, once
    assert "once" not in {j.id for j in live.service.jobs.load().jobs}  # a one-shot that ran is done
