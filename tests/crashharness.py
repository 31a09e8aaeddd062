"""Crash harness: run a real Hermit operation in a forked child that SIGKILLs itself before its Kth write step.

A "step" is any call, made from Python code, that changes files or the index: os.write/fsync/replace/rename/link/
unlink/ftruncate/fchmod/chmod/mkdir, a file object's write/flush/truncate, and a SQLite (sqlite3 or sqlean)
execute/executemany/executescript/commit. The child counts them with a profile hook (sys.setprofile, also threading.setprofile) and
kills itself with SIGKILL *before* the Kth one runs, so the files are exactly as a power cut or `kill -9` at that
instant leaves them (the kernel still holds what was written: page-cache crashes are not modelled). A first,
unkilled run counts the steps and names each (call and the Hermit line that made it), so a failing kill point
reads "before posix.replace at durable.py:68 (write_atomic)".

Deterministic (no sleeps, no timing): the same operation on the same files makes the same calls in the same order.
Each child is a fork of the test process (fast: no interpreter start, Hermit already imported); per-process caches
that would hide a crash's leftovers from the "next process" (durable._swept) are cleared in every child.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, cast

import pytest

from agenthelpers import fixed_clock, load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.models.base import ModelProfile, ModelRequest
from hermit.testing import FunctionModel
from hermit.tools.os_sandbox import Backend

CHILD_TIMEOUT = 60.0

_OS_STEPS = frozenset({"write", "pwrite", "writev", "fsync", "fdatasync", "replace", "rename", "link", "unlink",
                       "remove", "ftruncate", "truncate", "fchmod", "chmod", "mkdir", "rmdir", "symlink", "fchown",
                       "chown", "sendfile", "copy_file_range"})
_FILE_STEPS = frozenset({"write", "writelines", "flush", "truncate"})
_SQL_STEPS = frozenset({"execute", "executemany", "executescript", "commit"})
_STEP_NAMES = _OS_STEPS | _FILE_STEPS | _SQL_STEPS  # a C call of any other name is no step (the hook's fast path)


@dataclass
class Run:
    """One child's outcome: killed (by its own SIGKILL), exit status, the steps it counted, error text."""

    killed: bool
    status: int
    steps: list[str] = field(default_factory=list)
    error: str = ""
    result: Any = None


def _label(arg: Any) -> str | None:
    name = getattr(arg, "__name__", "")
    if not isinstance(name, str) or name not in _STEP_NAMES:
        return None
    owner = getattr(arg, "__self__", None)
    module = getattr(arg, "__module__", None)
    if module in ("posix", "os") and name in _OS_STEPS:
        return f"os.{name}"
    # A method called as `obj.m(...)` is reported as its descriptor (with __objclass__), not a bound method.
    kind = getattr(arg, "__objclass__", None) if owner is None or isinstance(owner, type) else type(owner)
    if kind is None:
        return None
    if kind.__module__ in ("_io", "io") and name in _FILE_STEPS:
        return f"{kind.__name__}.{name}"
    if kind.__module__.split(".")[0] in ("sqlite3", "sqlean") and name in _SQL_STEPS:  # sqlean: SQLite with
        return f"sqlite.{kind.__name__}.{name}"  # extension loading, what hermit.db uses when it is installed
    return None


def _where(frame: FrameType | None) -> str:
    """The innermost Hermit source line on the stack (else the innermost line)."""
    first = ""
    while frame is not None:
        path = frame.f_code.co_filename
        here = f"{os.path.basename(path)}:{frame.f_lineno} ({frame.f_code.co_name})"
        first = first or here
        if "/hermit/" in path:
            return here
        frame = frame.f_back
    return first


def _arm(kill_at: int | None, steps: list[str]) -> None:
    lock = threading.Lock()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call":
            return
        label = _label(arg)
        if label is None:
            return
        with lock:
            steps.append(f"{label} at {_where(frame)}")
            if kill_at is not None and len(steps) >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.setprofile(hook)
    sys.setprofile(hook)


