"""The heartbeat on a simulated clock: when it skips the model, what reaches a channel, and idle resets."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hermit.config.schema import ActiveHoursConfig
from hermit.models.base import ModelRequest
from hermit.scheduler.heartbeat import heartbeat_file_is_empty, strip_heartbeat_token, within_active_hours
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import Reply
from schedhelpers import Rig, last_user_text, rig, settle

pytestmark = pytest.mark.anyio

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 6, 1, 9, 0, tzinfo=BERLIN)
MAIN = main_session_key("main")
TARGET = {"channel": "telegram", "account": "default", "to": "42"}
CHECKLIST = "# HEARTBEAT.md\n\n- Check whether the passport renewal (due June 3) is booked.\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def heartbeat_rig(tmp_path: Path, reply: Reply | None = None, *, start: datetime = START,
                  checklist: str | None = CHECKLIST, **heartbeat: object) -> Rig:
    cfg = {"every_minutes": 30, "target": TARGET, **heartbeat}
    # 42, the target, is the owner: alerts are main-session text, withheld from anyone else unless the owner
    # opts in (test_main_text_opt_in).
    r = rig(tmp_path / "home", start, (lambda req: reply) if reply is not None else (lambda req: "HEARTBEAT_OK"),
            defaults={"heartbeat": cfg}, owners=("42",))
    if checklist is not None:
        (r.loaded.agent().workspace / "HEARTBEAT.md").write_text(checklist, encoding="utf-8")
    return r


async def beat(r: Rig, minutes: int = 30) -> dict[str, object]:
    """Advance to the next heartbeat and run it; returns the heartbeat's last outcome."""
    r.clock.now += timedelta(minutes=minutes)
    await r.service.tick()
    await settle(r.service)
    last = r.service.status()["agents"]["main"]["heartbeat"]["last"]
    assert isinstance(last, dict)
    return last


async def test_skipped_without_a_model_call_when_heartbeat_md_is_only_headings(tmp_path: Path) -> None:
    r = heartbeat_rig(tmp_path, checklist="# HEARTBEAT.md\n\n## Daily\n\n- [ ]\n<!-- nothing yet -->\n")
    await r.service.start(run_loop=False)
    assert await beat(r) == {"at": "2026-06-01T07:30:00+00:00", "status": "skipped",
                             "reason": "HEARTBEAT.md is empty"}
    assert r.models["main"].requests == []
    # The template a new workspace gets counts as empty too.
    template = heartbeat_rig(tmp_path / "t", checklist=None)
    await template.service.start(run_loop=False)
    assert (await beat(template))["reason"] == "HEARTBEAT.md is empty"
    assert template.models["main"].requests == []


async def test_skipped_outside_active_hours_in_the_users_timezone(tmp_path: Path) -> None:
    r = heartbeat_rig(tmp_path, start=datetime(2026, 6, 1, 21, 0, tzinfo=BERLIN),
                      active_hours={"start": "08:00", "end": "22:00"})
    await r.service.start(run_loop=False)
    assert (await beat(r))["status"] == "ok"  # 21:30 Berlin (19:30 UTC): inside
    assert (await beat(r))["reason"] == "outside active hours"  # 22:00
    assert (await beat(r, 60 * 9))["reason"] == "outside active hours"  # 07:00 next day
    assert len(r.models["main"].requests) == 1


async def test_skipped_while_the_main_session_is_busy(tmp_path: Path) -> None:
    release = threading.Event()
    requests: list[str] = []

    def reply(request: ModelRequest) -> Reply:
        requests.append(last_user_text(request))
        if last_user_text(request) == "a long question":
            release.wait(10)
        return "HEARTBEAT_OK"

    r = heartbeat_rig(tmp_path)
    r.host.threaded = True  # the user's turn runs in a worker thread, as in the gateway
    r.models["main"].fn = reply
    await r.service.start(run_loop=False)
    user_turn = asyncio.create_task(r.host.run_turn("main", MAIN, "a long question"))
    while not requests:
        await asyncio.sleep(0.001)
    assert r.host.busy(MAIN)
    assert (await beat(r))["reason"] == "main session busy"
    release.set()
    await user_turn
    assert requests == ["a long question"]  # the heartbeat made no model call
    r.host.threaded = False
    assert (await beat(r))["status"] == "ok"
    assert requests[-1].startswith("Read HEARTBEAT.md if it exists")


