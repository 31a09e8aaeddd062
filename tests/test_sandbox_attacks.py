"""Issue 22 §3, attacked again: root inside bubblewrap, races on the file tools, planted instruction files,
a fork bomb and a disk fill — each played through the real runtime, the real sandbox and real processes.

CI runs as root, which is the case the attacks needed (root kept its capabilities inside bubblewrap);
`test_room_sandbox_as_an_unprivileged_user` runs the same probe as an ordinary uid.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agenthelpers import load, system_text, tool_results
from ciguard import need
from conftest import write
from hermit.agent.runtime import AgentRuntime
from hermit.memory.policy.audience import Reader
from hermit.messages import ToolCallPart
from hermit.models.registry import build_model
from hermit.sessions.keys import group_session_key, main_session_key
from hermit.testing import FakeProvider
from hermit.tools import ExecTool, FileTools, PathResolver, RoomSandbox, RoomView, ToolRunner
from hermit.tools.exec_cgroup import remove_stale_groups
from hermit.tools.os_sandbox import Backend, SandboxLimits, detect
from hermit.tools.room_sandbox import sandbox_uid
from hermit.tools.rooms import Room
from hermit.tools.views import AudienceMemoryView
from prochelpers import PROC_TIMEOUT, python_as

GROUP = group_session_key("main", "telegram", "-100300")
OTHER_GROUP = group_session_key("main", "telegram", "-100301")
MAIN = main_session_key("main")
CANARY = "MEMORY-CANARY-6612"


def need_sandbox() -> Backend:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    return backend


def calls(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "exec", "arguments": {"command": c}} for c in commands]}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "state"
    write(h / "workspace" / "MEMORY.md", f"# MEMORY.md\n- {CANARY}\n")
    write(h / "workspace" / "memory" / "2026-01-20.md", "# 2026-01-20\n- shared note\n")
    return h


def runtime(home: Path, fake: FakeProvider, *, defaults: dict[str, Any] | None = None) -> AgentRuntime:
    loaded = load(home, "openai", fake, defaults=defaults)
    agent = loaded.agent()
    model = build_model("fake/model-x", loaded.config.models, {}, sleep=lambda s: None)
    return AgentRuntime(agent, model, fsync=False, home=home.parent, exec_env={"PATH": "/usr/bin:/bin"})


def sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_root_keeps_no_power_inside_the_sandbox(home: Path) -> None:
    """As root, bubblewrap kept CapEff 000001fffeffffff: a group unmounted the blank over MEMORY.md, remounted
    /usr read-write and replaced /usr/bin/bwrap. Now every one of those fails, and the sandbox holds after."""
    backend = need_sandbox()
    bwrap = str(backend.program)
    before = sha(bwrap)
    attack = calls(
        "id -u; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status",
        "umount /usr; echo umount=$?; mount -o remount,rw /usr; echo remount=$?; mount -t tmpfs none /mnt; echo mnt=$?",
        f"cp /bin/sh {bwrap}; echo cp=$?; echo x > /usr/bin/hermit-planted; echo plant=$?",
        "unshare -r id; echo unshare=$?; cat /proc/1/root/etc/hostname; ls /root; cat MEMORY.md",
    )
    with FakeProvider([attack, "done", calls("grep CapEff /proc/self/status; cat MEMORY.md"), "done", "main"]) as fake:
        rt = runtime(home, fake)
        rt.run_turn(GROUP, "try it")
        rt.run_turn(GROUP, "again")
        rt.run_turn(MAIN, "hello")
    ident, mounts, replace, escape = (t for t, _ in tool_results(fake.requests[1]))
    assert "CapEff:\t0000000000000000" in ident and "CapBnd:\t0000000000000000" in ident
    uid_inside = int(ident.splitlines()[1])
    assert uid_inside != 0
    assert "umount=0" not in mounts and "remount=0" not in mounts and "mnt=0" not in mounts
    assert "cp=0" not in replace and "plant=0" not in replace
    assert sha(bwrap) == before and not Path("/usr/bin/hermit-planted").exists()
    assert "unshare=0" not in escape and CANARY not in escape
    assert "CapEff:\t0000000000000000" in tool_results(fake.requests[3])[-1][0]
    assert all(CANARY not in json.dumps(r.body) for r in fake.requests[:4])
    assert CANARY in system_text(fake.requests[4])  # the owner's main session still has MEMORY.md


def test_owner_confined_sandbox_drops_capabilities_too(home: Path) -> None:
    need_sandbox()
    # The owner's confined session has its command line checked for paths first: read /proc without naming it.
    probe = "python3 -c \"print(open(chr(47) + 'proc/self/status').read())\" | grep CapEff"
    with FakeProvider([calls(probe, "umount usr; echo umount=$?"), "ok"]) as fake:
        rt = runtime(home, fake, defaults={"sandbox": {"mode": "all"}})
        rt.run_turn(MAIN, "check")
    (caps, _), (umount, _) = tool_results(fake.requests[1])
    assert "CapEff:\t0000000000000000" in caps and "umount=0" not in umount


def test_owner_confined_sandbox_cannot_rewrite_memory_md(home: Path) -> None:
    """Under sandbox.mode: all, MEMORY.md is read-only to the owner's commands like memory/ and the instruction
    files: the write tool keeps its previous version in memory-history/, a command's rewrite would not."""
    need_sandbox()
    memory_md = home / "workspace" / "MEMORY.md"
    memory_md.write_text("# Memory\n\n- kept as it is\n")
    with FakeProvider([calls("echo overwritten > MEMORY.md; echo rc=$?", "cat MEMORY.md"), "ok"]) as fake:
        rt = runtime(home, fake, defaults={"sandbox": {"mode": "all"}})
        rt.run_turn(MAIN, "rewrite it")
    (write, _), (read, _) = tool_results(fake.requests[1])
    assert "rc=0" not in write and "Read-only file system" in write, write
    assert "kept as it is" in read and memory_md.read_text() == "# Memory\n\n- kept as it is\n"


