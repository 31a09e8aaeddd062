"""The way a room comes back out of the sandbox, attacked: a command writing its own tar into it (a sparse
member declaring hundreds of MB in a few KB), a Hermit killed during the merge, and a host process sharing
the sandbox's uid reading a contact's room. Each through the real sandbox (bubblewrap) and real processes.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from hermit.errors import ToolError
from hermit.tools import os_sandbox
from hermit.tools.room_sandbox import STAGING_PREFIX, OverBudget, new_staging, sandbox_uid, unpack
from prochelpers import PROC_TIMEOUT, python_as
from test_sandbox_attacks import need_sandbox, room_tools, run

SPARSE_BYTES = 256 << 20
# Run inside the sandbox: reopen, through /proc/<pid>/fd, every pipe or socket any process there holds
# (except the command's own input and output) and write into it a tar whose one member declares SPARSE_BYTES.
REOPEN_ATTACK = r"""python3 - <<'X'
import io, os, tarfile
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
    ti = tarfile.TarInfo("bomb.bin"); ti.size = 512; ti.mode = 0o644
    ti.pax_headers = {"GNU.sparse.map": "0,512", "GNU.sparse.size": "SPARSE_BYTES", "GNU.sparse.numblocks": "1"}
    t.addfile(ti, io.BytesIO(b"A" * 512))
mine = {os.readlink(f"/proc/self/fd/{n}") for n in (0, 1)}  # its heredoc and its output
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for n in fds:
        try:
            what = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
        if not what.startswith(("pipe:", "socket:")) or what in mine:
            continue
        try:
            fd = os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            print("refused", pid, n, what.split(":")[0], e.errno)
            continue
        print("opened", pid, n, what)
        try:
            os.write(fd, buf.getvalue())
        except OSError:
            pass
print("attack done")
X
""".replace("SPARSE_BYTES", str(SPARSE_BYTES))

AS_USER_SCRIPT = r'''
import json, os, sys
from pathlib import Path
from hermit.tools import ExecTool, PathResolver, RoomSandbox, RoomView
from hermit.tools.os_sandbox import SandboxLimits, detect
from hermit.tools.room_sandbox import sandbox_uid
from hermit.tools.rooms import Room
from hermit.memory.policy.audience import Reader
from hermit.tools.views import AudienceMemoryView
base = Path(sys.argv[1])
ws = base / "state" / "workspace"
(ws / "memory").mkdir(parents=True)
view = RoomView(ws, Room(base / "state" / "rooms", "telegram:group:9", 8 << 20),
                AudienceMemoryView(ws, Reader("telegram:group:9")))
tool = ExecTool(PathResolver(ws, True), env={"PATH": "/usr/bin:/bin"},
                sandbox=RoomSandbox(detect(), view, SandboxLimits(), base / "scratch", sandbox_uid(65534)))
out = tool.exec(sys.argv[2], timeout=30).text
rooms = base / "state" / "rooms"
print(json.dumps({"uid": os.getuid(), "out": out, "room": sorted(os.listdir(view.room.path)),
                  "rooms": sorted(os.listdir(rooms)), "room_bytes": view.room.usage()}))
'''


def test_the_way_back_cannot_be_reopened_by_the_command(tmp_path: Path) -> None:
    """Hermit as an ordinary user (uid 65534 when the tests run as root): the sandbox runs as Hermit's own uid,
    so the command could reopen the pipe the wrapper packs the room into (/proc/2/fd/3) and hand back a
    sparse bomb. The way back is a socket now: /proc/<pid>/fd cannot reopen it (ENXIO)."""
    need_sandbox()
    uid = 65534 if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="hermit-back-", dir="/tmp" if uid is not None else tmp_path))
    if uid is not None:
        os.chmod(base, 0o700)
        os.chown(base, uid, uid)
    script = base / "attack.py"
    script.write_text(AS_USER_SCRIPT)
    as_user: dict[str, Any] = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    try:
        python = python_as(as_user)
        need(python is not None, "a Python that can import this checkout as another uid")
        assert python is not None
        done = subprocess.run([python, str(script), str(base), REOPEN_ATTACK], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)},
                              **as_user)
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"\nHermit as uid {out['uid']}: {out['out']!r}")
        assert out["uid"] != 0 and "attack done" in out["out"]
        assert "opened" not in out["out"], out["out"]
        assert "refused" in out["out"]  # it found the wrapper's sockets, and could not reopen them
        assert "bomb.bin" not in out["room"] and out["room_bytes"] < (1 << 20)
        assert not [n for n in out["rooms"] if n.startswith(STAGING_PREFIX)]
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _tar(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r:")


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, **pax: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, size, 0o644
    if kind == tarfile.LNKTYPE:
        info.linkname = "ok.txt"
    if pax:
        info.pax_headers = dict(pax)
    return info


def _sparse_gnu() -> bytes:
    """A GNU-format tar (type 'S') declaring a 64 MB file from 512 bytes, as GNU tar writes it."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "holes.bin"
        with open(p, "wb") as f:
            f.write(b"A" * 4096)
            f.truncate(64 << 20)
        done = subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", "-", "-C", d, "holes.bin"],
                              capture_output=True, check=True)
        return done.stdout


