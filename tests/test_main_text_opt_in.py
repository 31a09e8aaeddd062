"""Main-session text reaches only an owner of the agent unless the owner opts in (audit F3). A main-session
cron job (`hermit cron add --main --announce …`) and a heartbeat alert carry what the main session knows
(MEMORY.md, owner-only notes); aimed at a group or a non-owner they used to be delivered, and only `hermit
doctor` warned. Now: the CLI, the web app and the cron tool refuse such a job unless the owner confirms
(`--share-main-text`, stored as `delivery.shares_main`; never the model's to set), each run checks again
against the config in force (the run fails, one warning, nothing delivered), a heartbeat alert is withheld
unless `heartbeat.share_alerts_with_target` is on, and doctor says which are shared and which refused. A
Telegram chat id below zero is a group whatever kind the target names."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from hermit.agent.runtime import AgentRuntime
from hermit.cli.main import main
from hermit.config.load import LoadedConfig, build_config, load_config
from hermit.config.paths import StatePaths
from hermit.errors import JobError
from hermit.gateway.ops_console import OpsConsole
from hermit.gateway.protocol import CronAddParams
from hermit.models.base import ModelRequest
from hermit.scheduler import CronJobs, LocalHost, SchedulerService
from hermit.sessions.keys import main_session_key
from hermit.testing import ScriptedModel
from hermit.testing.scripted import Reply
from schedhelpers import MemoryChannel, SimClock, last_user_text, runtimes, settle, tick_once

NOW = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
EVERY_HOUR = {"kind": "every", "every_ms": 3_600_000}
SECRET = "MEMCANARY the safe code is 4711"
GROUP_REFUSED = ("runs in agent main's main session, so its replies can quote MEMORY.md and owner-only notes, and "
                 "they would go to the group telegram/bot -100555")


def write_config(home: Path, *, owners: tuple[str, ...] = ("1",), heartbeat: dict[str, Any] | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    defaults: dict[str, Any] = {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"}}
    if heartbeat is not None:
        defaults["heartbeat"] = heartbeat
    cfg = {"agents": {"defaults": defaults},
           "channels": {"telegram": {"accounts": {"bot": {"owners": list(owners)}}}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")


def hermit(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--home", str(home), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def stored(home: Path) -> dict[str, dict[str, Any]]:
    return {j["id"]: j for j in json.loads((home / "cron" / "jobs.json").read_text())["jobs"]}


def test_cron_add_and_edit_refuse_main_text_to_a_non_owner_unless_the_owner_confirms(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    write_config(home)
    add = ("cron", "add", "--every", "1h", "-m", "Post the digest", "--main")
    # A group by its id alone (no --group): refused, nothing written, who it would reach and the ways out.
    code, _, err = hermit(capsys, home, *add, "--id", "fam", "--announce", "telegram:bot:-100555")
    assert code == 1 and GROUP_REFUSED in err
    assert "hint: drop --main (an isolated run sees only shared notes)" in err and "--share-main-text" in err
    assert not (home / "cron" / "jobs.json").exists()
    code, _, err = hermit(capsys, home, *add, "--id", "contact", "--announce", "telegram:bot:2001")
    assert code == 1 and "they would go to telegram/bot dm 2001, who is not listed under " \
                         "channels.telegram.accounts.bot.owners" in err
    code, _, err = hermit(capsys, home, "cron", "add", "--every", "1h", "-m", "x", "--announce",
                          "telegram:bot:-100555", "--share-main-text")
    assert code == 1 and "--share-main-text goes with --main and --announce" in err

    # Confirmed: stored on the job's delivery, and said once more where it goes.
    code, out, err = hermit(capsys, home, *add, "--id", "fam", "--announce", "telegram:bot:-100555",
                            "--share-main-text")
    assert code == 0 and out.startswith("added fam")
    assert "warning: its replies are main-session text (MEMORY.md, owner-only notes) and go to the group " \
           "telegram/bot -100555: shared on purpose (--share-main-text)" in err
    assert stored(home)["fam"]["delivery"] == {"mode": "announce", "channel": "telegram", "account": "bot",
                                               "to": "-100555", "peer_kind": "dm", "owner_only": False,
                                               "shares_main": True}
    # The opt-in was given for that target: aimed elsewhere, it must be given again.
    code, _, err = hermit(capsys, home, "cron", "edit", "fam", "--announce", "telegram:bot:2001")
    assert code == 1 and "they would go to telegram/bot dm 2001" in err
    assert stored(home)["fam"]["delivery"]["to"] == "-100555"
    # Aimed at the owner, or isolated, it needs none and keeps none.
    code, _, _ = hermit(capsys, home, "cron", "edit", "fam", "--announce", "telegram:bot:1")
    assert code == 0 and stored(home)["fam"]["delivery"]["shares_main"] is False
    assert hermit(capsys, home, *add, "--id", "solo", "--announce", "telegram:bot:1")[0] == 0
    # A job to the owner cannot be turned into one to the group without the flag; with it, it can.
    code, _, err = hermit(capsys, home, "cron", "edit", "solo", "--announce", "telegram:bot:-100555")
    assert code == 1 and GROUP_REFUSED in err
    assert hermit(capsys, home, "cron", "edit", "solo", "--announce", "telegram:bot:-100555",
                  "--share-main-text")[0] == 0
    code, _, _ = hermit(capsys, home, "cron", "edit", "solo", "--isolated")
    assert code == 0 and stored(home)["solo"]["delivery"]["shares_main"] is False
    code, _, err = hermit(capsys, home, "cron", "edit", "solo", "--share-main-text")
    assert code == 0 and "warning: --share-main-text not kept" in err
    # Back in the main session the old opt-in does not revive.
    code, _, err = hermit(capsys, home, "cron", "edit", "solo", "--main")
    assert code == 1 and GROUP_REFUSED in err


def test_the_web_app_needs_the_opt_in_and_the_cron_tool_can_never_give_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home)
    loaded = load_config(StatePaths(home))
    web = OpsConsole(loaded, home, [], [], clock=lambda: NOW.timestamp())
    job = {"message": "Post the digest", "session_target": "main", "schedule": EVERY_HOUR,
           "delivery": {"mode": "announce", "channel": "telegram", "account": "bot", "to": "-100555",
                        "peer_kind": "group"}}
    with pytest.raises(JobError) as refused:
        web.cron_add(CronAddParams(job=job))
    assert GROUP_REFUSED in str(refused.value)
    shared = web.cron_add(CronAddParams(job={**job, "delivery": {**job["delivery"], "shares_main": True}}))
    assert shared["job"]["delivery"]["shares_main"] is True

    # The model, in a real main-session turn: it may not set the opt-in, on a new job or on the owner's.
    cron = CronJobs(home, loaded, clock=SimClock(NOW), fsync=False, for_model=True)
    owner_job = {**job, "delivery": {"mode": "announce", "channel": "telegram", "account": "bot", "to": "1",
                                     "shares_main": True}}
    calls = [{"tool_calls": [{"name": "cron", "arguments": {"action": "add", "job": owner_job}}]},
             {"tool_calls": [{"name": "cron", "arguments": {"action": "update", "id": shared["job"]["id"],
                                                            "job": {"delivery": {"shares_main": True}}}}]},
             "Done."]
    rt = AgentRuntime(loaded.agent(), ScriptedModel(calls), clock=SimClock(NOW), fsync=False, home=home, cron=cron)
    try:
        results = [c.result for c in rt.run_turn(main_session_key("main"), "set it up").tool_calls]
    finally:
        rt.close()
    assert len(results) == 2
    assert all("only the owner can let a job's replies share main-session text" in r for r in results)
    assert [j.delivery.to for j in CronJobs(home, loaded).load().jobs] == ["-100555"]


def two_configs(home: Path) -> tuple[LoadedConfig, LoadedConfig]:
    """The config when the jobs were made (owner 42) and after a change (42 is no longer an owner, still a
    contact: allow_from); the group is listed, so the jobs' targets are let in in both."""
    def build(owners: list[str]) -> LoadedConfig:
        return build_config({"agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                                     "heartbeat": {"every_minutes": 0}}},
                             "channels": {"telegram": {"accounts": {"default": {
                                 "owners": owners, "allow_from": ["42"], "groups": ["-100555"]}}}}}, StatePaths(home))
    return build(["42"]), build(["7"])