def test_room_sandbox_as_an_unprivileged_user(tmp_path: Path) -> None:
    """The same probe with Hermit itself running as an ordinary uid (when the tests run as root, uid 65534
    runs it). Where that uid cannot import this checkout (it lives under root's 0700 home), the sandbox's
    own command line is run as that uid instead: the same flags and wrapper, without Hermit around it."""
    from test_sandbox_limits import DROP, HOGS, KEYRING_NR

    need_sandbox()
    uid = 65534 if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="hermit-unpriv-", dir="/tmp" if uid is not None else tmp_path))
    drop = DROP.format(add_key=KEYRING_NR.get(__import__("platform").machine(), (248, 250))[0])
    if uid is not None:
        os.chmod(base, 0o700)
        os.chown(base, uid, uid)
    probe = base / "probe.py"
    probe.write_text(UNPRIVILEGED_PROBE)
    as_user: dict[str, Any] = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    try:
        python = python_as(as_user)
        if python is not None:
            done = subprocess.run([python, str(probe), str(base), BOMB, drop, HOGS], capture_output=True, text=True,
                                  timeout=PROC_TIMEOUT,
                                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}, **as_user)
            assert done.returncode == 0, done.stderr[-2000:]
            out = json.loads(done.stdout.strip().splitlines()[-1])
            assert out["uid_outside"] != 0 and out["backend"] == "bwrap"
            assert out["room_file"] == "made by the command\n" and out["room_bytes"] <= (6 << 20)
            ident, tasks = out["ident"], int(out["tasks"])
            # Hermit as an ordinary uid makes no cgroup: the fallback still bounds the command's memory, and
            # the keyring is refused the same way.
            assert int(out["hogs"].split("rss_kb=")[-1].split()[0]) < (256 + 64) << 10, out["hogs"]
            assert "add_key -1 errno 1" in out["keys"] and "proc-keys refused" in out["keys"], out["keys"]
        else:
            ident, tasks = _bare_probe(base, as_user)
        assert "CapEff:\t0000000000000000" in ident and tasks <= 40
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _bare_probe(base: Path, as_user: dict[str, Any]) -> tuple[str, int]:
    from hermit.tools.os_sandbox import room_mode_args
    from hermit.tools.seccomp import filter_fd, filter_program

    fd = filter_fd(filter_program() or b"")
    argv = [*room_mode_args(str(need_sandbox().program), 1 << 20, fd), "--", "/bin/sh", "-c",
            f"grep CapEff /proc/self/status; {BOMB}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROC_TIMEOUT, cwd="/", **as_user,
                              pass_fds=(fd,), preexec_fn=lambda: __import__("resource").setrlimit(
                                  __import__("resource").RLIMIT_NPROC, (32, 32)))
    finally:
        os.close(fd)
    return done.stdout, int(done.stdout.split("tasks=")[-1].split()[0])


