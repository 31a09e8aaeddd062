"""A turn's hold of its room is by the folder's (dev, inode): that number is not given to the next room meanwhile (t13).

`Room.for_turn` (session 22, t8) records the (st_dev, st_ino) of the folder a turn began with and refuses once the
folder under the room's name is another. A retire moves the folder (`rooms/retired/…`), keeping its inode; but once the
retired folder is deleted (the owner clearing `rooms/retired/`) its inode is free, and ext4 hands a just-freed inode to
the next mkdir in the same folder once the lower free ones are taken (200 of 200 times right after the delete here). The room made for the job's new audience then had the old
one's number, and a run in flight of the old aim wrote into it as if it were its own room. Now the hold keeps the
folder open for as long as the turn's room is held, so its inode cannot be freed, hence not reused. (Whether ext4 hands
the number out again depends on what else frees and takes inodes meanwhile — on a busy machine another process may take
it first — so the test also checks, deterministically, that the deleted folder is still held open.)

Real files on the test's file system, a real AgentRuntime's tools, the real retire; as root and as uid 65534.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from agenthelpers import load
from conftest import write
from hermit.messages import ToolCallPart
from hermit.scheduler.reaim import RETIRED_ROOMS, retire_job_audience
from hermit.sessions.keys import cron_session_key
from hermit.testing import FakeProvider
from hermit.tools.rooms import room_audience, room_slug
from prochelpers import PROC_TIMEOUT, python_as
from test_sandbox_attacks import runtime

JOB = "locker-job"
KEY = cron_session_key(JOB, "main")
SECRET = "locker code 4821"


def _scenario(home: Path) -> dict[str, object]:
    fake = FakeProvider()
    rt = runtime(home, fake)
    rooms = home / "agents" / "main" / "rooms"
    room = rooms / room_slug(room_audience(KEY))
    stale = rt.tools_for(KEY)  # the run in flight's turn (its room held from its start)
    first = stale.run(ToolCallPart("c", "write", {"path": "a.txt", "content": "old aim\n"})).result
    held = (os.stat(room).st_dev, os.stat(room).st_ino)
    retire_job_audience(load(home, "openai", fake), "main", JOB, datetime.now(UTC))  # the job is re-aimed
    shutil.rmtree(rooms / RETIRED_ROOMS)  # the owner clears what was retired
    # Deterministic whatever else runs on the file system: the deleted folder's inode is still in use (held open).
    held_open = any(_inode_of(f"/proc/self/fd/{fd}") == held for fd in os.listdir("/proc/self/fd"))
    # The next room of the name is made once other files took the lower free inodes (kept aside here): the old
    # room's number comes up again while it is free.
    aside = rooms / "aside"
    aside.mkdir()
    tries = 0
    while tries < 500:
        tries += 1
        os.mkdir(room, 0o700)
        if _inode_of(str(room)) == held:
            break
        os.rename(room, aside / str(tries))
    if not room.exists():
        os.mkdir(room, 0o700)
    shutil.rmtree(aside)
    fresh = rt.tools_for(KEY)  # the job's next run: its new audience's room
    second = fresh.run(ToolCallPart("c", "write", {"path": "new.txt", "content": "hello\n"})).result
    late = stale.run(ToolCallPart("c", "write", {"path": "late.txt", "content": f"{SECRET}\n"})).result
    files = {p.name: p.read_text() for p in room.iterdir()}
    return {"first": [first.content, first.is_error], "second": [second.content, second.is_error],
            "late": [late.content, late.is_error], "files": files, "same_inode": _inode_of(str(room)) == held,
            "tries": tries, "held_open": held_open}


def _inode_of(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _check(out: dict[str, object]) -> None:
    print(json.dumps(out, indent=1))
    assert out["first"][1] is False and out["second"][1] is False, out  # type: ignore[index]
    assert out["files"] == {"new.txt": "hello\n"}, out["files"]
    late = out["late"]
    assert isinstance(late, list) and late[1] and "moved away" in late[0], late
    assert out["held_open"], "the turn keeps its room's folder open: its inode is not free"
    assert not out["same_inode"], "the held folder's inode stayed in use: the new room got another"


def test_a_freed_inode_is_not_the_held_room_again() -> None:
    base = Path(tempfile.mkdtemp(prefix="hermit-t13-inode-", dir="/tmp"))
    try:
        home = base / "state"
        write(home / "workspace" / "memory" / "2026-01-20.md", "# 2026-01-20\n- shared note\n")
        _check(_scenario(home))
    finally:
        shutil.rmtree(base, ignore_errors=True)


CHILD = """
import json, sys
from pathlib import Path
from test_s22_reaudit_rooms_inode import _scenario
print(json.dumps(_scenario(Path(sys.argv[1]))))
"""


def test_a_freed_inode_is_not_the_held_room_again_as_uid_65534() -> None:
    base = Path(tempfile.mkdtemp(prefix="hermit-t13-inode-", dir="/tmp"))
    try:
        home = base / "state"
        write(home / "workspace" / "memory" / "2026-01-20.md", "# 2026-01-20\n- shared note\n")
        subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
        as_user = {"user": 65534, "group": 65534, "extra_groups": []}
        python = python_as(as_user)
        assert python is not None, "a Python that can import this checkout as uid 65534"
        path = os.pathsep.join([str(Path(__file__).parent), *sys.path])
        proc = subprocess.run([python, "-c", CHILD, str(home)], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": "/tmp"},
                              **as_user)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        _check(json.loads(proc.stdout.strip().splitlines()[-1]))
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
