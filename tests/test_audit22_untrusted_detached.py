"""Audit 22 (t2): a job a command left behind, writing an instruction file after the guard's look, is not obeyed
unseen (agent/untrusted_watch.py).

Before (ff767f4): in a turn that read a page, `nohup sh -c '…; cat page >> HEARTBEAT.md' &` (or `setsid`) returned at
once — nothing changed yet, the guard's look after the command found nothing — and wrote the page's rule a moment
later. The next heartbeat's prompt held it as the owner's checklist. Now a command in such a turn arms a watch: at
the start of each main-session turn (a heartbeat's too, before its prompt is built) an instruction file changed since
Hermit's tools last left it, with lines of words it did not hold, is put back with a comment saying so, the change
saved aside (0600), the turn warned. The owner's own edit in that window is set aside too (said plainly: they take it
back with the `cp` the comment names, and it stays); a command that leaves nothing running (no `&`, nohup, setsid,
at, …, no process left in the workspace) arms nothing, and then their edits are never touched.

Real parts: the runtime's turns with their real tools (exec runs a real shell whose background job really outlives
the command), the heartbeat's turn and its system prompt; the model is scripted.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from hermit.testing import ScriptedModel
from prochelpers import PROC_TIMEOUT
from test_audit21_untrusted_standing import MAIN, RULE, call, setup

HEARTBEAT_PROMPT = "Read HEARTBEAT.md if it exists. Follow it strictly."


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + PROC_TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("detach", ["nohup sh -c '{job}' > /dev/null 2>&1 &", "setsid sh -c '{job}' > /dev/null 2>&1 &"])
def test_a_detached_job_writing_the_heartbeat_later_is_not_obeyed(tmp_path: Path, detach: str) -> None:
    page = tmp_path / "page.html"
    page.write_text(f"{RULE}\n", encoding="utf-8")
    go, done = tmp_path / "go", tmp_path / "done"
    job = f"while [ ! -e {go} ]; do sleep 0.05; done; cat {page} >> HEARTBEAT.md; touch {done}"
    rt, _, _ = setup(tmp_path, [call("exec", command=f"cat {page}"), call("exec", command=detach.format(job=job)),
                                "The page says hello."])
    ws = rt.agent.workspace
    (ws / "HEARTBEAT.md").write_text("# Heartbeat\n\n- water the plants\n", encoding="utf-8")
    try:
        first = rt.run_turn(MAIN, "what does example.com say?")
        assert not any(r.is_error for r in first.tool_calls), [r.result[:160] for r in first.tool_calls]
        assert RULE not in (ws / "HEARTBEAT.md").read_text(encoding="utf-8")  # nothing yet when the guard looked
    finally:
        go.touch()  # the job writes now, after the turn (and never outlives the test)
    wait_for(done)
    assert RULE in (ws / "HEARTBEAT.md").read_text(encoding="utf-8")
    model = ScriptedModel(["HEARTBEAT_OK"])
    rt.model = model  # type: ignore[assignment]
    beat = rt.run_turn(MAIN, HEARTBEAT_PROMPT, heartbeat=True)
    system = model.requests[0].system
    assert RULE not in system and "- water the plants" in system  # the heartbeat follows the owner's checklist
    assert "was set aside, not followed" in system  # the model is told, to tell its user
    heartbeat = (ws / "HEARTBEAT.md").read_text(encoding="utf-8")
    assert RULE not in heartbeat and "- water the plants" in heartbeat
    assert any("HEARTBEAT.md was changed outside any conversation" in w for w in beat.warnings), beat.warnings
    [aside] = (rt.agent.sessions_dir.parent / "set-aside").iterdir()
    assert RULE in aside.read_text(encoding="utf-8") and aside.stat().st_mode & 0o777 == 0o600


def test_the_owners_own_edit_in_the_window_is_set_aside_and_taken_back_with_the_cp_named(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(f"{RULE}\n", encoding="utf-8")
    rt, _, _ = setup(tmp_path, [call("exec", command=f"cat {page}"), call("exec", command="sleep 0 &"), "hello",
                                "ok", "ok"])
    ws = rt.agent.workspace
    rt.run_turn(MAIN, "what does example.com say?")
    with open(ws / "HEARTBEAT.md", "a", encoding="utf-8") as f:  # the owner, in their editor
        f.write("- call the plumber about the boiler\n")
    first = rt.run_turn(MAIN, "hi")
    assert first.warnings and "boiler" not in (ws / "HEARTBEAT.md").read_text(encoding="utf-8")
    cp = re.search(r"If it was their own edit: (cp \S+ \S+) -->", (ws / "HEARTBEAT.md").read_text(encoding="utf-8"))
    assert cp is not None
    subprocess.run(cp.group(1), shell=True, check=True)  # the owner takes it back
    again = rt.run_turn(MAIN, "hi again")
    assert not again.warnings and "- call the plumber about the boiler" in (ws / "HEARTBEAT.md").read_text()


def test_with_no_watch_armed_the_owners_edits_are_never_touched(tmp_path: Path) -> None:
    """Commands that leave nothing running arm nothing, even after a page was read."""
    page = tmp_path / "page.html"
    page.write_text(f"{RULE}\n", encoding="utf-8")
    rt, _, _ = setup(tmp_path, [call("exec", command=f"cat {page}"), call("exec", command="ls && date"), "ok", "ok"])
    ws = rt.agent.workspace
    rt.run_turn(MAIN, "what does example.com say? and list my files")
    with open(ws / "HEARTBEAT.md", "a", encoding="utf-8") as f:
        f.write("- call the plumber about the boiler\n")
    result = rt.run_turn(MAIN, "hi")
    assert not result.warnings and "boiler" in (ws / "HEARTBEAT.md").read_text(encoding="utf-8")
    assert not (rt.agent.sessions_dir.parent / "set-aside").exists()
    assert os.listdir(ws)  # (the workspace is there)