def run(op: Callable[[], Any], *, kill_at: int | None = None, uid: int | None = None, count: bool = True) -> Run:
    """Run `op()` in a forked child (as `uid` when given), SIGKILLed before its `kill_at`th step (1-based; None:
    never). `op`'s return value must be JSON-able; it comes back as Run.result. `count=False` (with no `kill_at`):
    the steps are not counted (Run.steps stays empty), so the child runs without the profile hook's cost."""
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 0
        try:
            os.close(r)
            import hermit.durable as durable

            durable._swept.clear()
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            steps: list[str] = []
            if count or kill_at is not None:
                _arm(kill_at, steps)
            result = op()
            sys.setprofile(None)
            threading.setprofile(None)
            out = json.dumps({"steps": steps, "result": result}).encode()
        except BaseException:  # noqa: BLE001 - the child reports every failure to the parent, then exits
            sys.setprofile(None)
            status = 1
            out = json.dumps({"steps": [], "error": traceback.format_exc()}).encode()
        with contextlib.suppress(BaseException):
            view = memoryview(out)
            while view:
                view = view[os.write(w, view):]
        os._exit(status)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([r], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"crash harness: the child ran over {CHILD_TIMEOUT:.0f} s (kill_at={kill_at})")
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
    _, wstatus = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(wstatus) and os.WTERMSIG(wstatus) == signal.SIGKILL
    body = json.loads(b"".join(chunks) or b"{}")
    return Run(killed=killed, status=os.waitstatus_to_exitcode(wstatus), steps=body.get("steps", []),
               error=body.get("error", ""), result=body.get("result"))


def ok(op: Callable[[], Any], *, uid: int | None = None, count: bool = False) -> Run:
    """`op()` in a child that is not killed; it must succeed. Its steps are counted only with `count=True`."""
    done = run(op, uid=uid, count=count)
    assert done.status == 0, done.error
    return done


def points(total: int, limit: int = 40) -> list[int]:
    """Kill points 1..total (every one when there are at most `limit`, else `limit` spread evenly, first and last
    included): deterministic, so a failure names the same point every run."""
    if total <= limit:
        return list(range(1, total + 1))
    return sorted({1 + round(i * (total - 1) / (limit - 1)) for i in range(limit)})


def copy_tree(src: Path, dst: Path) -> None:
    """`dst` becomes an exact copy of `src` (modes, owners, links): the state before the operation, restored for
    every kill point."""
    if dst.exists():
        shutil.rmtree(dst)
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


@dataclass
class Sweep:
    """The kill points of one operation: `steps` names them; `each()` yields (k, label) with the state restored."""

    home: Path
    template: Path
    steps: list[str]

    def each(self, limit: int = 40, also: str = "") -> Iterator[tuple[int, str]]:
        """The kill points (`points`), plus every step whose label contains `also` (a file:line or function name
        the test is about)."""
        extra = {k for k, label in enumerate(self.steps, 1) if also and also in label}
        for k in sorted(set(points(len(self.steps), limit)) | extra):
            copy_tree(self.template, self.home)
            yield k, self.steps[k - 1]


def sweep(home: Path, op: Callable[[], Any], *, uid: int | None = None) -> Sweep:
    """Save `home` as the state before `op`, run `op` once unkilled to count its steps (leaving the state after it in
    `home`), and return the sweep over its kill points."""
    template = home.with_name(home.name + ".before")
    copy_tree(home, template)
    done = ok(op, uid=uid, count=True)
    assert done.steps, "the operation made no write step"
    return Sweep(home, template, done.steps)


def kill(op: Callable[[], Any], k: int, label: str, *, uid: int | None = None) -> None:
    """Run `op` killed before step `k`; it must die there (the same calls as the counting run)."""
    done = run(op, kill_at=k, uid=uid)
    assert done.killed, f"not killed before step {k} ({label}): status {done.status} {done.error}"


# --- invariants over a state directory ---------------------------------------------------------------------------

TEMP_MARKS = (".tmp-", ".tmp", ".rebuild-")


def temps(root: Path) -> list[Path]:
    """Files a writer leaves while it writes (`.NAME.tmp-<pid>-<hex>`, `.NAME.<hex>.tmp`, index rebuilds)."""
    return sorted(p for p in root.rglob("*") if any(m in p.name for m in TEMP_MARKS) and not p.is_dir())


