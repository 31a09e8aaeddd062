"""Memory folders another user may write (an extra path they own): they cannot stop or flood the watcher, a
watcher that dies anyway is restarted, and doctor warns about such a folder (audit L1).

Root reads a mode-000 folder anyway (CAP_DAC_OVERRIDE), so as root the watcher runs with the two DAC
capabilities dropped from its threads, as a gateway run by a user would be refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.gateway.services import MemoryWatcher
from hermit.memory.index.sync import SyncReport
from hermit.memory.index.watch import watch_memory
from hermit.memory.service import MemoryService
from memhelpers import HashEmbedder, service, sql
from prochelpers import PROC_TIMEOUT

ROOT = os.geteuid() == 0
_CAP_DAC = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@contextlib.contextmanager
def permissions_apply() -> Iterator[None]:
    """As root: this thread (and the threads it starts meanwhile, which keep it) without the capabilities
    that bypass file permissions; as anyone else, nothing to do. Restored for this thread on exit."""
    if not ROOT:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    data = (_CapData * 2)()
    assert libc.capget(ctypes.byref(_CapHeader(0x20080522, 0)), data) == 0, ctypes.get_errno()
    saved = data[0].effective
    data[0].effective &= ~_CAP_DAC
    assert libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) == 0, ctypes.get_errno()
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) == 0, ctypes.get_errno()


def hand_over(path: Path) -> None:
    """`path` (a tree) made another user's, as root; a non-root test keeps it (mode 000 still binds it)."""
    if ROOT:
        for p in [path, *path.rglob("*")]:
            os.chown(p, 65534, 65534, follow_symlinks=False)


def inotify_watches() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fdinfo"):
        with contextlib.suppress(OSError), open(f"/proc/self/fdinfo/{fd}") as f:
            n += sum(1 for line in f if line.startswith("inotify wd:"))
    return n