# A fork bomb, then the most tasks seen in the sandbox over 20,000 counts (about half a second), with shell builtins only: dash
# exits on a failed fork ("Cannot fork"), so nothing after the bomb may need one (not even `sleep`).
BOMB = ("bash -c ':(){ :|:& };:' 2>/dev/null; m=0; i=0; while [ $i -lt 20000 ]; do set -- /proc/[0-9]*; "
        "[ $# -gt $m ] && m=$#; i=$((i+1)); done; echo tasks=$m")
UNPRIVILEGED_PROBE = r'''
import json, os, sys
from pathlib import Path
from hermit.tools import ExecTool, PathResolver, RoomSandbox, RoomView
from hermit.tools.os_sandbox import SandboxLimits, detect
from hermit.tools.room_sandbox import sandbox_uid
from hermit.tools.rooms import Room
from hermit.memory.policy.audience import Reader
from hermit.tools.views import AudienceMemoryView
BOMB = sys.argv[2]
base = Path(sys.argv[1])
ws = base / "state" / "workspace"
(ws / "memory").mkdir(parents=True)
backend = detect()
view = RoomView(ws, Room(base / "state" / "rooms", "telegram:group:9", 4 << 20),
                AudienceMemoryView(ws, Reader("telegram:group:9")))
tool = ExecTool(PathResolver(ws, True), env={"PATH": "/usr/bin:/bin"},
                sandbox=RoomSandbox(backend, view, SandboxLimits(max_processes=24, memory_mb=256), base / "scratch",
                                    sandbox_uid(65534)))
ident = tool.exec("id -u; grep CapEff /proc/self/status; echo made by the command > kept.txt").text
tool.exec("head -c 50000000 /dev/zero > big; head -c 50000000 /dev/zero > big2")
bomb = tool.exec(BOMB, timeout=20).text
keys = tool.exec(sys.argv[3]).text
hogs = tool.exec(sys.argv[4], timeout=30).text
print(json.dumps({"uid_outside": os.getuid(), "backend": backend.name, "ident": ident,
                  "room_file": (view.room.path / "kept.txt").read_text(), "room_bytes": view.room.usage(),
                  "tasks": bomb.split("tasks=")[-1].split()[0], "keys": keys, "hogs": hogs}))
'''


def room_tools(tmp_path: Path, quota_mb: int = 8, processes: int = 32) -> tuple[ToolRunner, RoomView]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    view = RoomView(ws, Room(tmp_path / "rooms", "telegram:group:5", quota_mb << 20),
                    AudienceMemoryView(ws, Reader("telegram:group:5")))
    jail = RoomSandbox(need_sandbox(), view, SandboxLimits(max_processes=processes, tmp_mb=4), tmp_path / "scratch",
                       sandbox_uid(65534))
    paths = PathResolver(ws, True)
    return ToolRunner([*ExecTool(paths, sandbox=jail).tools(), *FileTools(paths, view=view).tools()]), view


def run(runner: ToolRunner, name: str, **args: Any) -> tuple[str, bool]:
    res = runner.run(ToolCallPart("c", name, args)).result
    return res.content, res.is_error


def test_fork_bomb_and_disk_fill_are_bounded(tmp_path: Path) -> None:
    runner, view = room_tools(tmp_path, quota_mb=8, processes=32)
    text, _ = run(runner, "exec", command=BOMB, timeout=20)
    assert int(text.split("tasks=")[-1].split()[0]) <= 40
    text, _ = run(runner, "exec", command="for i in $(seq 1 60); do head -c 4000000 /dev/zero > f$i || break; done; "
                                          "head -c 20000000 /dev/zero > /tmp/t; head -c 9000000 /dev/zero > /dev/shm/s; "
                                          "du -skx /tmp /dev/shm", timeout=60)
    assert "No space left on device" in text
    assert view.room.usage() <= (8 << 20) + (2 << 20)  # the quota, plus the tmpfs's small slack
    sizes = {line.split()[1]: int(line.split()[0]) for line in text.splitlines() if line.endswith(("/tmp", "/dev/shm"))}
    assert sizes["/tmp"] <= 4 * 1024 + 4 and sizes["/dev/shm"] <= 1024 + 4
    # The room keeps what fitted; the file tools refuse to grow it past its quota.
    text, err = run(runner, "write", path="more.txt", content="x" * 3_000_000)
    assert err and "quota" in text


