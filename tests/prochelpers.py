"""Helpers for tests that SIGKILL a process at a chosen moment (a crash in the middle of its work)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import pytest


def kill_when(proc: subprocess.Popen[bytes] | subprocess.Popen[str], ready: Callable[[], bool],
              what: str = "the process", timeout: float = 120) -> None:
    """SIGKILL `proc` as soon as `ready()` holds; fail the test when it finished before that."""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if ready():
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.fail(f"{what} finished before it could be killed (rc {proc.returncode}); add notes")
