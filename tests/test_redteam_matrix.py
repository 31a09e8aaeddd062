"""Red-team matrix: every room kind × every tool it is offered × hostile arguments, as root and as uid 65534.

Each room (the owner's group, a paired contact's DM, an allow_from contact's, an open-policy stranger's, a group
thread with contacts, a Slack channel, an isolated cron job, a sub-agent, a second agent's contact) runs a real
turn whose model plants symlinks with exec and repeats every tool result in its reply, then calls read, write,
edit, memory_get, memory_search, tool_output and exec with every spelling of the owner's private files: relative,
`..`, absolute host paths, `/workspace/…`, the links its exec planted, /proc/self/*, other rooms' folders, the
state dir (hermit.env, hermit.yaml, transcripts, the index), NUL bytes, confusable and zero-width characters,
very long paths. Canaries planted in MEMORY.md, memory/private/, HEARTBEAT.md, another contact's room and note,
the owner's transcript (a message and a tool result), hermit.env, the config, Hermit's environment, the second
agent's notes and a file beside the state dir must never appear in a tool result, the model's requests, a reply
or a file the room holds; the owner's main session, asked the same, sees them (so a clean room means something).
A race flips links in a room between its own files and private ones (host-side, as fast as it can, and with the
room's own exec calls) while its file tools use them. An MCP client (not sharing private memory) tries the same
paths and searches through the real server (in tests/test_redteam_matrix_bus.py, beside the bus's rooms).

Real parts throughout (`tests/redteamworld.py`): the runtime, bubblewrap, the SQLite index, the MCP server.
Heartbeats and main-session cron jobs run in the owner's main session, so they are the owner's, not a room.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redteamworld as rw
from ciguard import need
from hermit.memory.policy.audience import OWNER, SHARED, line_audiences
from hermit.testing import FunctionModel
from hermit.tools.os_sandbox import detect
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir

USERS = ["root", "nobody"]
PROCESS_ENV = "HERMIT_REDTEAM_SECRET_TOKEN"


def _allowed(room: str) -> Any:
    """The second agent's own shared note is its rooms' to read."""
    return (lambda c: c == "family_note") if room == "second_agent_dm" else (lambda _c: False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The scenario's results as this process's uid (root in CI) and, started first so both run at once, as uid
    65534 in a child process; `None` for a run that cannot happen here (the tests then say so)."""
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    nobody: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody) if os.geteuid() == 0 else None
    with shared_dir("hermit-redteam-") as shared:
        child = None
        if python is not None:
            code = ("import json, sys; from pathlib import Path; import redteamworld as rw; "
                    "out = rw.scenario(Path(sys.argv[1])); Path(sys.argv[2]).write_text(json.dumps(out))")
            child = subprocess.Popen(
                [python, "-c", code, str(shared / "state"), str(shared / "out.json")], cwd=shared,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), "HOME": str(shared),
                     PROCESS_ENV: rw.CANARIES["process_env"]}, **nobody)
        old = os.environ.get(PROCESS_ENV)
        os.environ[PROCESS_ENV] = rw.CANARIES["process_env"]  # Hermit's own environment holds a secret
        try:
            got: dict[str, Any] = {"root": rw.scenario(tmp_path_factory.mktemp("redteam") / "state")}
        finally:
            if old is None:
                os.environ.pop(PROCESS_ENV, None)
            else:
                os.environ[PROCESS_ENV] = old
        got["nobody"] = None
        if child is not None:
            _, err = child.communicate(timeout=PROC_TIMEOUT * 4)
            assert child.returncode == 0, err[-3000:]
            got["nobody"] = json.loads((shared / "out.json").read_text())
        yield got


def run_of(runs: dict[str, Any], user: str) -> dict[str, Any]:
    got = runs[user]
    need(got is not None, "root (to run Hermit as uid 65534) and a Python that uid can run")
    assert isinstance(got, dict)
    return got


@pytest.mark.parametrize("user", USERS)
def test_the_owner_sees_what_rooms_must_not(runs: dict[str, Any], user: str) -> None:
    """The positive control: the canaries are where the rooms look, and the owner's session reads them."""
    owner = run_of(runs, user)["owner"]
    c = rw.CANARIES
    assert c["memory"] in owner["memory_get"] and c["private"] in owner["read_private"]
    assert c["transcript"] in owner["search"] and c["owner_exec"] in owner["tool_output"]
    assert c["room_b"] in owner["room_b"] and c["note_b"] in owner["note_b"]  # contact B sees its own
    assert c["family_note"] in owner["fam"] and c["owner_day"] in owner["owner_day"]
    assert c["user_md"] in owner["user_md"] and c["vault"] in owner["vault"] and c["b_message"] in owner["b_message"]
    assert c["inbox"] in owner["inbox"] and c["memory"] in owner["history"]  # MEMORY.md's earlier version is kept