def test_file_tools_are_race_free_against_a_swapping_attacker(tmp_path: Path) -> None:
    """Something that shares the room's folder swaps a directory with a symlink to the owner's files
    (renameat2 RENAME_EXCHANGE) and a file with a symlink to a canary, for seconds, while read and write
    run in a loop: no read returns the canary, no write lands outside."""
    runner, view = room_tools(tmp_path)
    outside = tmp_path / "owner"
    write(outside / "secret.md", f"{CANARY}\n")
    with view.room.fd():
        pass
    room = view.room.path
    write(room / "d" / "note.md", "mine\n")
    os.symlink(outside, room / "d-link")
    write(room / "f.md", "plain\n")
    os.symlink(outside / "secret.md", room / "f-link")
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()
    swaps = [0]

    def exchange(a: Path, b: Path) -> None:
        libc.renameat2(-100, bytes(a), -100, bytes(b), 2)  # AT_FDCWD, RENAME_EXCHANGE

    def attacker() -> None:
        while not stop.is_set():
            exchange(room / "d", room / "d-link")
            exchange(room / "f.md", room / "f-link")
            swaps[0] += 1

    t = threading.Thread(target=attacker, daemon=True)
    t.start()
    reads = writes = 0
    # Three seconds of attack, and then as long as it takes for enough swaps to interleave with enough reads
    # and writes: a loaded machine makes the test slower, never weaker.
    attack_until, deadline = time.monotonic() + 3.0, time.monotonic() + PROC_TIMEOUT
    try:
        while time.monotonic() < attack_until or not (swaps[0] > 100 and reads > 50 and writes > 20):
            assert time.monotonic() < deadline, (swaps, reads, writes)
            for path in ("d/note.md", "f.md"):
                text, err = run(runner, "read", path=path)
                assert CANARY not in text
                reads += 1
            run(runner, "write", path="d/planted.md", content="from the tool\n")
            writes += 1
    finally:
        stop.set()
        t.join(5)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]  # nothing written through the link


