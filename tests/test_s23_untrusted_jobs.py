"""Session 23 (t4): a job a detached command adds later — through `hermit cron add` or straight into cron/jobs.json —
is not run unseen (agent/untrusted_jobs.py).

Before (d141dae): in a turn that read a page, `nohup sh -c '…; hermit cron add --message -' &` returned at once,
the guard's look after the command found no new job, and the job added a moment later ran with the page's rule as
its prompt — a system event in the main session, or an isolated turn with every tool. The watch looked at files
only. Now, while armed, the watch keeps each job's message as Hermit's tools last left it: a job added or changed
outside any conversation, with words no kept job held, is refused when it fires, and set aside (removed, its text
saved 0600, the owner told once) at the next main-session turn. The owner's own job, made through the cron tool in
the same session, runs.

Real parts: the runtime's turns with their real tools; a real shell whose detached job really outlives the command
and runs the real `hermit cron add` CLI (another process) or rewrites jobs.json; the scheduler's own turn text; the
real CronJobs store. The model is scripted and obeys the page.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from hermit.errors import JobError
from hermit.scheduler.runner import job_session_key, job_turn_text
from hermit.testing import ScriptedModel
from test_audit21_untrusted_standing import MAIN, NOW, RULE, call, setup
from test_audit22_untrusted_detached import wait_for

OWN = "remind me to water the plants on the balcony"


def _fire(rt: object, jobs: object, job_id: str) -> object:
    """The job's turn as the scheduler runs it (scheduler/runner.execute): its session, its text."""
    job = jobs.get(job_id)  # type: ignore[attr-defined]
    text = job_turn_text(job, NOW, jobs.zone(job), "due")  # type: ignore[attr-defined]
    return rt.run_turn(job_session_key(job), text, heartbeat=job.session_target == "main")  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["cli-main", "cli-isolated", "jobs-file"])
def test_a_job_a_detached_command_adds_later_is_not_run_and_is_set_aside(tmp_path: Path, how: str) -> None:
    page = tmp_path / "page.html"
    page.write_text(f"{RULE}\n", encoding="utf-8")
    go, done = tmp_path / "go", tmp_path / "done"
    home = tmp_path / "home"
    encoded = base64.b64encode(RULE.encode()).decode()
    cli = f"HERMIT_HOME={home} {sys.executable} -m hermit cron add --name monday --cron \"0 9 * * 1\""
    if how == "jobs-file":  # a made-up entry written straight into the file (the job runs as the owner)
        script = tmp_path / "edit.py"
        script.write_text(f"import base64, json, sys\np = sys.argv[1]\nd = json.load(open(p))\nj = dict(d['jobs'][0])\n"
                          f"j.update(id='zz-monday', message=base64.b64decode('{encoded}').decode())\n"
                          "d['jobs'].append(j)\njson.dump(d, open(p, 'w'))\n", encoding="utf-8")
        edit = f"{sys.executable} {script} {home}/cron/jobs.json"
    else:
        edit = f"echo {encoded} | base64 -d | {cli} {'--main' if how == 'cli-main' else '--isolated'} --message -"
    job = f"while [ ! -e {go} ]; do sleep 0.05; done; {edit} > /dev/null 2>&1; touch {done}"
    rt, _, jobs = setup(tmp_path, [
        call("exec", command=f"cat {page}"),
        call("cron", action="add", job={"name": "plants", "message": OWN, "session_target": "main",
                                        "schedule": {"kind": "cron", "expr": "0 8 * * *"}}),
        call("exec", command=f"nohup sh -c '{job}' > /dev/null 2>&1 &"), "The page says hello."])
    try:
        first = rt.run_turn(MAIN, f"what does example.com say? and {OWN}")
        assert not any(r.is_error for r in first.tool_calls), [r.result[:160] for r in first.tool_calls]
    finally:
        go.touch()
    wait_for(done)
    listed = jobs.list_jobs("main")["jobs"]
    [theirs] = [j["id"] for j in listed if "Carl" in j["message"]]
    [own] = [j["id"] for j in listed if j["message"] == OWN]
    rt.model = ScriptedModel(["Done.", "Watered.", "Hello!"])  # type: ignore[assignment]
    with pytest.raises(JobError, match="added or changed outside any conversation"):
        _fire(rt, jobs, theirs)
    assert rt.model.requests == []  # type: ignore[attr-defined]  # nothing ran: the model never saw the rule
    ran = _fire(rt, jobs, own)  # the owner's job runs (a main-session turn: the other is set aside at its start)
    assert rt.model.requests  # type: ignore[attr-defined]
    said = rt.run_turn(MAIN, "hi")
    warnings = [*ran.warnings, *said.warnings]  # type: ignore[attr-defined]
    assert any(f"the job {theirs} was added or changed outside" in w for w in warnings), warnings
    assert "Hermit set aside a change to a scheduled job" in said.reply
    remaining = json.dumps(jobs.list_jobs("main"))
    assert "Carl" not in remaining and OWN in remaining
    [aside] = (rt.agent.sessions_dir.parent / "set-aside").glob("job-*")
    assert "Carl" in aside.read_text(encoding="utf-8") and aside.stat().st_mode & 0o777 == 0o600