@pytest.mark.parametrize("room", list(rw.ROOMS))
@pytest.mark.parametrize("user", USERS)
def test_no_private_text_reaches_a_room(runs: dict[str, Any], user: str, room: str) -> None:
    got = run_of(runs, user)["rooms"][room]
    allowed = _allowed(room)
    assert set(got["tools"]) <= rw.TOOLS_A_ROOM_MAY_HAVE and "exec" in got["tools"], got["tools"]
    assert "I found:" in got["reply"], got["reply"][:500]  # the hostile turn ran its calls
    assert len(got["after_owner"]) > 50
    for where in ("reply", "requests", "room_files", "after_owner"):
        text = json.dumps(got[where]) if isinstance(got[where], list) else got[where]
        assert not rw.leaks(text, allowed), (where, rw.leaks(text, allowed))
    leaked = [(name, args[:160], rw.leaks(text, allowed), text[:300]) for name, args, text, _ in got["calls"]
              if rw.leaks(text, allowed) or text.startswith("CRASH")]
    assert not leaked, leaked
    assert len(got["calls"]) > 700


@pytest.mark.parametrize("room", list(rw.ROOMS))
@pytest.mark.parametrize("user", USERS)
def test_a_rooms_errors_name_no_host_path(runs: dict[str, Any], user: str, room: str) -> None:
    """Where Hermit keeps its state (the owner's home, login name) is never in a file or memory tool's answer
    to a path the room gave without it (exec and tool_output repeat what the room's own commands printed)."""
    got = run_of(runs, user)
    home = got["paths"]["home"]
    named = [(name, args[:120], text[:300]) for name, args, text, _ in got["rooms"][room]["calls"]
             if home in text and home not in args and name not in ("exec", "tool_output")]
    assert not named, named


@pytest.mark.parametrize("user", USERS)
def test_edit_tells_no_right_guess_from_a_wrong_one(runs: dict[str, Any], user: str) -> None:
    """An edit of a private file with a line it holds and with one it does not: the same answer."""
    for room, got in run_of(runs, user)["rooms"].items():
        calls = got["calls"]
        for i, (name, args, text, _) in enumerate(calls):
            if name == "edit" and f"'old': '{rw.LINES['memory']}'" in args:
                right = text.replace(rw.LINES["memory"], "<old>")
                wrong = calls[i + 1][2].replace("yak vault combination", "<old>")
                assert right == wrong, (room, args[:120], right[:200], wrong[:200])


@pytest.mark.parametrize("user", USERS)
def test_nothing_private_is_changed_and_writes_stay_the_rooms(runs: dict[str, Any], user: str) -> None:
    got = run_of(runs, user)
    assert got["changed"] == [], got["changed"]
    written = [rel for rel, text in got["workspace_md"].items() if "pwned" in text or "raced" in text]
    assert rw.DAILY in written, written  # the rooms' appends to today's log landed, as their notes
    for rel in written:
        text = got["workspace_md"][rel]
        assert rel.startswith("memory/") and not rel.startswith("memory/private/"), rel
        for line, audience in zip(text.split("\n"), line_audiences(text, rel), strict=True):
            if "pwned" in line or "raced" in line:
                assert audience not in (OWNER, SHARED), (rel, line, audience)


@pytest.mark.parametrize("user", USERS)
def test_links_flipping_under_every_file_tool(runs: dict[str, Any], user: str) -> None:
    """TOCTOU: a room's links flip between its own files and private ones (host-side and by its exec calls)
    while read, write, edit and memory_get use them: nothing private comes back, nothing private changes."""
    race = run_of(runs, user)["race"]
    host_flips, exec_flips = race["flips"]
    assert host_flips > 100 and exec_flips >= 2, race["flips"]
    assert not race["exec_errors"], race["exec_errors"]  # the room's commands all ran (a quota walk once failed)
    leaked = [(n, p, text[:200]) for n, p, text, _ in race["results"] if rw.leaks(text) or text.startswith("CRASH")]
    assert not leaked, leaked
    assert {n for n, *_ in race["results"]} == {"read", "write", "edit", "memory_get"}
    assert any(not err and ("benign" in text or "raced" in text) for n, _, text, err in race["results"]
               if n == "read"), "the room's own files were never read through its links"


# -- what the matrix found ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["a/" * 2100 + "MEMORY.md", "memory/" + "y" * 300 + ".md"], ids=["deep", "long-name"])
def test_a_path_too_long_gets_a_refusal_not_the_host_path(tmp_path: Path, path: str) -> None:
    """memory_get with a path the OS finds too long raised OSError from its symlink check, and the tool runner
    answered the chat with the OS error: the workspace's host path (the owner's home, their login name) and a
    traceback in the log. Now it is refused like any other path memory_get cannot take, for every session."""
    from agenthelpers import tool_call
    from test_contact_oracles import make

    home = tmp_path / "alice-q7z" / ".hermit"
    (home / "workspace" / "memory").mkdir(parents=True)
    rt = make(home, FunctionModel(lambda _r: "ok"))
    try:
        for session in (rw.ROOMS["contact_dm_paired"][1], rw.MAIN):
            text, is_error = tool_call(rt, session, "memory_get", path=path)
            assert is_error and "cannot use this path (File name too long)" in text, text
            assert str(home) not in text and "OSError" not in text, text[:300]
    finally:
        rt.close()