def test_planted_instruction_files_never_reach_the_owner_during_or_after_a_killed_exec(home: Path,
                                                                                      tmp_path: Path) -> None:
    """A group's exec creates BOOTSTRAP.md and rewrites AGENTS.md, then sleeps; meanwhile the owner talks to
    the main session; then the process running the exec is SIGKILLed. The owner's prompt never carries the
    planted text, and nothing of it is left in the workspace or the room."""
    need_sandbox()
    marker = "PLANTED-INSTRUCTION-3391"
    plant = (f"echo '{marker}' > BOOTSTRAP.md; echo '{marker}' >> AGENTS.md; echo '{marker}' > SOUL.md; "
             f"echo x > kept-if-finished.txt; sleep 61.25")
    script = [dict(calls(plant), match={"contains": "PLANT-NOW"}),
              {"text": "hello owner", "match": {"contains": "OWNER-HELLO"}, "repeat": True}]
    with FakeProvider(script) as fake:
        cfg = {"agents": {"defaults": {"model": "fake/model-x", "memory_search": {"provider": "none"}}},
               "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}}
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
        env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
        agent = [sys.executable, "-m", "hermit.cli.main", "agent"]
        group = subprocess.Popen([*agent, "--session", GROUP, "-m", "PLANT-NOW"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            assert _wait_for_process("sleep 61.25", timeout=60), "the group's exec never started"
            during = subprocess.run([*agent, "-m", "OWNER-HELLO"], env=env, capture_output=True, text=True, timeout=PROC_TIMEOUT)
            assert during.returncode == 0 and "hello owner" in during.stdout
            group.send_signal(signal.SIGKILL)  # the gateway dies in the middle of the exec
            group.wait(PROC_TIMEOUT)
            assert _wait_for_process("sleep 61.25", gone=True, timeout=30), "the sandbox outlived its parent"
            # The killed process could not remove its command's cgroup; the next Hermit process does (and so
            # a test run leaves none on the machine). The kernel lets a group go only once its last task is
            # released, a moment after the sandbox's processes have left the process list: looked again until then.
            deadline = time.monotonic() + 60
            while True:
                remove_stale_groups()
                left = list(Path("/sys/fs/cgroup").glob(f"**/hermit-exec-{group.pid}-*"))
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert not left
            after = subprocess.run([*agent, "-m", "OWNER-HELLO again"], env=env, capture_output=True, text=True, timeout=PROC_TIMEOUT)
            assert after.returncode == 0
        finally:
            if group.poll() is None:
                os.killpg(group.pid, signal.SIGKILL)
                group.wait()
    ws = home / "workspace"
    owner_requests = [r for r in fake.requests if "OWNER-HELLO" in json.dumps(r.body)]
    assert len(owner_requests) == 2
    assert all(marker not in system_text(r) for r in owner_requests)
    assert not (ws / "BOOTSTRAP.md").exists() or marker not in (ws / "BOOTSTRAP.md").read_text()
    assert marker not in (ws / "AGENTS.md").read_text() and marker not in (ws / "SOUL.md").read_text()
    rooms = home / "agents" / "main" / "rooms"
    assert not any(marker in p.read_text(errors="replace") for p in rooms.rglob("*") if p.is_file())
    assert not any(p.name == "kept-if-finished.txt" for p in rooms.rglob("*"))


def _wait_for_process(needle: str, *, gone: bool = False, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if needle.encode() in cmdline and b"/bin/sh -c" not in cmdline:
                found = True
                break
        if found != gone:
            return True
        time.sleep(0.05)
    return False


def test_two_groups_have_separate_rooms(home: Path) -> None:
    need_sandbox()
    with FakeProvider([calls("echo group-one > note.txt"), "ok", calls("cat note.txt; ls"), "ok"]) as fake:
        rt = runtime(home, fake)
        rt.run_turn(GROUP, "one")
        rt.run_turn(OTHER_GROUP, "two")
    text = tool_results(fake.requests[3])[0][0]
    assert "group-one" not in text and "No such file" in text
    assert (rt.confinement.room(GROUP).path / "note.txt").read_text() == "group-one\n"
    assert not (home / "workspace" / "note.txt").exists()


def test_a_groups_read_and_exec_see_memory_as_its_audience_may(home: Path) -> None:
    """The owner's main session writes a note (an owner block) and saves a session file on /new; a group's
    `read` of that daily log and its exec over memory/ see the shared lines, never the owner's."""
    need_sandbox()
    owner_canary = "OWNER-NOTE-CANARY-2281"
    daily = "memory/2026-01-20.md"
    script = [
        {"tool_calls": [{"name": "write", "arguments": {"path": daily, "content": f"- {owner_canary}\n",
                                                         "append": True}}]},
        "noted",
        {"text": f"Sure: {owner_canary}", "match": {"contains": "repeat it"}},
        {"tool_calls": [{"name": "read", "arguments": {"path": daily}},
                        {"name": "exec", "arguments": {"command": "cat memory/*.md; ls -R memory; "
                                                                  "grep -rl CANARY memory || echo none"}}]},
        "seen",
    ]
    hook = {"session": {"hooks": {"session_memory": {"slug_from_model": False}}}}
    with FakeProvider(script) as fake:
        rt = runtime(home, fake, defaults=hook)
        rt.run_turn(MAIN, "remember this")
        rt.run_turn(MAIN, "repeat it")
        saved = rt.reset_session(MAIN).memory_file
        rt.run_turn(GROUP, "what is in memory?")
    ws = home / "workspace"
    assert owner_canary in (ws / daily).read_text() and saved is not None and owner_canary in saved.read_text()
    group_requests = [r for r in fake.requests if "what is in memory?" in json.dumps(r.body)]
    assert len(group_requests) == 2 and all(owner_canary not in json.dumps(r.body) for r in group_requests)
    read_text, cat_text = (t for t, _ in tool_results(group_requests[1]))
    assert "shared note" in read_text and "withheld" in read_text
    assert "shared note" in cat_text and saved.name not in cat_text and "none" in cat_text