async def test_heartbeat_ok_never_reaches_a_channel(tmp_path: Path) -> None:
    for i, reply in enumerate(["HEARTBEAT_OK", "All quiet. HEARTBEAT_OK", "**HEARTBEAT_OK** nothing due",
                               "NO_REPLY"]):
        r = heartbeat_rig(tmp_path / str(i), reply)
        await r.service.start(run_loop=False)
        assert (await beat(r))["status"] == "ok"
        assert r.channel.sent == [] and len(r.models["main"].requests) == 1


async def test_an_alert_is_delivered_to_the_target(tmp_path: Path) -> None:
    alert = "The passport renewal is due June 3 and no appointment is booked: book one today."
    r = heartbeat_rig(tmp_path, alert)
    await r.service.start(run_loop=False)
    assert await beat(r) == {"at": "2026-06-01T07:30:00+00:00", "status": "alert", "delivered": True}
    [(target, text)] = r.channel.sent
    assert (target.channel, target.peer_id, text) == ("telegram", "42", alert)
    # A long report wrapped in the token is still an alert, delivered without the token.
    long_report = "HEARTBEAT_OK " + "x" * 301
    r2 = heartbeat_rig(tmp_path / "long", long_report)
    await r2.service.start(run_loop=False)
    await beat(r2)
    assert r2.channel.sent[0][1] == "x" * 301
    # Without a target the alert stays in the main session's transcript, and status says so.
    r3 = heartbeat_rig(tmp_path / "none", alert, target=None)
    await r3.service.start(run_loop=False)
    assert "no heartbeat.target" in str((await beat(r3))["reason"]) and r3.channel.sent == []


async def test_heartbeat_turns_leave_last_activity_alone_so_idle_resets_still_happen(tmp_path: Path) -> None:
    r = rig(tmp_path / "home", START, lambda req: "HEARTBEAT_OK",
            defaults={"heartbeat": {"every_minutes": 40, "target": TARGET},
                      "session": {"reset": {"mode": "idle", "idle_minutes": 60}}})
    (r.loaded.agent().workspace / "HEARTBEAT.md").write_text(CHECKLIST, encoding="utf-8")
    runtime = r.host.runtime("main")
    first = await r.host.run_turn("main", MAIN, "hello")
    before = runtime.session(MAIN)
    await r.service.start(run_loop=False)
    assert (await beat(r, 40))["status"] == "ok"
    assert len(r.models["main"].requests) == 2  # the heartbeat did call the model
    after = runtime.session(MAIN)
    assert before is not None and after is not None
    assert after.updated_at == before.updated_at and after.session_id == before.session_id
    assert after.total_tokens > before.total_tokens  # its usage is still counted
    r.clock.now += timedelta(minutes=21)  # 61 minutes after the user's last message
    later = await r.host.run_turn("main", MAIN, "back again")
    assert later.reset == "idle" and later.session_id != first.session_id


def test_the_rules_behind_the_checks() -> None:
    assert heartbeat_file_is_empty("") and heartbeat_file_is_empty("# A\n\n## B\n  \n- \n* [ ]\n")
    assert not heartbeat_file_is_empty("# A\n- call the bank\n")
    assert not heartbeat_file_is_empty("check the mail")
    night = ActiveHoursConfig(start="22:00", end="06:00")
    assert within_active_hours(datetime(2026, 1, 1, 23, 0, tzinfo=UTC), night)
    assert within_active_hours(datetime(2026, 1, 1, 5, 59, tzinfo=UTC), night)
    assert not within_active_hours(datetime(2026, 1, 1, 6, 0, tzinfo=UTC), night)
    assert within_active_hours(datetime(2026, 1, 1, 23, 59, tzinfo=UTC), ActiveHoursConfig(end="24:00"))
    assert strip_heartbeat_token("HEARTBEAT_OK", 300) is None
    assert strip_heartbeat_token("Done. HEARTBEAT_OK.", 300) is None
    assert strip_heartbeat_token("Call the bank.", 300) == "Call the bank."
    assert strip_heartbeat_token("Reply HEARTBEAT_OK only if quiet; the bank called.", 300) == \
        "Reply HEARTBEAT_OK only if quiet; the bank called."


