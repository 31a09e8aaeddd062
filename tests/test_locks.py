"""hermit.locks: the one flock wrapper (two open descriptions of one file conflict even within a process)."""

from __future__ import annotations

import os
from pathlib import Path

from hermit.locks import LockFile, lock_fd, locked, open_lock_file


def test_a_held_lock_file_is_refused_without_waiting_and_free_again_once_released(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    first = LockFile.try_acquire(path)
    assert first is not None and (os.stat(path).st_mode & 0o777) == 0o600
    assert LockFile.try_acquire(path) is None
    first.publish(b"1234")
    assert path.read_bytes() == b"1234"
    first.release()
    first.release()  # twice is harmless
    with LockFile.acquire(path) as again:
        assert again.fd >= 0
    assert LockFile.try_acquire(path) is not None


def test_a_bounded_wait_polls_the_injected_clock_and_gives_up(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    with locked(path):
        assert LockFile.acquire_within(path, 0.2, clock=lambda: now[0], sleep=sleep) is None
    assert 3 <= len(slept) <= 5 and now[0] >= 0.2
    got = LockFile.acquire_within(path, 0.2, clock=lambda: now[0], sleep=sleep)
    assert got is not None
    got.release()


def test_a_shared_probe_sees_an_exclusive_holder(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    probe = open_lock_file(path)
    try:
        with locked(path):
            assert not lock_fd(probe, shared=True, wait=False)
        assert lock_fd(probe, shared=True, wait=False)
    finally:
        os.close(probe)
