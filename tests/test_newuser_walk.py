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
    assert before + timedelta(minutes=20) <= at <= after + timedelta(minutes=20, seconds=1)
    assert at.microsecond == 0  # shown as 19:51:05, not 19:51:04.885693
    listed = json.loads(hermit(home, "cron", "list", "--json").stdout)["jobs"]
    assert [j["name"] for j in listed] == ["call"]
    # The other spellings a person types, and edit takes them too; a number without a unit stays an error.
    for text, minutes in (("+2h", 120), ("in 1d", 1440), ("90s", 1.5)):
        start = datetime.now(UTC)
        edited = hermit(home, "cron", "edit", job["id"], "--at", text, "--json")
        assert edited.returncode == 0, edited.stderr
        moved = datetime.fromisoformat(json.loads(edited.stdout)["job"]["schedule"]["at"])
        assert start + timedelta(minutes=minutes) <= moved <= datetime.now(UTC) + timedelta(minutes=minutes, seconds=1)
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


def _template_home(tmp_path: Path, fake: FakeProvider) -> Path:
    """A new user's state dir as the README makes it: `hermit setup` (the template config), then a second agent."""
    home = tmp_path / "home"
    first = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                   "--model", "m1", "--name", "one", "--non-interactive")
    assert first.returncode == 0, first.stderr
    assert hermit(home, "agents", "add", "family").returncode == 0
    return home


def _added_only(before: str, after: str) -> list[str]:
    """The lines `after` has that `before` lacks, asserting every line of `before` is still there, in order."""
    old, new, added = before.splitlines(), after.splitlines(), []
    it = iter(new)
    for line in old:
        for candidate in it:
            if candidate == line:
                break
            added.append(candidate)
        else:
            raise AssertionError(f"line {line!r} of the config was changed or lost:\n{after}")
    return added + list(it)


def test_setup_after_agents_add_keeps_the_config_layout(tmp_path: Path) -> None:
    # `agents add` writes `  list:` / `    - id: main`; ruamel's indent guess took that 4 for the file's mapping
    # indent and the next `hermit setup` re-indented every line of the user's config (comments moved too).
    with FakeProvider([{"text": "ok", "repeat": True}]) as fake:
        home = _template_home(tmp_path, fake)
        before = (home / "hermit.yaml").read_text()
        again = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                       "--model", "m2", "--name", "two", "--non-interactive")
        assert again.returncode == 0, again.stderr
    after = (home / "hermit.yaml").read_text()
    added = _added_only(before.replace("model: one/m1", "model: two/m2"), after)
    assert added == ["    two:", "      type: openai-compatible", f"      base_url: {fake.openai_base_url}"], after


def test_setup_for_a_second_agent_sets_that_agent_up(tmp_path: Path) -> None:
    # `hermit agents add family` says "talk to it with: hermit --agent family chat"; `hermit --agent family setup`
    # changed the default model (main's too) and left the family bot answered by main unless `bindings:` was
    # written by hand.
    with FakeProvider([{"text": "ok", "repeat": True}]) as fake:
        home = _template_home(tmp_path, fake)
        before = (home / "hermit.yaml").read_text()
        model = hermit(home, "--agent", "family", "setup", "--provider", "openai-compatible", "--base-url",
                       fake.openai_base_url, "--model", "small", "--name", "two", "--non-interactive")
        assert model.returncode == 0, model.stderr
        assert "model two/small (agent family's)" in model.stdout
        bot = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--agent", "family", "setup", "--channel",
                              "telegram", "--account", "family", "--token-stdin", "--owner", "4242", "--no-check"],
                             input="456:FAM\n", capture_output=True, text=True, timeout=PROC_TIMEOUT,
                             env={**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"})
        assert bot.returncode == 0, bot.stderr
        assert "channel account telegram/family, answered by agent family" in bot.stdout
    listed = json.loads(hermit(home, "models", "list", "--json").stdout)
    used = {m["ref"]: m["agents"] for m in listed["models"]}
    assert used == {"one/m1": ["main"], "two/small": ["family"]}, listed
    cfg = yaml.safe_load((home / "hermit.yaml").read_text())
    assert cfg["bindings"] == [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "family"}}]
    assert cfg["agents"]["defaults"]["model"] == "one/m1"
    doctor = hermit(home, "doctor").stdout
    assert "1 binding(s), default agent main" in doctor, doctor
    # The model line went into the family entry, above the template's comments that follow it, and nothing the
    # user had was changed.
    after = (home / "hermit.yaml").read_text()
    assert "    - id: family\n      model: two/small\n" in after, after
    _added_only(before, after)
    # Unknown agents are refused before anything is written.
    typo = hermit(home, "--agent", "famly", "setup", "--provider", "fake", "--non-interactive", "--no-check")
    assert typo.returncode == 1 and "famly" in typo.stderr and "family" in typo.stderr, typo.stderr
    assert (home / "hermit.yaml").read_text() == after


def test_setup_on_a_terminal_for_a_second_agent_says_so_and_sets_its_model(tmp_path: Path) -> None:
    import test_setup as setup_cli  # its Terminal and env_for (a module attribute: its tests are not collected here)

    with FakeProvider([{"text": "ok", "repeat": True}]) as fake:
        home = _template_home(tmp_path, fake)
        term = setup_cli.Terminal(["--agent", "family", "setup", "--provider", "openai-compatible", "--base-url",
                                   fake.openai_base_url, "--name", "two"], setup_cli.env_for(home))
        try:
            term.expect("Hermit setup for agent family — state dir", timeout=20)
            term.expect("Model: ")
            term.send("small")
            term.expect("API key for two (Enter if the server needs none): ")
            term.send("")
            term.expect("Add a chat channel account")
            term.send("")
            term.expect("next: ")
        except AssertionError:
            term.send("\x03")  # Ctrl-C at whatever it asks: close() returns at once, the failure is the expect's
            raise
        finally:
            code = term.close()
    assert code == 0, term.seen
    assert "model two/small (agent family's)" in term.seen
    used = {m["ref"]: m["agents"] for m in json.loads(hermit(home, "models", "list", "--json").stdout)["models"]}
    assert used == {"one/m1": ["main"], "two/small": ["family"]}