class Watching:
    """watch_memory in a thread as the gateway runs it, with events to wait on instead of time."""

    def __init__(self, svc: MemoryService, workspace: Path, extra_paths: list[str]) -> None:
        self.svc, self.workspace, self.extra_paths = svc, workspace, extra_paths
        self.reports: list[SyncReport] = []
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.changed = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            watch_memory(self.workspace, self.extra_paths, self.svc.sync, debounce_ms=50, stop=self.stop,
                         on_report=self._report, on_ready=self.ready.set)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.error = e
        finally:
            self.ready.set()  # wake the waiters: it ended
            self.changed.set()

    def _report(self, report: SyncReport) -> None:
        self.reports.append(report)
        self.changed.set()

    def start(self) -> None:
        with permissions_apply():
            self.thread.start()
        assert self.ready.wait(PROC_TIMEOUT)
        assert self.thread.is_alive(), f"the watcher died: {self.error!r}"

    def wait_until(self, cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PROC_TIMEOUT
        while not cond():
            assert self.thread.is_alive(), f"the watcher died: {self.error!r}"
            assert time.monotonic() < deadline, f"never happened: {what}"
            self.changed.wait(PROC_TIMEOUT)
            self.changed.clear()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def indexed(svc: MemoryService) -> set[str]:
    return {str(r[0]) for r in sql(svc, "select path from {t}files")}


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """An extra path's folder, someone else's as root: team.md in it, sub/ below."""
    write(tmp_path / "shared" / "team.md", "# Team\n- The standup moved to 9:30.\n")
    (tmp_path / "shared" / "sub").mkdir()
    return tmp_path / "shared"


def _svc(tmp_path: Path, ws: Path, extra: list[str]) -> MemoryService:
    write(ws / "MEMORY.md", "# Memory\n- The database is Postgres 16.\n")
    (ws / "memory").mkdir(exist_ok=True)
    return service(ws, tmp_path / "index.sqlite", HashEmbedder(),
                   MemorySearchConfig.model_validate({"extra_paths": extra}))


def test_an_unreadable_folder_in_an_extra_path_is_skipped_with_one_warning_and_the_rest_is_watched(
        tmp_path: Path, shared: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The audit: the other user's `mkdir x; chmod 000 x` stopped the watcher (PermissionError) for good."""
    (shared / "x").mkdir()
    hand_over(shared)
    (shared / "x").chmod(0)
    ws = tmp_path / "ws"
    svc = _svc(tmp_path, ws, [str(shared)])
    run = Watching(svc, ws, [str(shared)])
    caplog.set_level(logging.WARNING, "hermit.memory.index.watch")
    try:
        run.start()
        write(ws / "memory" / "2026-03-02.md", "# 2026-03-02\n- Renewed the passport.\n")
        write(shared / "sub" / "plan.md", "# Plan\n- Ship on Friday.\n")
        run.wait_until(lambda: {"memory/2026-03-02.md", str(shared / "sub" / "plan.md")} <= indexed(svc),
                       "the owner's new note and the shared one indexed")
        warnings = [r.getMessage() for r in caplog.records if r.name == "hermit.memory.index.watch"]
        assert len(warnings) == 1 and str(shared / "x") in warnings[0], warnings
    finally:
        run.close()
        (shared / "x").chmod(0o755)
        svc.close()
    assert run.error is None and not run.thread.is_alive()


def test_a_symlinked_folder_in_an_extra_path_is_not_watched_through(tmp_path: Path, shared: Path) -> None:
    """The audit: `ln -s /usr loop` in the shared folder made the owner's gateway hold 15,503 inotify
    watches (notify's recursive watch follows links). Only the real folders are watched now."""
    big = tmp_path / "big"
    for i in range(30):
        for j in range(10):
            (big / f"d{i}" / f"e{j}").mkdir(parents=True)
    (shared / "loop").symlink_to(big, target_is_directory=True)
    hand_over(shared)
    ws = tmp_path / "ws"
    svc = _svc(tmp_path, ws, [str(shared)])
    before = inotify_watches()
    run = Watching(svc, ws, [str(shared)])
    try:
        run.start()
        held = inotify_watches() - before
        write(shared / "sub" / "plan.md", "# Plan\n- Ship on Friday.\n")  # the real folders are still watched
        run.wait_until(lambda: str(shared / "sub" / "plan.md") in indexed(svc), "the shared note indexed")
    finally:
        run.close()
        svc.close()
    # the workspace, memory/, the shared folder and sub/: never the 331 folders behind the link
    assert held <= 4, held


def test_folders_made_removed_and_made_again_while_watching_are_watched(tmp_path: Path, shared: Path) -> None:
    """Each real folder is watched on its own, so a new one is added to the watch, and an extra folder
    removed and made again (a vanished one) is watched again: its new notes are indexed."""
    ws = tmp_path / "ws"
    svc = _svc(tmp_path, ws, [str(shared)])
    run = Watching(svc, ws, [str(shared)])
    try:
        run.start()
        write(ws / "memory" / "2026" / "03" / "2026-03-02.md", "# 2026-03-02\n- Renewed the passport.\n")
        run.wait_until(lambda: "memory/2026/03/2026-03-02.md" in indexed(svc), "a note in new folders indexed")
        shutil.rmtree(shared)
        run.wait_until(lambda: not any(p.startswith(str(shared)) for p in indexed(svc)), "the removal synced")
        write(shared / "again.md", "# Again\n- The folder is back.\n")
        run.wait_until(lambda: str(shared / "again.md") in indexed(svc), "a note in the remade folder indexed")
    finally:
        run.close()
        svc.close()
    assert run.error is None


def test_a_memory_watcher_that_dies_is_restarted_and_indexes_what_changed_meanwhile(tmp_path: Path) -> None:
    """A watch that fails (here: the first start hits the inotify limit) is started again after its backoff,
    syncing first, and the service reports the restart; the gateway no longer runs on without it."""
    ws = tmp_path / "ws"
    svc = _svc(tmp_path, ws, [])
    calls: list[int] = []

    def flaky_watch(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            write(ws / "memory" / "while-down.md", "# Down\n- Written while the watcher was down.\n")
            raise OSError(28, "inotify watch limit reached")
        watch_memory(*args, **kwargs)

    watcher = MemoryWatcher("main", svc, backoff=0.01, watch=flaky_watch)

    async def main() -> dict[str, Any]:
        await watcher.start()
        assert await asyncio.to_thread(watcher.failed.wait, PROC_TIMEOUT)
        assert await asyncio.to_thread(watcher.watching.wait, PROC_TIMEOUT)
        assert "memory/while-down.md" in indexed(svc)  # the restart synced first
        watcher.synced.clear()
        write(ws / "memory" / "after.md", "# After\n- Written once it watched again.\n")
        deadline = time.monotonic() + PROC_TIMEOUT
        while "memory/after.md" not in indexed(svc):
            assert time.monotonic() < deadline
            await asyncio.to_thread(watcher.synced.wait, PROC_TIMEOUT)
            watcher.synced.clear()
        status = watcher.status()
        await watcher.stop()
        return status

    try:
        status = asyncio.run(main())
    finally:
        svc.close()
    assert len(calls) == 2
    assert status["running"] and status["restarts"] == 1 and status["error"] is None
    assert not watcher.status()["running"]


def _doctor_extra_paths(home: Path, extra: list[str]) -> Any:
    from hermit.cli.context import CliContext
    from hermit.cli.doctor import extra_paths

    (home / "workspace").mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(
        {"agents": {"defaults": {"memory_search": {"provider": "none", "extra_paths": extra}}}}))
    return extra_paths(CliContext(home=home))


def test_doctor_warns_about_an_extra_path_another_user_owns_or_may_write(tmp_path: Path, shared: Path) -> None:
    mine = tmp_path / "mine"
    write(mine / "a.md", "# a\n")
    ok = _doctor_extra_paths(tmp_path / "home", [str(mine)])
    assert ok.status == "ok" and "1 extra path" in ok.detail
    if ROOT:
        hand_over(shared)
        want = f"{shared} belongs to another user (uid 65534)"
    else:
        shared.chmod(0o777)
        want = f"{shared} can be written by every user (mode 777)"
    bad = _doctor_extra_paths(tmp_path / "home", [str(mine), str(shared)])
    assert bad.status == "warn" and want in bad.detail and str(mine) not in bad.detail.split("—")[0], bad
    (shared / "sub").chmod(0o777)  # a folder inside it that every user may write
    if ROOT:
        os.chown(shared, 0, 0)
    else:
        shared.chmod(0o755)
    inner = _doctor_extra_paths(tmp_path / "home", [str(shared)])
    assert inner.status == "warn" and str(shared / "sub") in inner.detail, inner
