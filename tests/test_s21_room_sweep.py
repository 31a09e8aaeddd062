"""What a killed Hermit left half-merged in a room is whole before anything looks (s21, t8; closing20 "Left → Rooms").

A merge stopped part-way (room_journal.py) used to be finished only by its room's next use: until then the owner's
own tools (a command on the host, `hermit backup`'s archive) saw the room half-merged, a file tool that finished it
said nothing to the chat, and a room moved away (a re-aimed job's, retired) left its plan to be carried into the next
room of its name — another audience's. Now a gateway finishes every room's left merge when it starts, `hermit backup`
before it reads the state dir, whoever moves a room before moving it, and the chat's next tool result that uses the
room (exec or file tool) says what was finished, once.

Each case really kills a child Hermit (SIGKILL) part-way through a merge, as in tests/test_s20_room_journal.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gatewayhelpers import GatewayProcess, write_config
from hermit.memory.policy.audience import Reader
from hermit.tools import ExecTool, FileTools, PathResolver, RoomSandbox, RoomView, ToolRunner
from hermit.tools.os_sandbox import SandboxLimits
from hermit.tools.room_sandbox import sandbox_uid
from hermit.tools.rooms import Room, room_slug
from hermit.tools.views import AudienceMemoryView
from prochelpers import PROC_TIMEOUT, python_as
from test_s20_room_journal import snapshot
from test_sandbox_attacks import need_sandbox, run

GROUP = "telegram:group:5"
FINISHED = "that was finished now, all of it"

# $1 the agent's folder (its rooms/ in it), $2 the import path, $3 the room's audience, $4 where to stop ("none" or
# "step:N"). Prints the room before the second command, then after it (when not killed).
KILLED = r'''
import json, os, signal, sys
from pathlib import Path
sys.path[:0] = sys.argv[2].split(os.pathsep)
import hermit.tools.room_merge as room_merge
from test_s21_room_sweep import room_tools
from test_s20_room_journal import snapshot
from test_sandbox_attacks import run
runner, view = room_tools(Path(sys.argv[1]), sys.argv[3])
out = run(runner, "exec", command="mkdir d; for i in $(seq 30); do echo old$i > d/$i; done; echo made", timeout=60)[0]
assert "made" in out, out
print(json.dumps(snapshot(view.room.path)), flush=True)
if sys.argv[4].startswith("step:"):
    at = int(sys.argv[4].split(":")[1])
    room_merge.STEP_HOOK[0] = lambda i: os.kill(os.getpid(), signal.SIGKILL) if i == at else None
out = run(runner, "exec", command="for i in $(seq 30); do echo new$i > d/$i; done; echo secret-7781 > kept.txt",
          timeout=60)[0]
print(json.dumps(snapshot(view.room.path)), flush=True)
'''


def room_tools(agent_dir: Path, audience: str = GROUP) -> tuple[ToolRunner, RoomView]:
    """exec and the file tools of a chat whose room is `audience`'s, in `agent_dir`/rooms (as an agent's)."""
    ws = agent_dir / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    view = RoomView(ws, Room(agent_dir / "rooms", audience, 8 << 20), AudienceMemoryView(ws, Reader(audience)))
    jail = RoomSandbox(need_sandbox(), view, SandboxLimits(max_processes=32, tmp_mb=4), agent_dir / "scratch",
                       sandbox_uid(65534))
    paths = PathResolver(ws, True)
    return ToolRunner([*ExecTool(paths, sandbox=jail).tools(), *FileTools(paths, view=view).tools()]), view


def _as(uid: int | None) -> dict[str, Any]:
    return {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}


def _env() -> dict[str, str]:
    tests = str(Path(__file__).parent)
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([tests, *sys.path]), "HOME": "/tmp"}


def killed(agent_dir: Path, audience: str = GROUP, where: str = "step:12",
           uid: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a command in `audience`'s room, then another whose merge is killed at `where` (SIGKILL, a real child
    Hermit). Returns (the room before the killed merge, the room as the kill left it)."""
    need_sandbox()
    python = python_as(_as(uid)) if uid is not None else sys.executable
    assert python is not None, "a Python that can import this checkout as uid 65534"
    env = _env()
    done = subprocess.run([python, "-c", KILLED, str(agent_dir), env["PYTHONPATH"], audience, where],
                          capture_output=True, text=True, timeout=PROC_TIMEOUT, env=env, **_as(uid))
    assert done.returncode == (-signal.SIGKILL if where != "none" else 0), (done.returncode, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    room = agent_dir / "rooms" / room_slug(audience)
    left = snapshot(room)
    if where != "none":
        assert (agent_dir / "rooms" / f".{room.name}.carry" / "journal").exists()  # committed, not finished
    return json.loads(lines[0]), left if where != "none" else json.loads(lines[1])


@pytest.fixture(scope="module")
def new_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The room after both commands, not killed."""
    _, new = killed(tmp_path_factory.mktemp("reference") / "agents" / "main", where="none")
    assert new["d/1"] == ["f", "new1\n", "0o644"] and new["kept.txt"][1] == "secret-7781\n"
    return new


def _told(room: Path) -> list[str]:
    told = room.parent / f".{room.name}.told"
    return told.read_text().splitlines() if told.exists() else []


def test_a_gateway_finishes_a_room_a_killed_hermit_left_before_it_serves(tmp_path: Path,
                                                                        new_set: dict[str, Any]) -> None:
    """Before: the carry folder stayed, and the room half-merged, until that chat's next use of it."""
    home = tmp_path / "home"
    agent_dir = home / "agents" / "main"
    before, left = killed(agent_dir)
    assert left["d/1"][1] == "new1\n" and left["d/30"][1] == "old30\n"  # half-merged
    room = agent_dir / "rooms" / room_slug(GROUP)
    write_config(home, "http://127.0.0.1:9/v1")
    gw = GatewayProcess(home)
    try:
        gw.wait_ready()
        # Ready means served: the room is whole by then, before any turn or owner's tool could look.
        assert snapshot(room) == new_set
        assert not [p.name for p in room.parent.iterdir() if p.name.endswith(".carry") or p.name.startswith(".inc")]
        [note] = _told(room)
        assert FINISHED in note and "kept.txt" in note and "d/1" in note
    finally:
        gw.stop()


@pytest.mark.parametrize("first", ["read", "read-missing", "write"])
def test_a_file_tool_that_finishes_a_killed_merge_tells_the_chat_once(tmp_path: Path, new_set: dict[str, Any],
                                                                    first: str) -> None:
    """Before: a file tool finished the merge and said nothing; the note waited for an exec (or never came)."""
    agent_dir = tmp_path / "agents" / "main"
    killed(agent_dir)
    runner, view = room_tools(agent_dir)
    if first == "read":
        out, err = run(runner, "read", path="d/1")
        assert not err and out.startswith("new1")
    elif first == "read-missing":
        out, err = run(runner, "read", path="nothing-here.txt")
        assert err and "file not found" in out
    else:
        out, err = run(runner, "write", path="w.txt", content="w")
        assert not err and out.startswith("created w.txt")
    assert out.count(FINISHED) == 1 and "kept.txt" in out, out
    assert snapshot(view.room.path) == {**new_set, **({"w.txt": ["f", "w", "0o600"]} if first == "write" else {})}
    again, err = run(runner, "read", path="kept.txt")  # said once: neither the next file tool nor exec repeats it
    assert not err and FINISHED not in again and again.startswith("secret-7781")
    out, err = run(runner, "exec", command="echo ran", timeout=60)
    assert not err and "ran" in out and FINISHED not in out


def test_backup_as_an_ordinary_user_archives_the_room_whole(tmp_path: Path, new_set: dict[str, Any]) -> None:
    """`hermit backup` (here Hermit as uid 65534) finishes a room's left merge before it reads the state dir. Before:
    the archive held the room half-merged (and the carry folder)."""
    uid = 65534 if os.geteuid() == 0 else None
    home = Path(tempfile.mkdtemp(prefix="hermit-s21-sweep-", dir="/tmp"))
    try:
        os.chmod(home, 0o700)
        write_config(home, "http://127.0.0.1:9/v1")
        agent_dir = home / "agents" / "main"
        agent_dir.mkdir(parents=True)
        out_dir = home.parent / f"{home.name}-out"
        out_dir.mkdir(mode=0o700)
        if uid is not None:
            for p in (home, home / "hermit.yaml", home / "agents", agent_dir, out_dir):
                os.chown(p, uid, uid)
        killed(agent_dir, uid=uid)
        python = python_as(_as(uid)) if uid is not None else sys.executable
        assert python is not None
        archive = out_dir / "b.tar.gz"
        done = subprocess.run([python, "-m", "hermit.cli.main", "--home", str(home), "backup", str(archive)],
                              capture_output=True, text=True, timeout=PROC_TIMEOUT, env=_env(), **_as(uid))
        assert done.returncode == 0, done.stderr[-2000:]
        slug = room_slug(GROUP)
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            kept = {n.split(f"rooms/{slug}/", 1)[1]: tar.extractfile(n).read().decode()  # type: ignore[union-attr]
                    for n in names if f"rooms/{slug}/" in n and tar.getmember(n).isfile()}
        assert not [n for n in names if ".carry" in n or ".incoming-" in n]
        assert kept == {k: v[1] for k, v in new_set.items() if v[0] == "f"}
        assert snapshot(agent_dir / "rooms" / slug) == new_set
    finally:
        subprocess.run(["rm", "-rf", str(home), f"{home}-out"], check=False)


def test_a_retired_rooms_left_merge_never_reaches_the_next_room_of_its_name(tmp_path: Path) -> None:
    """A re-aimed job's room is retired (scheduler/reaim.py) while a killed merge of it waits. Before: its next run —
    whose replies go to the new audience — got a new room under the same name, and its first use carried the old
    room's plan into it (the old audience's kept.txt) and told it the old room's file names."""
    from hermit.scheduler.reaim import retire_job_audience
    from hermit.sessions.keys import cron_session_key
    from hermit.tools.rooms import room_audience
    from schedhelpers import config

    home = tmp_path / "home"
    loaded = config(home)
    agent_dir = loaded.agent().sessions_dir.parent
    audience = room_audience(cron_session_key("locker"))
    killed(agent_dir, audience, "step:0")  # written down, nothing carried out yet
    retired = retire_job_audience(loaded, loaded.agent().id, "locker", datetime(2026, 6, 1, tzinfo=UTC))
    assert any("rooms/retired/" in r for r in retired), retired
    runner, view = room_tools(agent_dir, audience)  # the job's next run: a fresh room
    out, err = run(runner, "exec", command="ls -A; echo listed", timeout=60)
    assert not err and "listed" in out and "kept.txt" not in out and FINISHED not in out and "d" not in out.split()
    out, err = run(runner, "read", path="kept.txt")
    assert err and "7781" not in out
    assert snapshot(view.room.path) == {}
    [old] = (agent_dir / "rooms" / "retired").iterdir()
    assert snapshot(old)["kept.txt"] == ["f", "secret-7781\n", "0o644"]  # the retired room moved whole
    assert not [p for p in (agent_dir / "rooms").iterdir() if p.name.endswith((".carry", ".told"))]


def test_a_room_moved_away_by_hand_never_gets_another_rooms_plan(tmp_path: Path) -> None:
    """However a room leaves its name (the owner's `mv`, a tool that does not finish it first), a plan left for it is
    carried out only into that room (its inode): the room made next under the name gets none of it, and no note."""
    agent_dir = tmp_path / "agents" / "main"
    killed(agent_dir, where="step:0")
    room = agent_dir / "rooms" / room_slug(GROUP)
    os.rename(room, tmp_path / "moved-by-hand")
    runner, view = room_tools(agent_dir)
    out, err = run(runner, "write", path="fresh.txt", content="f")
    assert not err and FINISHED not in out, out
    assert snapshot(view.room.path) == {"fresh.txt": ["f", "f", "0o600"]}
    assert not view.room.pending() and _told(view.room.path) == []


def test_an_owners_cli_run_finishes_a_room_a_killed_gateway_left(tmp_path: Path, new_set: dict[str, Any]) -> None:
    """The gateway killed mid-merge and not started again: the owner's `hermit agent` (its exec runs on the host and
    could read the rooms folder) finds every room whole. Before: half-merged until that chat's next use."""
    from hermit.testing import FakeProvider

    home = tmp_path / "home"
    agent_dir = home / "agents" / "main"
    _, left = killed(agent_dir)
    assert left != new_set
    room = agent_dir / "rooms" / room_slug(GROUP)
    with FakeProvider(["hello"]) as fake:
        write_config(home, fake.openai_base_url)
        (home / "workspace").mkdir()
        done = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "agent", "-m", "hi"],
                              capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert done.returncode == 0 and "hello" in done.stdout, done.stderr[-2000:]
    assert snapshot(room) == new_set
    assert not room.parent.joinpath(f".{room.name}.carry").exists()
    [note] = _told(room)  # for that chat's next tool result, not the owner's
    assert FINISHED in note and FINISHED not in done.stdout


