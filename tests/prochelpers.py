"""Helpers for tests that run Hermit in subprocesses: one timeout for them, and stepping an indexer request by
request against the fake embeddings server to act (search, SIGKILL) at a chosen moment of its work.

A test that must act while another process is half-way through its work waits on *events* (the process
is blocked on its next embedding request, the index holds N files), never on wall-clock budgets: on a
loaded 2-core machine a process can take ten times longer than on an idle one, and a fast one can finish
before a sleeping test looks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermit.testing.fake_embeddings import FakeEmbeddingServer

# How long a test waits for one Hermit subprocess before calling it hung. Generous on purpose: a healthy
# child takes seconds, but a 2-core machine running several suites and benchmarks can make it take minutes,
# and a timeout that fires there is a false failure. (CI's whole run is bounded at 90 minutes.)
PROC_TIMEOUT = 600.0

Proc = subprocess.Popen[bytes] | subprocess.Popen[str]


def hermit_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a `hermit` subprocess on state dir `home`."""
    return {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE", **extra}


def start_hermit(home: Path, *args: str, **extra_env: str) -> subprocess.Popen[str]:
    """`hermit ARGS` on state dir `home`, running, with its output piped."""
    return subprocess.Popen([sys.executable, "-m", "hermit.cli.main", *args], env=hermit_env(home, **extra_env),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def fake_embeddings_config(srv: FakeEmbeddingServer, extra: str = "", batch_size: int = 16) -> str:
    """hermit.yaml text pointing every agent's memory at the fake embeddings server (a deterministic
    bag-of-words model answered over loopback HTTP): for tests where the model is not what is tested, it
    embeds thousands of chunks in the time the real model takes for a few. Small batches (16 chunks, the
    sync's smallest), so an index is many requests a test can step through. `extra`: more memory_search
    lines, indented by six spaces."""
    return ("agents:\n  defaults:\n    memory_search:\n      provider: openai-compatible\n      model: fake-embed\n"
            f"      remote: {{base_url: {srv.openai_base_url}, batch_size: {batch_size}, "
            f"timeout_seconds: {PROC_TIMEOUT:g}}}\n{extra}")


def _blocked_moments(srv: FakeEmbeddingServer, proc: Proc, what: str, timeout: float) -> Iterator[None]:
    """Yield each time `proc` is blocked on a held request, letting that request through when resumed; end
    when `proc` exits. The server must be holding (`srv.hold(...)`) before `proc` starts."""
    seen = 0
    ends = time.monotonic() + timeout
    while True:
        while not srv.wait_held(seen + 1, 0.05):  # short waits, to notice a process that ended
            if proc.poll() is not None:
                return
            if time.monotonic() > ends:
                pytest.fail(f"{what} sent no embedding request for {timeout:g}s")
        seen = srv.arrivals
        yield
        srv.release(1)


def step_until(srv: FakeEmbeddingServer, proc: Proc, ready: Callable[[], bool], what: str = "the indexer",
               timeout: float = PROC_TIMEOUT) -> None:
    """Let `proc`'s held embedding requests through one at a time until `ready()` holds while `proc` is
    blocked on its next request. Fails when `proc` ends first."""
    for _ in _blocked_moments(srv, proc, what, timeout):
        if ready():
            return
    _, err = proc.communicate()
    pytest.fail(f"{what} ended (rc {proc.returncode}) before the moment the test waits for: {err}")


def step_through(srv: FakeEmbeddingServer, proc: Proc, at_each: Callable[[], None], what: str = "the indexer",
                 timeout: float = PROC_TIMEOUT) -> int:
    """Let `proc`'s held embedding requests through one at a time until it exits, calling `at_each()` while
    it is blocked on each; returns how many times it was called."""
    calls = 0
    for _ in _blocked_moments(srv, proc, what, timeout):
        at_each()
        calls += 1
    return calls


def kill_stepped(srv: FakeEmbeddingServer, proc: Proc, ready: Callable[[], bool], what: str = "the indexer"
                 ) -> None:
    """SIGKILL `proc` at the first request it is blocked on after `ready()` holds (see `step_until`), then
    stop holding requests, so the processes a test starts next run freely."""
    try:
        step_until(srv, proc, ready, what)
        proc.send_signal(signal.SIGKILL)
        proc.wait(PROC_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.release_all()
    assert proc.returncode == -signal.SIGKILL


def python_as(as_user: dict[str, Any]) -> str | None:
    """An interpreter that can import this checkout as another uid (`as_user`: subprocess's user/group
    arguments, {} for this one), with PYTHONPATH `pythonpath()`; None when there is none (this one may sit
    under /root, where another uid cannot reach it, and the system's may be another version). An interpreter
    found is remembered for that uid and import path (each look costs an interpreter start as that uid)."""
    key = (repr(sorted(as_user.items())), pythonpath())
    if key in _PYTHON_AS:
        return _PYTHON_AS[key]
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            done = subprocess.run([python, "-c", "import hermit.tools.room_sandbox"], capture_output=True,
                                  timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()},
                                  **as_user)
        except OSError:
            continue
        if done.returncode == 0:
            _PYTHON_AS[key] = python
            return python
    return None


_PYTHON_AS: dict[tuple[str, str], str] = {}


def pythonpath() -> str:
    """This process's import path, for a subprocess that must import the same packages and checkout."""
    return os.pathsep.join(sys.path)


def run_python_as(user: dict[str, Any], *args: str, timeout: float = PROC_TIMEOUT, env: dict[str, str] | None = None,
                  **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`python *args` run to its end as `user` (subprocess's user/group arguments, {} for this process's own uid and
    interpreter), this checkout importable, PATH-only environment plus `env`; output captured as text."""
    python = python_as(user) if user else sys.executable
    assert python is not None, f"a Python that {user} can run"
    return subprocess.run([python, *args], capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), **(env or {})}, **kwargs, **user)


class ServerAs:
    """Python `code` run as `uid` (None: this process's own uid and interpreter) that prints the port it
    listens on as its first line and, once its stdin closes, what it received as JSON on its last line: the
    listeners the tests run as another user to see that Hermit sends them nothing. `env` extends its PATH-only
    environment (e.g. a PYTHONPATH to import the tests' fakes)."""

    def __init__(self, uid: int | None, code: str, *args: str, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        from ciguard import need

        as_user: dict[str, Any] = {}
        if uid is not None:
            need(os.geteuid() == 0, "root (to listen as another uid)")
            as_user = {"user": uid, "group": uid}
        python = python_as(as_user) if uid is not None else sys.executable
        assert python is not None, f"no interpreter uid {uid} can run"
        self.proc = subprocess.Popen([python, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=cwd, env={"PATH": "/usr/bin:/bin", **(env or {})}, **as_user)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip().isdigit(), f"the server did not start: {line!r}"
        self.port = int(line)

    def finish(self) -> Any:
        out, _ = self.proc.communicate("", timeout=PROC_TIMEOUT)
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServerAs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


@contextlib.contextmanager
def shared_dir(prefix: str, mode: int = 0o1777) -> Iterator[Path]:
    """A folder every uid may write, sticky like /tmp (pytest's tmp_path sits under a root-only folder); `mode` 0o755:
    one every uid may enter, only this one write. Removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(mode)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
