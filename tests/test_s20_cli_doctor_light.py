"""`hermit doctor` in a new state dir no longer builds the EN↔ZH lexicon nor loads httpx for Slack. Its translation
check built the lookup table (about 2 s of CPU, the first doctor of every state dir) to count its keys, and its
Slack checks imported the Slack channel (and httpx) to learn that no Slack account is configured. Now the doctor says
the dictionary is installed and the first search builds the table (counting its keys once it exists), and asks the
config before loading the Slack code; with a Slack account the checks run as before.

Real `hermit doctor` processes reporting the modules they imported (test_cli_lazy_imports.imported_by)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from clihere import hermit_here
from test_cli_lazy_imports import env_for, imported_by, loaded


def line(out: str, name: str) -> str:
    return next((x for x in out.splitlines() if x[7:].startswith(name)), "")


def test_doctor_in_a_new_state_dir_builds_no_lexicon_and_loads_no_slack(tmp_path: Path) -> None:
    home = tmp_path / "state"
    assert hermit_here(home, "init", env=env_for(home)).returncode == 0
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n", encoding="utf-8")
    p, found = imported_by(home, "doctor")
    assert "[ok  ] translation      EN↔ZH keyword translation: CC-CEDICT installed; its lookup table is built by the " \
           "first search" in p.stdout, p.stdout
    assert not list((home / "cache").glob("lexicon-*")), "doctor built the lexicon"
    assert "[ok  ] slack sessions   no Slack account" in p.stdout
    assert not loaded(found, ("httpx", "hermit.channels.slack", "hermit.channels.slack_migrate")), \
        loaded(found, ("httpx", "hermit.channels.slack", "hermit.channels.slack_migrate"))

    s = imported_by(home, "memory", "search", "piano lesson", "--json")[0]  # the first search builds it
    assert s.returncode == 0 and "results" in json.loads(s.stdout), s.stderr[-2000:]
    p, _ = imported_by(home, "doctor")
    keys = line(p.stdout, "translation")
    assert keys.startswith("[ok  ] translation      EN↔ZH keyword translation: CC-CEDICT, "), p.stdout
    assert int(keys.split("CC-CEDICT, ")[1].split()[0].replace(",", "")) > 100_000


def test_doctor_with_a_slack_account_still_checks_its_sessions(tmp_path: Path) -> None:
    home = tmp_path / "state"
    assert hermit_here(home, "init", env=env_for(home)).returncode == 0
    cfg = {"agents": {"defaults": {"memory_search": {"provider": "none"}}},
           "channels": {"slack": {"accounts": {"work": {"owners": ["U0OWNER1"]}}}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    p, found = imported_by(home, "doctor")
    sessions = line(p.stdout, "slack sessions")
    assert sessions and "no Slack account" not in sessions, p.stdout
    assert "hermit.channels.slack_migrate" in found
