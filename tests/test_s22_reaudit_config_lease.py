"""Re-audit s22 (t11) of the config read lease (config/load.writer_holds, t4): a hermit.yaml some program holds open
for writing is not read as settled, and after 1 s the read fails (the gateway fails closed).

- Closed again without a further write (a slow download or decrypt into the file, `exec 3>>hermit.yaml`, an fsync
  longer than the 2 s a key is too recent to trust), the file's key was what it was at the failed read, so the
  running gateway never read it again: no channel sender was an owner or a contact, and nothing scheduled was
  delivered, until the next edit. Now a config that failed as held open is read again once nobody holds it.
- While it stayed held, every look within those 2 s read it again and waited the full second each time — on the
  event loop, for a web chat message (routed by `owner_view`, which asks the config in force first). Now a look
  while it is still held asks only the kernel (one lease, microseconds) and keeps the failure.
- Held: the lease is granted as root and as uid 65534 on the user's own file (tmpfs and overlayfs alike), and on a
  file it may not lease (another user's) the answer is "cannot tell", never a failure.
Real files under tmp_path, the real loader and LiveConfig, real writers (this process's descriptors, a child
process for uid 65534).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config
from hermit.config.load import LoadedConfig, writer_holds
from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveAccess, LiveConfig
from hermit.memory.policy.audience import RACY_NS
from test_audit21_reaudit_config_routes import config, home_fixture, save

__all__ = ["home_fixture"]


class CountingLoad:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, paths: StatePaths) -> LoadedConfig:
        self.calls += 1
        return load_config(paths)


def test_a_config_held_open_past_the_racy_window_and_closed_unchanged_is_read_again(home: Path) -> None:
    live = LiveConfig(save(home, config(home)), clock=lambda: os.stat(home / "hermit.yaml").st_ctime_ns + RACY_NS * 5)
    access = LiveAccess(live, PairingStore(home / "pairing"), lambda: 0.0)
    assert access.is_owner("telegram", "default", "1001", None)
    fd = os.open(home / "hermit.yaml", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"\n")  # a save in place, not closed yet
        with pytest.raises(ConfigError, match="being saved"):
            live.current()
        assert not access.is_owner("telegram", "default", "1001", None)  # fails closed meanwhile
    finally:
        os.close(fd)  # closed, nothing more written: the key stays as it was at the failed read
    live.current()  # raised "being saved" until the next edit
    assert access.is_owner("telegram", "default", "1001", None)  # was False until the next edit


def test_looks_while_the_file_stays_held_do_not_each_wait_a_second(home: Path) -> None:
    load = CountingLoad()
    written = os.stat(save(home, config(home)).source or home / "hermit.yaml")
    live = LiveConfig(load_config(StatePaths(home)), load=load, clock=lambda: written.st_ctime_ns)  # always racy
    live.current()
    fd = os.open(home / "hermit.yaml", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"\n")
        for _ in range(3):
            with pytest.raises(ConfigError, match="being saved"):
                live.current()
        assert load.calls == 2, load.calls  # the first look, and the first during the save (3 + 1 before: 1 s each)
    finally:
        os.close(fd)
    assert live.current() is not None and load.calls == 3


def _lease_answers(path: Path) -> tuple[bool | None, bool | None]:
    st = os.stat(path)
    free = writer_holds(path, st)
    fd = os.open(path, os.O_WRONLY)
    try:
        return free, writer_holds(path, st)
    finally:
        os.close(fd)


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])  # the disk's filesystem, and tmpfs
def test_the_lease_answers_as_root_and_as_another_user_on_their_own_file(where: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="hermit-lease-", dir=where))  # tmp_path's parents are root's only
    try:
        path = folder / "hermit.yaml"
        path.write_text("agents: {}\n")
        assert _lease_answers(path) == (False, True)  # root (CAP_LEASE), its own file
        os.chmod(folder, 0o777)
        path.chmod(0o666)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # uid 65534: its own file answers; root's file (no lease for it) cannot tell
            code = 1
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                mine = folder / "mine.yaml"
                mine.write_text("agents: {}\n")
                answers = (*_lease_answers(mine), *_lease_answers(path))
                os.write(w, repr(answers).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as f:
            got = f.read()
        assert os.waitpid(pid, 0)[1] == 0
        assert got == repr((False, True, None, None)), got
    finally:
        shutil.rmtree(folder)
