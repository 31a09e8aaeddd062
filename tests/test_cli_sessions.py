"""`hermit sessions list --all` and `sessions show <old id>`: past sessions stay listable and readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenthelpers import load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.cli.main import main
from hermit.testing import ScriptedModel

KEY = "agent:main:main"


def two_sessions(home: Path) -> tuple[str, str]:
    """A chat, then /new, then another chat: (old session id, current session id). No daily reset (the runtime
    runs on the real clock): a 04:00 between two turns would make a third session."""
    (home / "workspace").mkdir(parents=True)
    loaded = load_offline(home, defaults={"session": {"reset": {"mode": "off"}}})
    rt = AgentRuntime(loaded.agent(), ScriptedModel(["first reply", "new session greeting", "second reply"]), fsync=False)
    rt.run_turn(KEY, "the kiwi question")
    old = rt.session(KEY)
    assert old is not None
    rt.run_turn(KEY, "/new")
    rt.run_turn(KEY, "the mango question")
    new = rt.session(KEY)
    assert new is not None and new.session_id != old.session_id
    return old.session_id, new.session_id


def test_show_an_old_session_by_id_and_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    old, new = two_sessions(home)
    assert main(["--home", str(home), "sessions", "show", old]) == 0
    out = capsys.readouterr().out
    assert f"session {KEY} · {old}" in out and "(past session)" in out
    assert "the kiwi question" in out and "first reply" in out and "mango" not in out
    assert out.rstrip().endswith("— ended (/new)")  # its last line says why it ended

    assert main(["--home", str(home), "sessions", "show", old[:8], "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries[0]["id"] == old and entries[0]["sessionKey"] == KEY

    assert main(["--home", str(home), "sessions", "show", KEY]) == 0  # a key still means its current session
    assert "the mango question" in capsys.readouterr().out


def test_list_all_includes_past_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    old, new = two_sessions(home)
    assert main(["--home", str(home), "sessions", "list", "--json"]) == 0
    assert [r["sessionId"] for r in json.loads(capsys.readouterr().out)] == [new]

    assert main(["--home", str(home), "sessions", "list", "--all", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["sessionId"], r["key"], r["current"]) for r in rows] == [(new, KEY, True), (old, KEY, False)]
    assert rows[1]["messages"] == 2 and rows[1]["transcript"].endswith(f"{old}.jsonl")

    assert main(["--home", str(home), "sessions", "list", "--all"]) == 0
    out = capsys.readouterr().out
    assert old[:8] in out and new[:8] in out and "past" in out and "current" in out
    assert "hermit sessions show" in out


def test_unknown_or_ambiguous_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    two_sessions(home)
    assert main(["--home", str(home), "sessions", "show", "zzzz"]) == 1
    err = capsys.readouterr().err
    assert "no session 'zzzz'" in err and "sessions list --all" in err
