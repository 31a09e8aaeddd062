"""The remembered deletes' file (gateway/deletes_store.py): bounded as in memory, expiring, owner-only, safe under a
second process and a kill -9 mid-write, and a damaged or planted file moved aside, never fatal."""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path
from typing import Any

from hermit.gateway.deletes_store import (
    DELETE_KEPT_SECONDS,
    DELETES_KEPT,
    DELETES_PER_SENDER,
    RememberedDeletes,
)

KEY = ("slack", "default", "C1", "1.0")


def test_remembered_deletes_are_bounded_expire_and_are_read_again(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    path = tmp_path / "channels" / "deletes.json"
    store = RememberedDeletes(path, clock=lambda: now[0])
    store.remember(("slack", "default", "C1", "member"), "U7")
    for i in range(DELETES_PER_SENDER + 5):  # a stranger's flood in the same chat evicts only their own
        store.remember(("slack", "default", "C1", f"x{i}"), "stranger")
    again = RememberedDeletes(path, clock=lambda: now[0])
    assert again.deleter(("slack", "default", "C1", "member")) == "U7"
    assert again.deleter(("slack", "default", "C1", "x4")) is None
    assert again.deleter(("slack", "default", "C1", "x5")) == "stranger"
    assert len(again) == 1 + DELETES_PER_SENDER
    for i in range(DELETES_KEPT + 10):  # many senders: the last DELETES_KEPT stay
        again.remember(("slack", "default", f"D{i}", "1"), f"U{i}")
    third = RememberedDeletes(path, clock=lambda: now[0])
    assert len(third) == DELETES_KEPT and third.deleter(("slack", "default", "C1", "member")) is None
    assert third.deleter(("slack", "default", f"D{DELETES_KEPT + 9}", "1")) == f"U{DELETES_KEPT + 9}"
    now[0] += DELETE_KEPT_SECONDS + 1  # past the time its message could still be delivered
    assert third.deleter(("slack", "default", f"D{DELETES_KEPT + 9}", "1")) is None
    assert len(RememberedDeletes(path, clock=lambda: now[0])) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_damaged_or_planted_file_is_moved_aside_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "channels" / "deletes.json"
    path.parent.mkdir()
    path.write_text('{"version": 1, "deletes": [["slack", "default", "C1"')  # torn by hand
    store = RememberedDeletes(path)
    assert len(store) == 0
    [aside] = path.parent.glob("deletes.json.corrupt-*")
    assert aside.read_text().startswith('{"version": 1')
    store.remember(KEY, "U7")
    assert RememberedDeletes(path).deleter(KEY) == "U7"
    target = tmp_path / "elsewhere.json"
    target.write_text(path.read_text())
    path.unlink()
    path.symlink_to(target)  # a link is never followed
    store = RememberedDeletes(path)
    assert len(store) == 0 and not path.is_symlink()
    store.remember(("slack", "default", "C2", "2"), "U8")
    assert not path.is_symlink() and RememberedDeletes(path).deleter(("slack", "default", "C2", "2")) == "U8"
    assert len(list(path.parent.glob("deletes.json.corrupt-*"))) == 2


def _remember_many(path: str, who: str, start: multiprocessing.synchronize.Event, n: int) -> None:
    start.wait(30)
    store = RememberedDeletes(Path(path))
    for i in range(n):
        store.remember(("slack", "default", who, str(i)), who)


def test_two_processes_remembering_at_once_keep_each_others_deletes(tmp_path: Path) -> None:
    path = tmp_path / "channels" / "deletes.json"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_remember_many, args=(str(path), who, start, 40)) for who in ("A", "B")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = RememberedDeletes(path)
    assert len(store) == 80
    assert all(store.deleter(("slack", "default", who, str(i))) == who for who in "AB" for i in range(40))


def _killed_mid_write(path: str, written: int) -> None:
    """Remembers one more delete and stops (SIGSTOP to itself) halfway through writing the new file."""
    import hermit.durable as durable

    real = durable.write_all

    def half(fd: int, data: bytes, *, fsync: bool = True) -> None:
        real(fd, data[: len(data) // 2], fsync=fsync)
        os.write(written, b"x")
        os.kill(os.getpid(), signal.SIGSTOP)

    durable.write_all = half
    RememberedDeletes(Path(path)).remember(("slack", "default", "C1", "new"), "U9")


def test_a_kill_mid_write_leaves_the_old_file_and_the_next_write_sweeps_its_temp(tmp_path: Path) -> None:
    path = tmp_path / "channels" / "deletes.json"
    ctx = multiprocessing.get_context("fork")
    # Each write in a process of its own, as each gateway is: a process sweeps a file's leftover temps once.
    _in_child(ctx, _remember_one, str(path), KEY, "U7")
    before = path.read_bytes()
    r, w = os.pipe()
    child = ctx.Process(target=_killed_mid_write, args=(str(path), w))
    child.start()
    assert os.read(r, 1) == b"x"  # half the new file is written
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    os.close(r)
    os.close(w)
    assert path.read_bytes() == before  # the old file, whole
    assert list(path.parent.glob(".deletes.json.tmp-*"))  # what the killed writer left
    store = RememberedDeletes(path)
    assert store.deleter(KEY) == "U7" and store.deleter(("slack", "default", "C1", "new")) is None
    _in_child(ctx, _remember_one, str(path), ("slack", "default", "C1", "later"), "U7")  # the next gateway
    assert not list(path.parent.glob(".deletes.json.tmp-*"))
    assert RememberedDeletes(path).deleter(KEY) == "U7"


def _remember_one(path: str, key: tuple[str, str, str, str], who: str) -> None:
    RememberedDeletes(Path(path)).remember(key, who)


def _in_child(ctx: Any, target: Any, *args: Any) -> None:
    child = ctx.Process(target=target, args=args)
    child.start()
    child.join(30)
    assert child.exitcode == 0


def test_a_bus_without_a_state_dir_remembers_in_memory(tmp_path: Path) -> None:
    store = RememberedDeletes()
    asyncio.run(asyncio.to_thread(store.remember, KEY, ""))
    assert store.deleter(KEY) == "" and not list(tmp_path.iterdir())


NOBODY = 65534


def _as_nobody(path: str, key: tuple[str, str, str, str]) -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    store = RememberedDeletes(Path(path))
    store.remember(key, "U7")
    assert RememberedDeletes(Path(path)).deleter(key) == "U7"


def test_as_another_user_its_own_file_and_as_root_a_file_that_user_planted_is_moved_aside(tmp_path: Path) -> None:
    if os.geteuid() != 0:  # run unprivileged: this process is the other user
        _remember_one(str(tmp_path / "deletes.json"), KEY, "U7")
        assert stat.S_IMODE((tmp_path / "deletes.json").stat().st_mode) == 0o600
        return
    base = Path(tempfile.mkdtemp(prefix="hermit-deletes-"))  # not under /root: uid 65534 reaches it
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        home.mkdir()
        os.chown(home, NOBODY, NOBODY)
        path = home / "channels" / "deletes.json"
        _in_child(multiprocessing.get_context("fork"), _as_nobody, str(path), KEY)
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o600)
        # The same file read by root (a root-run Hermit given this state dir): another user's, not trusted.
        store = RememberedDeletes(path)
        assert store.deleter(KEY) is None and not path.exists()
        assert list(path.parent.glob("deletes.json.corrupt-*"))
    finally:
        shutil.rmtree(base)
