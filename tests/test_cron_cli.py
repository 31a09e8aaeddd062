"""`hermit cron …` as a subprocess against a temp HERMIT_HOME and the fake provider (no gateway). A command that only
sets up what a test starts from (an `init`, the job a `cron run` runs) or reads back the jobs a test made (`cron list
--json`, whose own test is the first) runs in this process (`here`)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from clihere import hermit_here
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

LA = ZoneInfo("America/Los_Angeles")


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return env


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env_for(home), stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)


def here(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`hermit(home, ARGS)` in this process: for a command that only sets up what a test starts from."""
    return hermit_here(home, *args, env=env_for(home))


def write_config(home: Path, fake: FakeProvider | None = None, *, channels: dict[str, Any] | None = None,
                 **defaults: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {"agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                                   **defaults}},
                           "channels": {"telegram": {"accounts": {"default": {}}}} if channels is None else channels}
    if fake is not None:
        cfg["agents"]["defaults"]["model"] = "fake/model-x"
        cfg["models"] = {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))


def test_add_validates_prints_three_runs_in_the_jobs_zone_and_edits_and_removes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home)
    bad = hermit(home, "cron", "add", "--cron", "0 25 * * *", "-m", "x")
    assert bad.returncode == 1 and "error: invalid job: schedule.cron.expr" in bad.stderr
    assert "hint:" in bad.stderr and "Traceback" not in bad.stderr
    assert not (home / "cron" / "jobs.json").exists()  # nothing written
    bad_tz = hermit(home, "cron", "add", "--cron", "0 9 * * *", "--tz", "Pacific/Atlantis", "-m", "x")
    assert bad_tz.returncode == 1 and "unknown time zone 'Pacific/Atlantis'" in bad_tz.stderr

    add = hermit(home, "cron", "add", "--id", "brief", "--name", "brief", "--cron", "0 9 * * 1-5",
                 "--tz", "America/Los_Angeles", "-m", "Summarise my day", "--announce", "telegram:42")
    assert add.returncode == 0, add.stderr
    lines = add.stdout.splitlines()
    assert lines[0].startswith('added brief "brief": cron \'0 9 * * 1-5\' America/Los_Angeles in '
                               "America/Los_Angeles; isolated session; delivery telegram:default:42")
    runs = [line.strip() for line in lines[2:5]]
    assert len(runs) == 3 and all(" 09:00:00 P" in r for r in runs)  # 09:00 PST or PDT, not Berlin's time
    mode = stat.S_IMODE((home / "cron" / "jobs.json").stat().st_mode)
    assert mode == 0o600

    # No --tz: the configured zone (Europe/Berlin), said so.
    add2 = hermit(home, "cron", "add", "--id", "tea", "--every", "90m", "-m", "stretch")
    assert add2.returncode == 0 and "in Europe/Berlin, from agents.defaults.timezone" in add2.stdout

    listing = json.loads(hermit(home, "cron", "list", "--json").stdout)["jobs"]
    assert [j["id"] for j in listing] == ["brief", "tea"]
    assert listing[0]["next_run_at"].endswith(("-07:00", "-08:00")) and listing[0]["timezone"] == "America/Los_Angeles"
    table = hermit(home, "cron", "list").stdout
    assert "brief" in table and "isolated→telegram:default:42" in table

    edit = hermit(home, "cron", "edit", "tea", "--disable")
    assert edit.returncode == 0 and "(disabled)" in edit.stdout
    assert hermit(home, "cron", "edit", "tea").returncode == 1
    assert hermit(home, "cron", "remove", "tea").stdout == "removed tea\n"
    missing = hermit(home, "cron", "remove", "tea")
    assert missing.returncode == 1 and "no job 'tea'" in missing.stderr and "hermit cron list" in missing.stderr


def test_run_works_without_a_gateway_and_uses_the_jobs_time_zone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "Three meetings today.", "repeat": True}]) as fake:
        write_config(home, fake)
        assert here(home, "cron", "add", "--id", "brief", "--cron", "0 9 * * *", "--tz", "America/Los_Angeles",
                    "-m", "Summarise my day", "--announce", "telegram:42").returncode == 0
        before = json.loads(here(home, "cron", "list", "--json").stdout)["jobs"][0]["next_run_at"]
        started = datetime.now(UTC)
        run = hermit(home, "cron", "run", "brief")
        ended = datetime.now(UTC)
        assert run.returncode == 0, run.stderr
        sent = fake.requests[-1].body["messages"][-1]["content"]
    text = sent if isinstance(sent, str) else "".join(p["text"] for p in sent)
    # The turn sees the time in the job's zone (the original used UTC on manual runs): a minute of the run, with
    # its date and abbreviation there (taken around the run, not after it: a midnight or a DST change in Los
    # Angeles may fall in between).
    shown, at = set(), started.replace(second=0, microsecond=0)
    while at <= ended:
        local = at.astimezone(LA)
        shown.add(f"{local:%Y-%m-%d %H:%M %Z} (America/Los_Angeles) · manual run]")
        at += timedelta(minutes=1)
    assert any(s in text for s in shown), (shown, text)
    assert "Summarise my day" in text
    assert run.stdout == "Three meetings today.\n"
    assert "manual run at" in run.stderr and "(America/Los_Angeles)" in run.stderr
    assert "not delivered to telegram:default:42" in run.stderr and "next run:" in run.stderr
    after = json.loads(here(home, "cron", "list", "--json").stdout)["jobs"][0]
    assert after["next_run_at"] == before and after["last_status"] == "ok"  # the schedule is untouched
    runs = json.loads(hermit(home, "cron", "runs", "brief", "--json").stdout)
    assert [(r["trigger"], r["status"], r["delivered"]) for r in runs] == [("manual", "ok", False)]
    assert runs[0]["session_key"] == "cron:brief"
    assert "manual" in hermit(home, "cron", "runs", "brief").stdout


