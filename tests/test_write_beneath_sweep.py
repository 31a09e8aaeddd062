"""A writer killed mid-`safe_fs.write_beneath` left its hidden temp (`.NAME.<hex>.tmp`) in an inbox or a room for
ever. Now each temp is held (flock) by its writer from its making until it is renamed into place, and the first
write of a process in a directory removes the temps there that no writer holds: a killed writer's leftover goes, a
live writer's temp is never taken. Played as root and, when the tests run as root, as uid 65534 in folders it owns.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermit.tools import safe_fs

NOBODY = 65534
AS_USERS: list[int | None] = [None] + ([NOBODY] if os.geteuid() == 0 else [])
CTX = multiprocessing.get_context("fork")
HALF = b"the first half of the file, " * 64
WHOLE = HALF + b"and its second half" * 64


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


@pytest.fixture(params=AS_USERS, ids=lambda u: "as-root" if u is None else f"uid-{u}")
def room(request: Any) -> Iterator[tuple[Path, int | None]]:
    """A room folder with an inbox, owned by the user the writers run as; not under /root (uid 65534 reaches it)."""
    base = Path(tempfile.mkdtemp(prefix="hermit-sweep-"))
    try:
        os.chmod(base, 0o755)
        (base / "room" / "inbox").mkdir(parents=True)
        user: int | None = request.param
        if user is not None:
            for p in (base / "room", base / "room" / "inbox"):
                os.chown(p, user, user)
        yield base / "room", user
    finally:
        shutil.rmtree(base)


def _as(user: int | None) -> None:
    if user is not None:
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)


def _write(folder: str, user: int | None, rel: str, data: bytes) -> None:
    _as(user)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    safe_fs.write_beneath(fd, rel, data)
    os.close(fd)


def _write_halting(folder: str, user: int | None, rel: str, halted: int, release: int) -> None:
    """write_beneath that stops half way through writing its temp: says so on `halted`, then waits for a byte on
    `release` (never coming when the test kills it)."""
    real = safe_fs.write_all

    def halting(fd: int, data: bytes, *, fsync: bool = True) -> None:
        real(fd, data[:len(HALF)], fsync=fsync)
        os.write(halted, b"x")
        assert os.read(release, 1) == b"x"
        real(fd, data[len(HALF):], fsync=fsync)

    safe_fs.write_all = halting  # type: ignore[assignment]
    _write(folder, user, rel, WHOLE)


_STARTED: list[multiprocessing.process.BaseProcess] = []


@pytest.fixture(autouse=True)
def _no_child_left() -> Iterator[None]:
    """A child still waiting when a test failed (a writer halted for a release that never comes) is killed."""
    yield
    while _STARTED:
        p = _STARTED.pop()
        if p.is_alive():
            p.kill()
        p.join(30)


def _child(target: Callable[..., None], *args: Any) -> multiprocessing.process.BaseProcess:
    p = CTX.Process(target=target, args=args)
    p.start()
    _STARTED.append(p)
    return p


def _joined(p: multiprocessing.process.BaseProcess) -> int | None:
    p.join(60)
    return p.exitcode


def test_a_killed_writers_temp_is_removed_by_the_next_write_there_and_a_live_ones_is_kept(
        room: tuple[Path, int | None]) -> None:
    folder, user = room
    inbox = folder / "inbox"
    halted, halted_w = os.pipe()
    release_r, release_w = os.pipe()
    never_r, never_w = os.pipe()
    live = _child(_write_halting, str(folder), user, "inbox/live.pdf", halted_w, release_r)
    killed = _child(_write_halting, str(folder), user, "inbox/killed.pdf", halted_w, never_r)
    assert os.read(halted, 1) + os.read(halted, 1) == b"xx"  # both half way through their temps
    temps = {n for n in os.listdir(inbox) if is_temp(n)}
    assert len(temps) == 2
    assert killed.pid is not None
    os.kill(killed.pid, signal.SIGKILL)
    assert _joined(killed) == -signal.SIGKILL
    assert sorted(os.listdir(inbox)) == sorted(temps)  # the killed writer's temp, left

    assert _joined(_child(_write, str(folder), user, "inbox/next.pdf", b"the next file")) == 0  # another process
    left = {n for n in os.listdir(inbox) if is_temp(n)}
    assert len(left) == 1 and left < temps  # the live writer's temp is kept; the leftover is gone
    os.write(release_w, b"x")
    assert _joined(live) == 0
    assert sorted(os.listdir(inbox)) == ["live.pdf", "next.pdf"]
    assert (inbox / "live.pdf").read_bytes() == WHOLE
    for fd in (halted, halted_w, release_r, release_w, never_r, never_w):
        os.close(fd)


def _write_many(folder: str, user: int | None, n: int, started: int) -> None:
    _as(user)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    os.write(started, b"x")
    for i in range(n):
        data = f"version {i}\n".encode() * 100
        safe_fs.write_beneath(fd, "inbox/notes.md", data, fsync=False)
        with open(f"{folder}/inbox/notes.md", "rb") as f:
            assert f.read() == data


def _sweep_until(folder: str, user: int | None, done: int, swept: int) -> None:
    _as(user)
    fd = os.open(f"{folder}/inbox", os.O_RDONLY | os.O_DIRECTORY)
    os.set_blocking(done, False)
    looks = 0
    while True:
        try:
            if os.read(done, 1):
                break
        except BlockingIOError:
            pass
        safe_fs.sweep_temps(fd)
        looks += 1
    os.write(swept, looks.to_bytes(4, "big"))


def test_a_sweep_racing_a_writer_never_takes_its_temp(room: tuple[Path, int | None]) -> None:
    """A sweep in another process, looking again and again while a writer replaces a file 400 times: were a live
    temp ever removed, that write's rename would fail (FileNotFoundError) and the writer exit non-zero."""
    folder, user = room
    started_r, started_w = os.pipe()
    done_r, done_w = os.pipe()
    swept_r, swept_w = os.pipe()
    sweeper = _child(_sweep_until, str(folder), user, done_r, swept_w)
    writer = _child(_write_many, str(folder), user, 400, started_w)
    assert os.read(started_r, 1) == b"x"
    assert _joined(writer) == 0
    os.write(done_w, b"x")
    assert _joined(sweeper) == 0
    assert int.from_bytes(os.read(swept_r, 4), "big") > 0
    assert os.listdir(folder / "inbox") == ["notes.md"]
    for fd in (started_r, started_w, done_r, done_w, swept_r, swept_w):
        os.close(fd)


def test_a_sweep_leaves_what_is_not_a_leftover_temp(room: tuple[Path, int | None]) -> None:
    """Named like a temp but a link, a folder or a FIFO (a room's command may make any of them): left alone, and a
    link's target untouched."""
    folder, user = room
    inbox = folder / "inbox"
    target = folder / "precious.md"
    target.write_text("keep me")
    (inbox / ".x.0123456789ab.tmp").symlink_to(target)
    (inbox / ".y.0123456789ab.tmp").mkdir()
    os.mkfifo(inbox / ".z.0123456789ab.tmp")
    (inbox / ".w.0123456789ab.tmp.md").write_text("not a temp name")
    if user is not None:
        for p in [target, *inbox.iterdir()]:
            os.lchown(p, user, user)

    def sweep(folder: str, user: int | None) -> None:
        _as(user)
        fd = os.open(f"{folder}/inbox", os.O_RDONLY | os.O_DIRECTORY)
        assert safe_fs.sweep_temps(fd) == []

    assert _joined(_child(sweep, str(folder), user)) == 0
    assert len(os.listdir(inbox)) == 4 and target.read_text() == "keep me"