def test_unpack_keeps_only_plain_members_within_its_budget(tmp_path: Path) -> None:
    """Sparse members (PAX GNU.sparse.* and GNU type 'S'), hard links, FIFOs, devices and contiguous files are
    not unpacked; a member past the byte budget stops the whole unpack and leaves no partial file."""
    dest = tmp_path / "staging"
    dest.mkdir()
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        tar = _tar((_info("ok.txt", size=3), b"ok\n"),
                   (_info("pax-sparse.bin", size=512, **{"GNU.sparse.map": "0,512", "GNU.sparse.size": str(SPARSE_BYTES),
                                                         "GNU.sparse.numblocks": "1"}), b"A" * 512),
                   (_info("hard", tarfile.LNKTYPE), b""), (_info("fifo", tarfile.FIFOTYPE), b""),
                   (_info("dev", tarfile.CHRTYPE), b""), (_info("cont.bin", tarfile.CONTTYPE, 2), b"c\n"))
        assert unpack(tar, fd) == []
        with tarfile.open(fileobj=io.BytesIO(_sparse_gnu()), mode="r:") as gnu:
            assert unpack(gnu, fd) == []
        assert sorted(os.listdir(dest)) == ["ok.txt"]
        big = _tar((_info("a.bin", size=3 << 20), b"a" * (3 << 20)), (_info("b.bin", size=3 << 20), b"b" * (3 << 20)))
        with pytest.raises(OverBudget):
            unpack(big, fd, max_bytes=5 << 20)
        assert sorted(os.listdir(dest)) == ["a.bin", "ok.txt"]  # b.bin's first 2 MB are gone with it
    finally:
        os.close(fd)


KILLED_MERGE = r'''
import os, signal, sys
from pathlib import Path
sys.path[:0] = sys.argv[2].split(os.pathsep)
import hermit.tools.room_sandbox as rs
from test_sandbox_attacks import room_tools, run
def killed(*a, **k):
    print("merging", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
rs.apply_incoming = killed
runner, view = room_tools(Path(sys.argv[1]))
run(runner, "exec", command="head -c 100000 /dev/zero > made.bin")
'''