def test_doctor_flags_invalid_jobs_and_an_explicit_heartbeat_with_an_empty_checklist(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, heartbeat={"every_minutes": 20})
    (home / "cron").mkdir(parents=True)
    (home / "cron" / "jobs.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": "ok1", "schedule": {"kind": "every", "every_ms": 60000}, "message": "m",
         "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00"},
        {"id": "bad", "schedule": {"kind": "cron", "expr": "every day"}, "message": "m",
         "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00"},
        {"id": "lost", "agent_id": "ghost", "schedule": {"kind": "every", "every_ms": 60000}, "message": "m",
         "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00"}]}))
    here(home, "init")
    doctor = hermit(home, "doctor")
    assert doctor.returncode == 1
    out = doctor.stdout
    assert "[FAIL] cron jobs" in out and "invalid job #2" in out and "no agent 'ghost'" in out
    assert "[FAIL] heartbeat" in out and "HEARTBEAT.md is empty" in out
    assert "heartbeat.every_minutes: 0" in out
    # The invalid entry survives any rewrite of the file (nothing is lost), and list still works.
    assert hermit(home, "cron", "edit", "ok1", "--disable").returncode == 0
    raw = json.loads((home / "cron" / "jobs.json").read_text())
    assert [j["id"] for j in raw["jobs"]] == ["ok1", "bad", "lost"]
    listing = hermit(home, "cron", "list")
    assert listing.returncode == 0 and "warning: invalid job #2" in listing.stderr
    # With items in HEARTBEAT.md the heartbeat check passes.
    (home / "workspace" / "HEARTBEAT.md").write_text("- check the mail\n")
    assert "[ok  ] heartbeat        main: every 20 min, alerts stay in the transcript" in hermit(home, "doctor").stdout


def test_announce_targets_are_checked_against_the_configured_accounts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, channels={"telegram": {"accounts": {"personal": {}, "work": {}}},
                                 "slack": {"accounts": {"only": {}}}})

    def add(*args: str) -> subprocess.CompletedProcess[str]:
        return hermit(home, "cron", "add", "--every", "1h", "-m", "check", *args)

    nowhere = add("--announce", "discord:42")
    assert nowhere.returncode == 1 and "no discord account is configured" in nowhere.stderr
    assert "channels.discord.accounts" in nowhere.stderr
    # Two telegram accounts and no 'default': the error names them and how to choose.
    vague = add("--announce", "telegram:42")
    assert vague.returncode == 1 and "telegram accounts in the config: personal, work" in vague.stderr
    assert "telegram:personal:PEER" in vague.stderr
    typo = add("--announce", "telegram:persnal:42")
    assert typo.returncode == 1 and "no telegram account 'persnal'" in typo.stderr and "personal, work" in typo.stderr
    unknown = add("--announce", "telegramm:42")
    assert unknown.returncode == 1 and "unknown channel 'telegramm'" in unknown.stderr
    assert not (home / "cron" / "jobs.json").exists()

    # Channel names in any case; CHANNEL:ACCOUNT:PEER; the only account of a channel is taken and written in.
    assert add("--id", "a", "--announce", "Telegram:work:42").returncode == 0
    assert add("--id", "b", "--announce", "SLACK:C123").returncode == 0
    assert add("--id", "c", "--announce", "telegram:42", "--account", "personal").returncode == 0
    jobs = {j["id"]: j["delivery"] for j in json.loads(here(home, "cron", "list", "--json").stdout)["jobs"]}
    assert jobs["a"] == {"mode": "announce", "channel": "telegram", "account": "work", "to": "42"}
    assert jobs["b"] == {"mode": "announce", "channel": "slack", "account": "only", "to": "C123"}
    assert jobs["c"]["account"] == "personal"
    assert hermit(home, "cron", "edit", "a", "--announce", "telegram:nope:1").returncode == 1

    # A job that went bad (the account was renamed in the config) and a bad heartbeat target fail doctor.
    write_config(home, channels={"telegram": {"accounts": {"personal": {}}}, "slack": {"accounts": {"only": {}}}},
                 heartbeat={"every_minutes": 30, "target": {"channel": "whatsapp", "to": "+4915"}})
    doctor = hermit(home, "doctor", "--json")
    [targets] = [c for c in json.loads(doctor.stdout) if c["name"] == "delivery targets"]
    assert targets["status"] == "fail" and doctor.returncode == 1
    assert "job a: there is no telegram account 'work'" in targets["detail"]
    assert "heartbeat target of main: no whatsapp account is configured" in targets["detail"]
    assert "job b" not in targets["detail"] and "job c" not in targets["detail"]
