"""`hermit restore --force` over a state dir a gateway is running on is refused, and a gateway cannot start
while it runs: the gateway keeps the keys, tokens, channel accounts and agents it started with while their
files change under it, applies the access fields (owners, contacts) of the archive's config at once, and
turns in flight append to transcripts and notes the restore is replacing — a mix of two Hermits, and a
reply written into a file the restore then replaces is lost. The gateway's own lock (gateway/gateway.lock)
is what says one runs; restore holds it while it writes."""

from __future__ import annotations

import os
from pathlib import Path

from hermit.gateway.state import GatewayLock, GatewayLocked
from test_restore_target import archive, built_archive, hermit  # noqa: F401 - the fixtures are used by name


def test_restore_force_over_a_running_gateway_is_refused(archive: Path, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "old"  # the state dir the archive was made from, still in use
    memory = home / "workspace" / "MEMORY.md"
    memory.write_text("- written after the backup: the new safe code is 9000\n", encoding="utf-8")
    gateway = GatewayLock.acquire(home)  # what `hermit gateway run` holds while it runs
    try:
        r = hermit(home, "restore", str(archive), "--force")
    finally:
        gateway.release()
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"pid {os.getpid()}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "nothing was restored" in r.stderr
    assert "9000" in memory.read_text(encoding="utf-8")  # untouched
    assert not [p for p in home.iterdir() if p.name.startswith(".hermit-restore-")]

    r = hermit(home, "restore", str(archive), "--force")  # once it is stopped
    assert r.returncode == 0, r.stderr
    assert "4711" in memory.read_text(encoding="utf-8")


def test_a_gateway_cannot_start_while_a_restore_holds_the_state_dir(tmp_path: Path) -> None:
    from hermit.cli.backup_restore import hold_gateway_lock

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "hermit.yaml").write_text("{}\n", encoding="utf-8")
    held = hold_gateway_lock(home)
    assert held is not None
    try:
        try:
            GatewayLock.acquire(home)
        except GatewayLocked:
            pass
        else:
            raise AssertionError("a gateway started on a state dir being restored")
    finally:
        held.release()
    GatewayLock.acquire(home).release()
    assert hold_gateway_lock(tmp_path / "missing") is None  # a new state dir: nothing can run on it
