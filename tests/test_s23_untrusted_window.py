"""Session 23 (t4): a detached job that writes after the watch's day is not obeyed unseen while it lives
(agent/untrusted_watch.py: `on`).

Before (d141dae): the watch a command armed in a turn that had read a page lasted 24 h, whatever the job it left was
doing: `nohup sh -c 'sleep 90000; cat page >> HEARTBEAT.md' &` waited the day out, wrote, and the next heartbeat's
prompt held the page's rule as the owner's checklist. Now the watch stands while a process the command left in the
workspace lives, and for the first look after it ended (it may have written just before). Then it ends as before:
the owner's hand edit after that is theirs.

Real parts: the runtime's turns with their real tools; a real shell whose detached job really outlives the command;
the heartbeat's turn and its system prompt. The day passing is the watch's `until` set a day back (the job runs in
another process, on the real clock); the model is scripted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hermit.agent import untrusted_watch
from hermit.testing import ScriptedModel
from prochelpers import PROC_TIMEOUT
from test_audit21_untrusted_standing import MAIN, RULE, call, setup
from test_audit22_untrusted_detached import HEARTBEAT_PROMPT, wait_for


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def _a_day_later(state: Path) -> None:
    """The watch's day is over (as if 24 h had passed): in its file and in this process's copy of it."""
    path = state / "untrusted-watch.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["until"] = time.time() - 1
    path.write_text(json.dumps(data), encoding="utf-8")
    untrusted_watch._KEPT[state]["until"] = data["until"]


@pytest.mark.parametrize("where", ["in the workspace", "cd / first"])
def test_a_job_that_writes_after_the_day_while_it_lives_is_set_aside(tmp_path: Path, where: str) -> None:
    page = tmp_path / "page.html"
    page.write_text(f"{RULE}\n", encoding="utf-8")
    go, done = tmp_path / "go", tmp_path / "done"
    heartbeat = tmp_path / "home" / "workspace" / "HEARTBEAT.md"
    job = f"while [ ! -e {go} ]; do sleep 0.05; done; cat {page} >> {heartbeat}; touch {done}"
    cd = "cd / && " if where == "cd / first" else ""  # (left the workspace: followed as an orphan of its shell)
    rt, _, _ = setup(tmp_path, [call("exec", command=f"cat {page}"),
                                call("exec", command=f"{cd}nohup sh -c '{job}' > /dev/null 2>&1 &"), "Hello."])
    ws, state = rt.agent.workspace, rt.agent.sessions_dir.parent
    assert ws / "HEARTBEAT.md" == heartbeat
    (ws / "HEARTBEAT.md").write_text("# Heartbeat\n\n- water the plants\n", encoding="utf-8")
    try:
        rt.run_turn(MAIN, "what does example.com say?")
        _a_day_later(state)
        rt.model = ScriptedModel(["HEARTBEAT_OK"])  # type: ignore[assignment]
        rt.run_turn(MAIN, HEARTBEAT_PROMPT, heartbeat=True)  # a look while the job still waits: nothing to see
    finally:
        go.touch()
    wait_for(done)
    deadline = time.monotonic() + PROC_TIMEOUT  # the job's shell exits just after it touched `done`
    while any(_running(p) for p, _ in json.loads((state / "untrusted-watch.json").read_text(
            encoding="utf-8")).get("pids", [])):
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.02)
    assert RULE in (ws / "HEARTBEAT.md").read_text(encoding="utf-8")
    model = ScriptedModel(["HEARTBEAT_OK", "ok"])
    rt.model = model  # type: ignore[assignment]
    beat = rt.run_turn(MAIN, HEARTBEAT_PROMPT, heartbeat=True)
    assert RULE not in model.requests[0].system and "- water the plants" in model.requests[0].system
    assert any("HEARTBEAT.md was changed outside any conversation" in w for w in beat.warnings), beat.warnings
    # the job is gone and has been looked after: the watch is over, and the owner's own edit is theirs
    with open(ws / "HEARTBEAT.md", "a", encoding="utf-8") as f:
        f.write("- call the plumber about the boiler\n")
    rt.run_turn(MAIN, "hi")
    assert "- call the plumber about the boiler" in (ws / "HEARTBEAT.md").read_text(encoding="utf-8")