def test_a_merge_killed_midway_leaves_nothing_behind_after_the_next_run(tmp_path: Path) -> None:
    """Hermit killed (SIGKILL) while it merges: its staging folder (`.incoming-<pid>-…`, what came back, charged
    to no quota) stays on disk. The next run removes it; a live process's is left alone."""
    need_sandbox()
    done = subprocess.run([sys.executable, "-c", KILLED_MERGE, str(tmp_path), os.pathsep.join(sys.path)],
                          capture_output=True, text=True, timeout=PROC_TIMEOUT, check=False)
    assert done.returncode == -signal.SIGKILL and "merging" in done.stdout, done.stderr[-2000:]
    rooms = tmp_path / "rooms"
    left = [n for n in os.listdir(rooms) if n.startswith(".incoming-")]
    assert len(left) == 1 and sum(f.stat().st_size for f in (rooms / left[0]).rglob("*")) >= 100000
    live, fd = new_staging(rooms)  # a merge at work (held: tests/test_held_leftovers.py)
    try:
        runner, view = room_tools(tmp_path)
        text, err = run(runner, "exec", command="echo later > later.txt")
        print(f"\nleft by the killed Hermit: {left}; after the next run: {sorted(os.listdir(rooms))}")
        assert not err and (view.room.path / "later.txt").read_text() == "later\n"
        assert sorted(n for n in os.listdir(rooms) if n.startswith(".incoming-")) == [live.name]
    finally:
        live.rmdir()
        os.close(fd)


def test_a_host_process_of_another_account_cannot_reach_a_contacts_room(tmp_path: Path) -> None:
    """As root, commands ran as 65534 (`nobody`): any daemon running as nobody could read a contact's room
    through /proc/<pid>/root. They run as a uid no account uses now; nobody's process is refused."""
    need_sandbox()
    if os.geteuid() != 0:
        # As an ordinary user the command runs as that user: no other account shares its uid.
        assert sandbox_uid(65534) is None
        return
    runner, view = room_tools(tmp_path)
    _, err = run(runner, "write", path="contact-private.txt", content="CONTACT-PRIVATE-4242\n")
    assert not err
    ident: list[str] = []
    worker = threading.Thread(target=lambda: ident.append(run(runner, "exec", command="id -u; sleep 8")[0]))
    worker.start()
    try:
        pid = _sandboxed_sleep(tmp_path)
        uid = os.stat(f"/proc/{pid}").st_uid
        peek = subprocess.run(["cat", f"/proc/{pid}/root{tmp_path / 'ws'}/contact-private.txt"], capture_output=True,
                              text=True, timeout=PROC_TIMEOUT, user=65534, group=65534, extra_groups=[])
        print(f"\nsandboxed command runs as host uid {uid}; nobody's cat: rc {peek.returncode} {peek.stderr.strip()}")
        assert uid not in (0, 65534)
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)
        assert peek.returncode != 0 and "CONTACT-PRIVATE" not in peek.stdout
    finally:
        worker.join(timeout=PROC_TIMEOUT)
    assert ident and ident[0].split()[-1] == str(uid)  # what the command saw: the same uid


def _sandboxed_sleep(tmp_path: Path, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir("/proc"):
            try:
                if name.isdigit() and Path(f"/proc/{name}/cmdline").read_bytes() == b"sleep\x008\x00" \
                        and os.stat(f"/proc/{name}").st_uid != 0:
                    return int(name)
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("the sandboxed sleep never started")


def test_the_sandbox_uid_is_one_no_account_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sandbox.uid` is used as it is unless an account has it (65534 is nobody); then the first free uid
    from DEFAULT_SANDBOX_UID up; none free: no sandbox, said so."""
    taken = {65534, os_sandbox.DEFAULT_SANDBOX_UID}
    monkeypatch.setattr(os_sandbox, "account_uses", lambda uid: uid in taken)
    os_sandbox.unused_uid.cache_clear()
    try:
        assert os_sandbox.unused_uid(65534) == os_sandbox.DEFAULT_SANDBOX_UID + 1
        assert os_sandbox.unused_uid(3_000_000) == 3_000_000
        taken.update(range(os_sandbox.DEFAULT_SANDBOX_UID, os_sandbox.DEFAULT_SANDBOX_UID + os_sandbox.UID_SEARCH))
        os_sandbox.unused_uid.cache_clear()
        with pytest.raises(ToolError):
            os_sandbox.unused_uid(65534)
    finally:
        os_sandbox.unused_uid.cache_clear()