def loose_modes(root: Path, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Files or folders under `root` that a user other than the owner may read or write (group/other bits), except
    the relative paths in `skip`."""
    found = []
    for p in [root, *root.rglob("*")]:
        rel = str(p.relative_to(root))
        if p.is_symlink() or any(rel == s or rel.startswith(s + "/") for s in skip):
            continue
        mode = stat.S_IMODE(p.lstat().st_mode)
        if mode & 0o077:
            found.append(f"{rel} {mode:o}")
    return found


def files(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` that is not a temp, by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and p not in temps(root)}


def owners(root: Path) -> set[int]:
    return {p.lstat().st_uid for p in [root, *root.rglob("*")]}


def chown_tree(root: Path, uid: int) -> None:
    for p in [root, *root.rglob("*")]:
        os.lchown(p, uid, uid)


SHM = Path("/dev/shm")
SHM_FREE = 1 << 30  # a tmpfs with less room than this (a container's 64 MiB /dev/shm) is not used


def scratch_root() -> str | None:
    """Where the state dirs go: a RAM-backed tmpfs (/dev/shm) when there is one with room, else the system temp
    dir. The harness kills with SIGKILL, which never loses what the kernel holds (see the module's text), so an
    fsync changes nothing it can see, and on ext4 under load each costs milliseconds of I/O (the sweeps make
    thousands). On tmpfs every fsync is still made (each one a kill point as before), only for free."""
    try:
        if SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK) and shutil.disk_usage(SHM).free >= SHM_FREE:
            return str(SHM)
    except OSError:
        pass
    return None


@contextlib.contextmanager
def state_dir(tmp_path: Path, uid: int | None) -> Iterator[Path]:
    """An empty owner-only state dir `home` for `uid` (None: this process's) in a fresh folder under
    `scratch_root()` (for another uid, made reachable by that uid: pytest's tmp dirs are the runner's, 0700);
    removed afterwards. `tmp_path` is not used (kept for the callers)."""
    base = Path(tempfile.mkdtemp(prefix="hermit-crash-", dir=scratch_root()))
    try:
        home = base / "home"
        home.mkdir(mode=0o700)
        if uid is not None:
            os.chmod(base, 0o755)
            os.chown(home, uid, uid)
        yield home
    finally:
        shutil.rmtree(base, ignore_errors=True)


UIDS = [None, 65534] if os.geteuid() == 0 else [None]


@pytest.fixture(params=UIDS, ids=lambda u: "self" if u is None else f"uid{u}")
def uid(request: pytest.FixtureRequest) -> int | None:
    """Each test as this process's uid and (as root) as uid 65534: a module takes it with `uid = ch.uid`."""
    return cast("int | None", request.param)


@pytest.fixture
def home(tmp_path: Path, uid: int | None) -> Iterator[Path]:
    """An empty owner-only state dir for `uid` (`home = ch.home` in a module)."""
    with state_dir(tmp_path, uid) as made:
        yield made


def runtime(home: Path, answer: Callable[[ModelRequest], str]) -> AgentRuntime:
    """The offline agent of `home` answering with `answer`, /new's note named without the model, every write
    fsynced, the sandbox off (a child that drops to another uid runs no bubblewrap)."""
    hook = {"session": {"hooks": {"session_memory": {"slug_from_model": False}}}}
    agent = load_offline(home, defaults=hook).agent()
    model = FunctionModel(answer, profile=ModelProfile("scripted", "x", context_window=200_000))
    return AgentRuntime(agent, model, memory=None, clock=fixed_clock, fsync=True, home=home,
                        sandbox_backend=Backend(None, None, "test"))


def warm(op: Callable[[Path], Any]) -> None:
    """Run `op(scratch_dir)` once in this process: the lazy imports it makes happen here, so a child that drops to
    another uid (who may not read root's Python install) finds them loaded."""
    scratch = Path(tempfile.mkdtemp(prefix="hermit-warm-"))
    try:
        op(scratch / "home")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def describe(k: int, label: str) -> str:
    return f"killed before step {k}: {label}"