def test_the_sweep_leaves_a_room_another_live_hermit_holds_to_that_one(tmp_path: Path, new_set: dict[str, Any]) -> None:
    """A carry folder whose room's lock is held belongs to a merge running now (another process's): the sweep (a gateway
    starting, `hermit backup`) never carries it out beside it; once the lock is free it does, and says so once."""
    from hermit.locks import locked
    from hermit.tools.room_sweep import finish_left

    agent_dir = tmp_path / "agents" / "main"
    _, left = killed(agent_dir)
    rooms = agent_dir / "rooms"
    room = rooms / room_slug(GROUP)
    with locked(rooms / f".{room.name}.lock"):  # as a live merge holds it (flock: another descriptor waits)
        assert finish_left(rooms) == []
        assert snapshot(room) == left and (rooms / f".{room.name}.carry").exists()
    assert finish_left(rooms) == [room.name]
    assert snapshot(room) == new_set and _told(room) and finish_left(rooms) == []


def test_a_room_moved_to_another_name_moves_whole_with_what_its_chat_is_to_hear(tmp_path: Path,
                                                                               new_set: dict[str, Any]) -> None:
    """Whoever renames a room (a Slack migration: the same people under a new key) finishes it first, under its lock,
    and its chat's note goes with it: the room under its new name is whole and says what was finished, once."""
    from hermit.locks import locked
    from hermit.tools.room_journal import finish_held

    agent_dir = tmp_path / "agents" / "main"
    killed(agent_dir)
    rooms = agent_dir / "rooms"
    new_audience = "slack:T1:channel:C9"
    src, dst = room_slug(GROUP), room_slug(new_audience)
    with locked(rooms / f".{src}.lock"):
        assert finish_held(rooms, src, moving_to=dst)
        os.rename(rooms / src, rooms / dst)
    assert not [p for p in rooms.iterdir() if p.name.startswith(f".{src}.") and not p.name.endswith(".lock")]
    runner, view = room_tools(agent_dir, new_audience)
    out, err = run(runner, "read", path="kept.txt")
    assert not err and out.count(FINISHED) == 1 and snapshot(view.room.path) == new_set, out
    assert FINISHED not in run(runner, "read", path="kept.txt")[0]


def test_a_rooms_folder_that_cannot_be_read_never_stops_a_start(tmp_path: Path) -> None:
    """The sweep runs before the gateway serves: a rooms folder it cannot list (here mode 000, Hermit as uid 65534, for
    whom the mode counts) is logged and left to each room's next use, never raised."""
    uid = 65534 if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="hermit-s21-unreadable-", dir="/tmp"))
    try:
        rooms = base / "rooms"
        rooms.mkdir(mode=0o700)
        if uid is not None:
            os.chown(base, uid, uid)
            os.chown(rooms, uid, uid)
        rooms.chmod(0)
        python = python_as(_as(uid)) if uid is not None else sys.executable
        assert python is not None
        script = ("import sys; from pathlib import Path; from hermit.tools.room_sweep import finish_left; "
                  "print(finish_left(Path(sys.argv[1])))")
        done = subprocess.run([python, "-c", script, str(rooms)], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, env=_env(), **_as(uid))
        assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]
        assert "could not be read" in done.stderr and "next use" in done.stderr
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
