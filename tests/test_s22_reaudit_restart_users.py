"""s22 re-audit of `hermit gateway restart` (cli/gateway_restart.py) across users — held, shown here.

- Root given a state dir another user owns (`hermit --home ~alice/.hermit gateway restart`), whose gateway lock that
  user replaced with a link to root's own gateway's lock: the lock would name root's gateway, the pid check would pass
  (root's process, holding that very inode) and root's gateway would be signalled. The state dir is refused first
  (another user's), nothing is read from it, nothing signalled.
- uid 65534 given root's state dir: refused, nothing signalled.
The "gateway" is a process holding the lock and publishing its own pid: SIGUSR1's default action would kill it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gatewayhelpers import write_config
from hermit.gateway.state import lock_path
from prochelpers import PROC_TIMEOUT, run_python_as, shared_dir

NOBODY: dict[str, object] = {"user": 65534, "group": 65534, "extra_groups": []}

HOLDS_LOCK = """
import os, pathlib, sys
from hermit.gateway.state import GatewayLock
lock = GatewayLock.acquire(pathlib.Path(sys.argv[1]))
lock.publish({"pid": os.getpid(), "host": "127.0.0.1", "port": 9, "url": "http://127.0.0.1:9/", "started": 1.0})
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder uid 65534 can enter (tmp_path's parents are root's 0700 ones), removed afterwards."""
    with shared_dir("hermit-t10-restart-", mode=0o755) as base:
        yield base


def roots_gateway(home: Path) -> subprocess.Popen[str]:
    write_config(home, "http://127.0.0.1:9/v1")
    proc = subprocess.Popen([sys.executable, "-c", HOLDS_LOCK, str(home)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def restart(home: Path, user: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return run_python_as(user, "-m", "hermit.cli.main", "--home", str(home), "gateway", "restart",
                         stdin=subprocess.DEVNULL, env={"HOME": str(home.parent)})


def test_root_given_another_users_state_dir_linking_to_roots_lock_signals_nothing(reachable: Path) -> None:
    root_home, theirs = reachable / "root-home", reachable / "alice-home"
    gateway = roots_gateway(root_home)
    try:
        (theirs / "gateway").mkdir(parents=True)
        write_config(theirs, "http://127.0.0.1:9/v1")
        lock_path(theirs).symlink_to(lock_path(root_home))
        for path in (theirs, theirs / "gateway", theirs / "hermit.yaml", lock_path(theirs)):
            os.lchown(path, 65534, 65534)
        done = restart(theirs, {})
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"the state dir {theirs} belongs to another user (uid 65534)" in done.stderr, done.stderr
        assert "restarting" not in done.stdout and gateway.poll() is None, done.stdout
    finally:
        gateway.communicate("", timeout=PROC_TIMEOUT)


def test_another_user_given_roots_state_dir_signals_nothing(reachable: Path) -> None:
    root_home = reachable / "root-home"
    gateway = roots_gateway(root_home)
    try:
        done = restart(root_home, NOBODY)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"the state dir {root_home} belongs to another user (uid 0)" in done.stderr, done.stderr
        assert "restarting" not in done.stdout and gateway.poll() is None, done.stdout
    finally:
        gateway.communicate("", timeout=PROC_TIMEOUT)
