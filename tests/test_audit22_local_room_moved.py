"""A room moved away while a turn uses it: nothing of that turn lands in the next room of its name (audit 22, t8).

A job re-aimed at another audience (`hermit cron edit --announce`, the web app) has its room moved aside to
`rooms/retired/` (scheduler/reaim.py), so that its next runs — whose replies now reach other people — start with
nothing its runs kept for the old audience ("note the locker code 4821"). Session 21 made a merge a killed Hermit left
go only into the room it was written for. A run in flight was not covered: its exec seeded its copy from the old room,
then merged what came back by the room's name — into a fresh, empty room made under that name for the new audience;
a `write` later in the same turn did the same, and a note it added to a daily log stayed under the job's audience
(the retire had made only the notes already there owner-only). Now a turn holds its room as it was when the turn
began: once that folder is moved away, the turn's file tools refuse, its exec keeps nothing and it adds no note; the
new room stays empty. A turn started after the move works in the new room as before.

Real bubblewrap, a real AgentRuntime's tools (as a turn gets them), the real retire; the command is a real process
in the sandbox, ended by the test once the room is retired (no sleeps). Run as root and as uid 65534.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agenthelpers import load
from conftest import write
from hermit.messages import ToolCallPart
from hermit.scheduler.reaim import RETIRED_ROOMS, retire_job_audience
from hermit.sessions.keys import cron_session_key
from hermit.testing import FakeProvider
from hermit.tools.rooms import room_audience, room_slug
from prochelpers import PROC_TIMEOUT, python_as
from test_sandbox_attacks import home as home  # noqa: F401 - the fixture
from test_sandbox_attacks import need_sandbox, runtime

JOB = "locker-job"
KEY = cron_session_key(JOB, "main")
SECRET = "locker code 4821"
MARK = "987.6543"  # the sandboxed `sleep`'s argument: how the test finds that process (and ends it)


def _run(runner: Any, name: str, **args: Any) -> tuple[str, bool]:
    res = runner.run(ToolCallPart("c", name, args)).result
    return res.content, res.is_error


def _room(home: Path) -> Path:
    return home / "agents" / "main" / "rooms" / room_slug(room_audience(KEY))


def _retire(home: Path, fake: FakeProvider) -> list[str]:
    return retire_job_audience(load(home, "openai", fake), "main", JOB, datetime.now(UTC))


def _files(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_text(errors="replace") for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _pids_of(needle: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline[:2] == [b"sleep", needle.encode()]:
            out.append(int(pid))
    return out


def test_a_write_after_the_room_was_retired_never_lands_in_the_next_room(home: Path) -> None:
    fake = FakeProvider()
    rt = runtime(home, fake)
    tools = rt.tools_for(KEY)  # the turn's tools
    text, err = _run(tools, "write", path="notes.txt", content="first note\n")
    assert not err, text
    assert _retire(home, fake), "the job's room was retired"
    text, err = _run(tools, "write", path="later.txt", content=f"{SECRET}\n")  # the same turn, after the move
    print("write after the move:", text)
    assert err and "moved away" in text, text
    assert SECRET not in json.dumps(_files(_room(home))), _files(_room(home))
    text, err = _run(tools, "read", path="notes.txt")
    assert err and "moved away" in text, text  # nor reads the new one as if it were its own
    assert not _room(home).exists(), "the turn made no new room under the old one's name"
    # A turn that starts after the move works in the new room, which holds nothing of the old one.
    fresh = rt.tools_for(KEY)
    text, err = _run(fresh, "write", path="new.txt", content="hello\n")
    assert not err, text
    assert _files(_room(home)) == {"new.txt": "hello\n"}
    retired = home / "agents" / "main" / "rooms" / RETIRED_ROOMS
    assert [p.name for p in retired.iterdir()][0].startswith(_room(home).name)
    assert _files(next(retired.iterdir())) == {"notes.txt": "first note\n"}


def test_a_note_a_run_in_flight_adds_after_the_retire_never_reaches_the_jobs_next_audience(home: Path) -> None:
    """The same for memory: the retire made the job's notes owner-only, then the run in flight (its turn begun before,
    its room never used) added a note under the job's audience, which the job's next run — aimed at a group now — read.
    Now a note added after the move is refused; one added before it is retired with the others."""
    fake = FakeProvider()
    rt = runtime(home, fake)
    daily = f"memory/{rt.today()}.md"
    tools = rt.tools_for(KEY)  # the run's turn starts; it has not touched its room
    text, err = _run(tools, "write", path=daily, content="- before the retire: alpha\n", append=True)
    assert not err, text
    assert _retire(home, fake)
    text, err = _run(tools, "write", path=daily, content=f"- {SECRET}\n", append=True)
    print("note after the move:", text)
    assert err and "moved away" in text, text
    seen, err = _run(rt.tools_for(KEY), "read", path=daily)  # the job's next run
    print(seen)
    assert SECRET not in seen and "alpha" not in seen, seen
    note = (home / "workspace" / daily).read_text()
    assert "alpha" in note and SECRET not in note


# $1 the state dir, $2 the import path. Starts a job's exec, retires the job's room while the command runs, ends the
# command, and prints what each room holds and what the exec said.
IN_FLIGHT = r'''
import json, os, signal, sys, threading, time
from pathlib import Path
sys.path[:0] = sys.argv[2].split(os.pathsep)
from hermit.testing import FakeProvider
from test_sandbox_attacks import runtime
import test_audit22_local_room_moved as t
home = Path(sys.argv[1])
fake = FakeProvider()
rt = runtime(home, fake)
tools = rt.tools_for(t.KEY)
out = {}
def go():
    out["exec"] = t._run(tools, "exec", command=f"echo '{t.SECRET}' > kept.txt; mkdir -p d; echo x > d/y; "
                                                f"sleep {t.MARK}; echo done", timeout=900)
runner = threading.Thread(target=go)
runner.start()
deadline = time.monotonic() + float(sys.argv[3])
while not t._pids_of(t.MARK) and time.monotonic() < deadline:
    time.sleep(0.02)
assert t._pids_of(t.MARK), "the command never started"
out["retired"] = t._retire(home, fake)
for pid in t._pids_of(t.MARK):
    os.kill(pid, signal.SIGKILL)
runner.join(float(sys.argv[3]))
assert not runner.is_alive(), "the exec never returned"
out["room"] = t._files(t._room(home))
retired = home / "agents" / "main" / "rooms" / "retired"
out["retired_rooms"] = {p.name: t._files(p) for p in retired.iterdir()} if retired.is_dir() else {}
print(json.dumps(out))
'''


def _in_flight(uid: int | None) -> dict[str, Any]:
    need_sandbox()
    base = Path(tempfile.mkdtemp(prefix="hermit-a22-moved-", dir="/tmp"))
    try:
        home = base / "state"
        write(home / "workspace" / "memory" / "2026-01-20.md", "# 2026-01-20\n- shared note\n")
        if uid is not None:
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)
        python = python_as(_as(uid)) if uid is not None else sys.executable
        assert python is not None, "a Python that can import this checkout as uid 65534"
        tests = str(Path(__file__).parent)
        path = os.pathsep.join([tests, *sys.path])
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": "/tmp"}
        proc = subprocess.run([python, "-c", IN_FLIGHT, str(home), path, str(PROC_TIMEOUT)], capture_output=True,
                              text=True, timeout=PROC_TIMEOUT * 3, env=env, **_as(uid))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(out, indent=1))
        return out
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _as(uid: int | None) -> dict[str, Any]:
    return {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}


def _check(out: dict[str, Any]) -> None:
    assert out["retired"], out
    text, _ = out["exec"]
    assert SECRET not in json.dumps(out["room"]), "the old audience's command wrote into the new audience's room"
    assert out["room"] == {}, out["room"]
    assert "not kept" in text and "moved away" in text, text


def test_an_exec_in_flight_when_the_room_is_retired_keeps_nothing_in_the_next_room() -> None:
    _check(_in_flight(None))


def test_an_exec_in_flight_when_the_room_is_retired_as_an_ordinary_user() -> None:
    _check(_in_flight(65534 if os.geteuid() == 0 else None))