def test_each_run_checks_main_text_again_and_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Through the real scheduler: the owner's main-session job to 42 (an owner when made), a job file entry
    without the opt-in (hand-edited, or made before the rule) to a group, and a confirmed one to the group.
    After the config change only the confirmed one runs; the others fail, deliver nothing, reach no model,
    and each leaves one warning naming the job and the target, with no text of the reply."""
    home = tmp_path / "home"
    before, after = two_configs(home)
    jobs = CronJobs(home, before, clock=SimClock(NOW), fsync=False)

    def main_job(job_id: str, to: str, **delivery: object) -> None:
        jobs.add({"id": job_id, "message": f"run {job_id}", "session_target": "main", "schedule": EVERY_HOUR,
                  "delivery": {"mode": "announce", "channel": "telegram", "to": to, **delivery}})

    main_job("to-owner", "42")
    main_job("legacy", "42")
    main_job("shared", "-100555", peer_kind="group", shares_main=True)
    # A job file entry aimed at the group without the opt-in (as `hermit cron add --main` used to write it).
    jobs.store.update_job("legacy", lambda j: j.model_copy(update={"delivery": j.delivery.model_copy(
        update={"to": "-100555"})}))
    clock = SimClock(NOW)
    asked: list[str] = []

    def model(req: ModelRequest) -> Reply:
        asked.append(last_user_text(req).splitlines()[0])
        return f"Digest: {SECRET}"

    channel = MemoryChannel()
    rts, _ = runtimes(after, clock, model)
    service = SchedulerService(home, after, LocalHost(rts, channel.deliver, threaded=False), clock=clock, fsync=False)

    with caplog.at_level(logging.WARNING, logger="hermit.scheduler"):
        tick_once(service, clock, NOW + timedelta(hours=1, seconds=1))
    assert [(t.peer_id, text) for t, text in channel.sent] == [("-100555", f"Digest: {SECRET}")]
    assert len(asked) == 1 and "shared" in asked[0]
    for job_id, whom in (("to-owner", "telegram/default dm 42, who is not listed under "
                                      "channels.telegram.accounts.default.owners"),
                         ("legacy", "the group telegram/default -100555")):
        [run] = service.jobs.store.runs(job_id)
        assert run["status"] == "error" and not run["delivered"]
        assert f"not run: this job runs in agent main's main session (MEMORY.md, owner-only notes) and its " \
               f"replies would go to {whom}, without the owner's opt-in" in run["error"]
        logged = [r.getMessage() for r in caplog.records if f"job {job_id} not run" in r.getMessage()]
        assert len(logged) == 1 and whom in logged[0]
    assert not any(SECRET in r.getMessage() for r in caplog.records)


BERLIN = ZoneInfo("Europe/Berlin")
CHECKLIST = "# HEARTBEAT.md\n\n- Remind the family about Sunday lunch.\n"
ALERT = f"Sunday lunch at noon. {SECRET}"


def heartbeat_run(tmp_path: Path, target: dict[str, Any], caplog: pytest.LogCaptureFixture,
                  **heartbeat: object) -> tuple[dict[str, object], MemoryChannel]:
    """One heartbeat through the real scheduler, the owner being telegram/default 42."""
    home = tmp_path / "home"
    loaded = build_config({"agents": {"defaults": {
        "timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
        "heartbeat": {"every_minutes": 30, "target": target, **heartbeat}}},
        # The contact and the group are let in: an alert shared with someone not let in is withheld too.
        "channels": {"telegram": {"accounts": {"default": {"owners": ["42"], "allow_from": ["2001"],
                                                           "groups": ["-100555"]}}}}}, StatePaths(home))
    clock = SimClock(datetime(2026, 6, 1, 9, 0, tzinfo=BERLIN))
    channel = MemoryChannel()
    rts, _ = runtimes(loaded, clock, lambda req: ALERT)
    (loaded.agent().workspace / "HEARTBEAT.md").write_text(CHECKLIST, encoding="utf-8")
    service = SchedulerService(home, loaded, LocalHost(rts, channel.deliver, threaded=False), clock=clock, fsync=False)

    async def beat() -> dict[str, object]:
        await service.start(run_loop=False)
        try:
            clock.now += timedelta(minutes=30)
            await service.tick()
            await settle(service)
        finally:
            await service.stop()
        last = service.status()["agents"]["main"]["heartbeat"]["last"]
        assert isinstance(last, dict)
        return last

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hermit.scheduler"):
        return asyncio.run(beat()), channel


@pytest.mark.parametrize("target", [{"channel": "telegram", "to": "-100555"},
                                    {"channel": "telegram", "to": "-100555", "peer_kind": "group"},
                                    {"channel": "telegram", "to": "2001"}])
def test_a_heartbeat_alert_for_a_non_owner_is_withheld_without_the_opt_in(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, target: dict[str, Any]) -> None:
    last, channel = heartbeat_run(tmp_path / "off", target, caplog)
    assert channel.sent == [] and last["status"] == "alert" and last["delivered"] is False
    reason = str(last["reason"])
    whom = ("the group telegram/default -100555" if target["to"].startswith("-") else
            "telegram/default dm 2001, who is not listed under channels.telegram.accounts.default.owners")
    assert reason.startswith("not delivered: heartbeat alerts of agent main are main-session text and "
                             f"telegram:default:{target['to']} reaches {whom}")
    assert "heartbeat.share_alerts_with_target: true" in reason
    warned = [r.getMessage() for r in caplog.records if "heartbeat alert not delivered" in r.getMessage()]
    assert len(warned) == 1 and whom in warned[0] and "agent main" in warned[0]
    assert not any(SECRET in r.getMessage() for r in caplog.records)
    # The owner's explicit opt-in in the config sends it.
    last, channel = heartbeat_run(tmp_path / "on", target, caplog, share_alerts_with_target=True)
    assert last["delivered"] is True and [(t.peer_id, text) for t, text in channel.sent] == [(target["to"], ALERT)]


def test_a_heartbeat_alert_for_the_owner_needs_no_opt_in(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    last, channel = heartbeat_run(tmp_path, {"channel": "telegram", "to": "42"}, caplog)
    assert last["delivered"] is True and [text for _, text in channel.sent] == [ALERT]
    assert not [r for r in caplog.records if "not delivered" in r.getMessage()]


def test_doctor_says_which_main_text_is_shared_and_which_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    write_config(home)
    add = ("cron", "add", "--every", "1h", "-m", "what is new?", "--main")
    assert hermit(capsys, home, *add, "--name", "shared", "--announce", "telegram:bot:-100", "--share-main-text")[0] == 0
    assert hermit(capsys, home, *add, "--name", "mine", "--announce", "telegram:bot:1")[0] == 0
    # A job file entry without the opt-in (hand-edited, or written before the rule).
    raw = json.loads((home / "cron" / "jobs.json").read_text())
    legacy = {**raw["jobs"][1], "id": "legacy", "name": "old",
              "delivery": {"mode": "announce", "channel": "telegram", "account": "bot", "to": "2001"}}
    raw["jobs"].append(legacy)
    (home / "cron" / "jobs.json").write_text(json.dumps(raw))

    def access(heartbeat: dict[str, Any]) -> str:
        write_config(home, heartbeat=heartbeat)
        main(["--home", str(home), "doctor", "--json"])
        checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
        assert checks["access"]["status"] == "warn"
        return str(checks["access"]["detail"])

    detail = access({"target": {"channel": "telegram", "account": "bot", "to": "-100"}})
    assert "agents main: heartbeat alerts (main-session text) would go to the group telegram/bot -100: they are " \
           "not delivered (point heartbeat.target at an owner, or set heartbeat.share_alerts_with_target: true)" \
           in detail
    assert "(shared): its replies (main-session text) go to the group telegram/bot -100 (shared on purpose: " \
           "--share-main-text)" in detail
    assert "cron job legacy (old): its replies (main-session text) would go to telegram/bot dm 2001, who is not " \
           "listed under channels.telegram.accounts.bot.owners, without the owner's opt-in: its runs fail and " \
           "deliver nothing (`hermit cron edit legacy --isolated`, or `--share-main-text`)" in detail
    assert "(mine)" not in detail and "dm -100" not in detail
    detail = access({"target": {"channel": "telegram", "account": "bot", "to": "-100"},
                     "share_alerts_with_target": True})
    assert "agents main: heartbeat alerts (main-session text) go to the group telegram/bot -100 " \
           "(heartbeat.share_alerts_with_target is on)" in detail
