"""A chat that is not the owner's sees its workspace as `/workspace`, never the host's path (audit F5).

A contact's sandboxed command ran in a tmpfs mounted at the workspace's host path, so `pwd`, `$HOME`,
/proc/self/mountinfo and bubblewrap's own command line (/proc/1/cmdline) showed the state dir's path — under
the owner's home, the owner's login name and folder layout — and the contact's system prompt said "Your working
directory is <that path>" and named the model. Now the room's sandbox, its HOME, its prompt and its file tools
say `/workspace` (views.ROOM_ROOT); the file tools take `/workspace/x` as `x` and refuse the host path like any
other absolute path; the owner's own session keeps the real path.

Played through the real runtime (`run_turn` with a scripted model making the tool calls, exec under the real
bubblewrap), as this process's uid (root here) and, when the tests run as root, as uid 65534 too: Hermit run
by a normal user, its sandbox its own uid.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import tool_call
from ciguard import need
from hermit.messages import ToolResultMessage
from hermit.sessions.keys import dm_session_key, main_session_key
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import detect
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir

CONTACT = dm_session_key("main", "telegram", "777")
MAIN = main_session_key("main")
MARK = "alice-q7z"  # a part of the state dir's path, as the owner's login name would be
NOTE = "the bike is in the shed"
PROBE = ("pwd; echo \"home=$HOME\"; cat /proc/self/mountinfo; tr '\\0' ' ' < /proc/1/cmdline; echo; "
         "tr '\\0' '\\n' < /proc/self/environ; ls -la /proc/self/cwd; echo from-a-command > made-by-exec.txt")
# What the contact's model does in one turn: (tool, arguments), in this order.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": "/workspace/notes.md", "content": NOTE + "\n"}),
    ("exec", {"command": PROBE}),
    ("read", {"path": "/workspace/notes.md"}),
    ("read", {"path": "notes.md"}),
    ("read", {"path": "made-by-exec.txt"}),
    ("exec", {"command": "cat /workspace/notes.md; cat ~/notes.md; pwd", "cwd": "/workspace/memory"}),
    ("read", {"path": "/workspace/no-such.md"}),
    ("read", {"path": "/workspace"}),
    ("write", {"path": "/workspace/../escape.md", "content": "x"}),
]
PROBE_AT = 1


def scenario(home: Path) -> dict[str, Any]:
    """The contact's turn and the owner's: the system prompts the model got and the contact's tool results, plus
    a read of the host path (refused) and of a room folder this process cannot open (its error)."""
    from test_contact_oracles import make

    (home / "workspace" / "memory").mkdir(parents=True)
    (home / "workspace" / "AGENTS.md").write_text("# Be kind\n")
    steps: list[Any] = [{"tool_calls": [{"id": f"c{i}", "name": name, "arguments": args}
                                        for i, (name, args) in enumerate(CALLS)]}, "done", "hello owner"]
    model = ScriptedModel(steps)
    rt = make(home, model)
    rt.run_turn(CONTACT, "hi, where are you?")
    rt.run_turn(MAIN, "hi")
    last = model.requests[1]
    results = [(m.content, m.is_error) for m in last.messages if isinstance(m, ToolResultMessage)]
    host = tool_call(rt, CONTACT, "read", path=f"{rt.agent.workspace}/AGENTS.md")
    return {"contact_prompts": [r.system for r in model.requests[:2]], "main_prompt": model.requests[2].system,
            "results": results, "host_read": host, "workspace": str(rt.agent.workspace),
            "model_ref": model.profile.ref}


def check(got: dict[str, Any], home: Path) -> None:
    assert MARK in str(home) and MARK in got["workspace"]
    for prompt in got["contact_prompts"]:
        assert MARK not in prompt and str(home) not in prompt, prompt
        assert "Your working directory is /workspace;" in prompt, prompt
        assert not got["model_ref"] or got["model_ref"] not in prompt, prompt
        # what the model needs to behave: whose chat this is (without the agent id since b33511e)
        assert "Session: telegram:dm:777" in prompt and "agent:main:" not in prompt, prompt
    # The owner knows where the workspace is: their own session still says it.
    assert f"Your working directory is {got['workspace']};" in got["main_prompt"]
    results = [tuple(r) for r in got["results"]]  # (text, is_error); lists when they came as JSON
    assert len(results) == len(CALLS), results
    for (text, _), call in zip(results, CALLS, strict=True):
        assert MARK not in text, (call, text)
    wrote, probe, read_abs, read_rel, read_made, cat, missing, folder, escape = results
    assert wrote == ("created notes.md (24 bytes)", False)
    text, is_error = probe
    assert not is_error, text
    lines = text.split("\n")
    assert lines[1] == "/workspace" and lines[2] == "home=/workspace", text
    assert " /workspace " in text and " /workspace/memory " in text  # mountinfo: the room's tmpfs, where it is
    assert "hermit-sandbox /workspace " in text  # bubblewrap's pid 1: the wrapper's argument
    assert "HOME=/workspace\n" in text and "HERMIT_CWD=" not in text
    assert "/proc/self/cwd -> /workspace\n" in text
    assert read_abs == (NOTE, False) and read_rel == (NOTE, False)
    assert read_made == ("from-a-command", False)  # the command's file came back into the room
    text, is_error = cat
    assert not is_error and text.endswith(f"\n{NOTE}\n{NOTE}\n/workspace/memory"), text
    assert missing == ("error: file not found: no-such.md\nhint: check the path (relative paths start at the "
                       "workspace)", True)
    assert folder[1] and "it contains: " in folder[0] and "notes.md" in folder[0], folder
    assert escape[1] and "outside the workspace" in escape[0] and "/workspace: pass a path" in escape[0], escape
    text, is_error = got["host_read"]  # the host path is no way in: it answers as any other outside path
    assert is_error and f"{got['workspace']}/AGENTS.md' is outside the workspace" in text, text
    assert text.count(MARK) == 1, text  # only where the error repeats the path it was given


@pytest.fixture
def backend_available() -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")


@pytest.mark.usefixtures("backend_available")
def test_a_contact_sees_slash_workspace_never_the_host_path(tmp_path: Path) -> None:
    home = tmp_path / MARK / ".hermit"
    check(scenario(home), home)


@pytest.mark.usefixtures("backend_available")
def test_as_a_normal_user_too(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root (to run Hermit as uid 65534)")
    nobody: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    with shared_dir("hermit-sandbox-path-") as shared:
        home = shared / MARK / ".hermit"
        code = ("import json, sys; from pathlib import Path; import test_sandbox_path as t; "
                "print(json.dumps(t.scenario(Path(sys.argv[1]))))")
        r = subprocess.run([python, "-c", code, str(home)], capture_output=True, text=True, timeout=PROC_TIMEOUT,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), "HOME": str(shared)},
                           cwd=shared, **nobody)
        assert r.returncode == 0, r.stderr[-3000:]
        check(json.loads(r.stdout.strip().splitlines()[-1]), home)


def test_a_room_error_names_no_host_path(tmp_path: Path) -> None:
    """A room folder Hermit may not use (another uid's: root-run; a file where the folder goes) is refused
    with words the contact may read: its path is spelled /workspace, an OSError loses its file name."""
    from test_contact_oracles import make

    home = tmp_path / MARK / ".hermit"
    (home / "workspace").mkdir(parents=True)
    rt = make(home, ScriptedModel([]))
    room = rt.confinement.room(CONTACT)
    room.base.mkdir(parents=True, mode=0o700)
    room.path.write_text("not a folder\n")
    text, is_error = tool_call(rt, CONTACT, "read", path="notes.md")
    assert is_error and MARK not in text and "cannot read 'notes.md': Not a directory" in text, text
    if os.geteuid() == 0:
        room.path.unlink()
        room.path.mkdir()
        os.chown(room.path, 65534, 65534)
        for name, args in (("read", {"path": "notes.md"}), ("write", {"path": "n.md", "content": "x"})):
            text, is_error = tool_call(rt, CONTACT, name, **args)
            assert is_error and MARK not in text and "room folder /workspace is not a folder owned" in text, text
