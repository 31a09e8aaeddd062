"""A new user's first day, walked as the README says (the H9 walk, session 17), as the CLI in a subprocess.

A reminder is `hermit cron add -m … --at 20m`: "in twenty minutes" is how a person asks for one, and `--at` took
only an ISO time ("error: invalid time '20m'"). And a one-shot reminder is deleted once it ran, so `hermit cron runs
ID` (the way to see whether it ran and was delivered) answered "no job": its run log, which stays, is shown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)


def write_config(home: Path, fake: FakeProvider | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, object] = {"agents": {"defaults": {"timezone": "Europe/Prague", "memory_search": {"provider": "none"},
                                                      **({"model": "fake/m"} if fake else {})}}}
    if fake is not None:
        cfg["models"] = {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))


def test_a_reminder_in_twenty_minutes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home)
    before = datetime.now(UTC)
    added = hermit(home, "cron", "add", "--name", "call", "-m", "Remind me to call Jana", "--at", "20m", "--json")
    after = datetime.now(UTC)
    assert added.returncode == 0, added.stderr
    job = json.loads(added.stdout)["job"]
    at = datetime.fromisoformat(job["schedule"]["at"])
    assert before + timedelta(minutes=20) <= at <= after + timedelta(minutes=20)
    listed = json.loads(hermit(home, "cron", "list", "--json").stdout)["jobs"]
    assert [j["name"] for j in listed] == ["call"]
    # The other spellings a person types, and edit takes them too; a number without a unit stays an error.
    for text, minutes in (("+2h", 120), ("in 1d", 1440), ("90s", 1.5)):
        start = datetime.now(UTC)
        edited = hermit(home, "cron", "edit", job["id"], "--at", text, "--json")
        assert edited.returncode == 0, edited.stderr
        moved = datetime.fromisoformat(json.loads(edited.stdout)["job"]["schedule"]["at"])
        assert start + timedelta(minutes=minutes) <= moved <= datetime.now(UTC) + timedelta(minutes=minutes)
    bare = hermit(home, "cron", "add", "-m", "x", "--at", "20")
    assert bare.returncode == 1 and "invalid time '20'" in bare.stderr, bare.stderr
    help_text = hermit(home, "cron", "add", "--help").stdout
    assert "20m" in help_text


def test_a_reminder_that_ran_and_was_deleted_still_shows_its_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "Call Jana now.", "repeat": True}]) as fake:
        write_config(home, fake)
        added = hermit(home, "cron", "add", "--name", "call", "-m", "Remind me to call Jana", "--at",
                       (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds"), "--json")
        assert added.returncode == 0, added.stderr
        job_id = json.loads(added.stdout)["job"]["id"]
        ran = hermit(home, "cron", "run", job_id)
        assert ran.returncode == 0 and "Call Jana now." in ran.stdout, ran.stderr
    assert hermit(home, "cron", "remove", job_id).returncode == 0
    runs = hermit(home, "cron", "runs", job_id)
    assert runs.returncode == 0, runs.stderr
    assert "no longer a job" in runs.stdout and " ok " in runs.stdout and "manual" in runs.stdout, runs.stdout
    as_json = hermit(home, "cron", "runs", job_id, "--json")
    assert as_json.returncode == 0 and len(json.loads(as_json.stdout)) == 1
    # An id that never was a job is still an error, and a path is never read as one.
    for unknown in ("j-never", "../cron/jobs"):
        missing = hermit(home, "cron", "runs", unknown)
        assert missing.returncode == 1 and "no job" in missing.stderr, missing.stderr
