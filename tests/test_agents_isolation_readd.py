"""An agent taken out of the config leaves its folders and jobs behind; `hermit agents add` with the same id gave
them to the new agent without a word — the old owner's main session continued, the old contacts' rooms, notes and
index searched, its cron jobs running again — although the new agent may answer other people (a family bot
re-used for a work team). `add` now says what it takes over."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.cli.main import main


def test_re_adding_an_agent_id_says_what_the_earlier_agent_left(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    assert main(["--home", str(home), "init"]) == 0
    before = (home / "hermit.yaml").read_text()
    assert main(["--home", str(home), "agents", "add", "family"]) == 0
    assert "note:" not in capsys.readouterr().out  # a new id: nothing to take over
    assert main(["--home", str(home), "--agent", "family", "cron", "add", "--every", "1h", "--name", "chores",
                 "--message", "remind the kids"]) == 0
    sessions = home / "agents" / "family" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text("{}")
    (home / "hermit.yaml").write_text(before)  # the agent is taken out of the config; its files and job stay
    capsys.readouterr()

    assert main(["--home", str(home), "agents", "add", "family"]) == 0

    out = capsys.readouterr().out
    assert "note: an earlier agent family left" in out
    assert f"its workspace {home / 'workspace-family'}" in out
    assert f"its sessions and chats' rooms in {home / 'agents' / 'family'}" in out
    assert "1 cron job (" in out