async def test_acknowledgements_wrapped_in_html_or_markdown_are_not_alerts(tmp_path: Path) -> None:
    for i, reply in enumerate(["<b>HEARTBEAT_OK</b>", "<code>HEARTBEAT_OK</code> all good", "__HEARTBEAT_OK__",
                               "`HEARTBEAT_OK`", "All quiet.&nbsp;<strong>HEARTBEAT_OK</strong>"]):
        r = heartbeat_rig(tmp_path / str(i), reply)
        await r.service.start(run_loop=False)
        assert (await beat(r))["status"] == "ok", reply
        assert r.channel.sent == []
    assert strip_heartbeat_token("<b>HEARTBEAT_OK</b>", 300) is None
    assert strip_heartbeat_token("<code>HEARTBEAT_OK</code> all good", 300) is None
    # An alert that merely uses HTML is still delivered as written.
    assert strip_heartbeat_token("<b>Call the bank</b> today.", 300) == "<b>Call the bank</b> today."


async def test_hash_tasks_are_not_headings_so_the_heartbeat_runs(tmp_path: Path) -> None:
    assert not heartbeat_file_is_empty("#TODO call the bank\n#TODO renew the passport\n")
    assert heartbeat_file_is_empty("#\n# Title\n##\tTabbed\n")
    r = heartbeat_rig(tmp_path, checklist="#TODO call the bank\n#TODO renew the passport\n")
    await r.service.start(run_loop=False)
    assert (await beat(r))["status"] == "ok"
    assert len(r.models["main"].requests) == 1


async def test_the_same_alert_is_not_resent_within_24_hours_even_after_a_restart(tmp_path: Path) -> None:
    alert = "The passport renewal is due June 3 and no appointment is booked: book one today."
    r = heartbeat_rig(tmp_path, alert)
    await r.service.start(run_loop=False)
    assert (await beat(r))["delivered"] is True
    again = await beat(r)
    assert again["status"] == "alert" and again["delivered"] is False
    assert "not sent again" in str(again["reason"])
    assert len(r.channel.sent) == 1
    await r.service.stop()
    # A new scheduler on the same state dir (a gateway restart) remembers it.
    restarted = heartbeat_rig(tmp_path, alert, start=r.clock.now)
    await restarted.service.start(run_loop=False)
    assert (await beat(restarted))["delivered"] is False and restarted.channel.sent == []
    # Another alert goes out at once; the first one again only after 24 hours.
    restarted.models["main"].fn = lambda req: "Something else needs you: the car's MOT expires tomorrow."
    assert (await beat(restarted))["delivered"] is True
    restarted.models["main"].fn = lambda req: alert
    assert (await beat(restarted, 24 * 60))["delivered"] is True
    assert [t for _, t in restarted.channel.sent][-1] == alert
    state = tmp_path / "home" / "cron" / "heartbeat-alerts.json"
    assert state.stat().st_mode & 0o777 == 0o600 and alert not in state.read_text()


async def test_a_target_naming_no_account_fails_before_the_model_is_called(tmp_path: Path) -> None:
    r = heartbeat_rig(tmp_path, "an alert", target={"channel": "Discord", "to": "42"})
    await r.service.start(run_loop=False)
    last = await beat(r)
    assert last["status"] == "error" and "no discord account is configured" in str(last["reason"])
    assert r.models["main"].requests == [] and r.channel.sent == []
    # Channel names in any case reach the configured account.
    ok = heartbeat_rig(tmp_path / "ok", "an alert that matters to the owner", target={"channel": "TELEGRAM", "to": "42"})
    await ok.service.start(run_loop=False)
    assert (await beat(ok))["delivered"] is True
    assert [(t.channel, t.account_id) for t, _ in ok.channel.sent] == [("telegram", "default")]
