"""`hermit restore --force` killed (SIGKILL) at several points: the next command that opens the state dir finishes
the restore or rolls it back, says which, and never leaves a mix of the old state and the archive.

The restore stages the archive in `.hermit-restore-<hex>` inside the state dir, then moves each entry over what
is there. Killed during the moves, the state dir held some of the archive's files and some of the old ones (the
old key with the restored config, say), the rest sat in the staging folder, and no command noticed. Now a killed
restore is rolled back while it was still staging, and finished once it had written its ready marker
(restore_journal.py). Played as this process's uid and, when the tests run as root, as uid 65534 too.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from conftest import write
from prochelpers import python_as
from test_backup_live import here
from test_crash_pairing import AS_USERS, _hermit
from test_restore_target import crafted

# Loaded into every Python process the test starts (sitecustomize). HERMIT_TEST_KILL=WHAT:N SIGKILLs the process
# at the N-th: `link` — after a staged file got its name; `move` — before an entry of the stage is renamed into
# place (a rename with src_dir_fd); `rmtree` — before the emptied stage is removed; `ready-unlink` — before its
# marker is removed.
KILLER = """
import os, signal
spec = os.environ.get("HERMIT_TEST_KILL")
if spec:
    what, n = spec.split(":")
    n, seen = int(n), [0]
    def counting(real, before, counts=lambda *a, **k: True):
        def wrapper(*a, **k):
            if not counts(*a, **k):
                return real(*a, **k)
            seen[0] += 1
            if before and seen[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            out = real(*a, **k)
            if seen[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        for can in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks):
            if real in can:
                can.add(wrapper)  # shutil.rmtree asks whether os.unlink takes dir_fd
        return wrapper
    if what == "link":
        import hermit.durable as durable
        durable.NewFile.link = counting(durable.NewFile.link, False)
    elif what == "move":
        os.replace = counting(os.replace, True, lambda *a, **k: "src_dir_fd" in k)
        os.rename = counting(os.rename, True, lambda *a, **k: "src_dir_fd" in k)
    elif what == "rmtree":
        import shutil
        shutil.rmtree = counting(shutil.rmtree, True, lambda *a, **k: "dir_fd" in k)
    elif what == "ready-unlink":
        os.unlink = counting(os.unlink, True, lambda p, *a, **k: str(p).endswith(".ready"))
"""

Snapshot = dict[str, tuple[int, bytes | None]]


def snapshot(home: Path) -> Snapshot:
    """Every file and folder under `home`: mode and content (lock files left out: restore never restores one)."""
    out: Snapshot = {}
    for path in sorted(home.rglob("*")):
        if path.name.endswith(".lock") or path.relative_to(home).parts[0] == "gateway":
            continue
        st = path.lstat()
        out[str(path.relative_to(home))] = (st.st_mode, path.read_bytes() if path.is_file() else None)
    return out


@pytest.fixture(scope="module")
def states() -> Iterator[dict[str, Any]]:
    """An archive, the state dir it is restored over (another key, other notes, files the archive lacks and the
    other way round), and that state dir after a whole `restore --force`: setup, backup and that restore run in
    this process (HOME the state dir's, as `_hermit` gives), the killed restores and what follows them are
    processes."""
    base = Path(tempfile.mkdtemp(prefix="hermit-crash-restore-"))  # not under /root: the other uid reaches it
    try:
        os.chmod(base, 0o755)
        hooks, src = base / "hooks", base / "src"
        hooks.mkdir()
        (hooks / "sitecustomize.py").write_text(KILLER)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HOME", str(src))
            assert here(src, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
                        "--model", "m", "--no-check") == 0
        old = base / "old"
        shutil.copytree(src, old, symlinks=True)
        ws = src / "workspace"
        write(ws / "MEMORY.md", "- RESTORED: the boat is at pier 7\n")
        write(ws / "memory" / "2026-01-05.md", "- RESTORED daily note\n")
        write(ws / "projects" / "plan.md", "- RESTORED project plan\n")
        write(src / "agents" / "main" / "sessions" / "s1.jsonl", '{"type": "session", "id": "s1"}\n')
        write(src / "credentials" / "allow-telegram-default.json", '{"allow": ["42"]}\n')
        write(src / "hermit.env", "OPENAI_API_KEY=sk-RESTORED-1111\n")
        write(old / "workspace" / "MEMORY.md", "- OLD: the boat is at pier 3\n")
        write(old / "workspace" / "memory" / "2025-12-31.md", "- OLD only note\n")
        write(old / "hermit.env", "OPENAI_API_KEY=sk-OLD-2222\n")
        for env in (src / "hermit.env", old / "hermit.env"):
            env.chmod(0o600)  # as setup makes it (a command reading it makes it so)
        archive = base / "backup.tar.gz"
        whole = base / "whole"
        shutil.copytree(old, whole, symlinks=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HOME", str(src))
            assert here(src, "backup", str(archive)) == 0
            mp.setenv("HOME", str(whole))
            assert here(whole, "restore", str(archive), "--force") == 0
        yield {"base": base, "hooks": hooks, "archive": archive, "old": snapshot(old), "old_dir": old,
               "restored": snapshot(whole)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


# (where it is killed, what the next command must do, that command)
POINTS = [
    ("link:3", "rolled back", ["cron", "list"]),
    ("move:1", "finished", ["restore", "ARCHIVE"]),
    ("move:3", "finished", ["cron", "list"]),
    ("move:9", "finished", ["restore", "ARCHIVE"]),
    ("rmtree:1", "finished", ["cron", "list"]),
    ("ready-unlink:1", "", ["cron", "list"]),
]


@pytest.mark.parametrize("as_user", AS_USERS, ids=lambda u: "uid-" + str(u.get("user", os.geteuid())))
@pytest.mark.parametrize(("kill", "outcome", "command"), POINTS, ids=[p[0] for p in POINTS])
def test_a_restore_killed_half_way_is_finished_or_rolled_back_by_the_next_command(
        states: dict[str, Any], as_user: dict[str, Any], kill: str, outcome: str, command: list[str]) -> None:
    python = python_as(as_user)
    need(python is not None, f"an interpreter that can import this checkout as uid {as_user.get('user')}")
    assert python is not None
    case = Path(tempfile.mkdtemp(prefix="case-", dir=states["base"]))
    os.chmod(case, 0o755)
    home, archive = case / "home", case / "backup.tar.gz"
    shutil.copytree(states["old_dir"], home, symlinks=True)
    shutil.copy(states["archive"], archive)
    if as_user:
        for path in [archive, home, *home.rglob("*")]:
            os.lchown(path, as_user["user"], as_user["group"])
    hooks = states["hooks"]

    killed = _hermit(python, home, hooks, as_user, "restore", str(archive), "--force", HERMIT_TEST_KILL=kill)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout, killed.stderr)
    left = [p.name for p in home.iterdir() if p.name.startswith(".hermit-restore-")]
    assert left, "the kill left no trace of the restore"
    if kill == "move:3":  # the window: part of the archive is in place, part is not
        now = snapshot(home)
        assert now["agents/main/sessions/s1.jsonl"] == states["restored"]["agents/main/sessions/s1.jsonl"]
        assert now["hermit.env"] == states["old"]["hermit.env"]

    args = [str(archive) if a == "ARCHIVE" else a for a in command]
    after = _hermit(python, home, hooks, as_user, *args)
    if command[0] == "restore":
        assert after.returncode == 1 and "is not empty" in after.stderr, after.stderr  # then it refused, as always
    else:
        assert after.returncode == 0, after.stderr
    assert "Traceback" not in after.stderr
    expected = states["old"] if outcome == "rolled back" else states["restored"]
    assert snapshot(home) == expected
    assert not [p.name for p in home.iterdir() if p.name.startswith(".hermit-restore-")]
    if outcome:
        assert f"interrupted {'before it changed' if outcome == 'rolled back' else 'half-way'}" in after.stderr
        assert outcome in after.stderr, after.stderr
    # Nothing left to do: the command after that says nothing of a restore.
    again = _hermit(python, home, hooks, as_user, "cron", "list")
    assert again.returncode == 0 and "restore" not in again.stderr, again.stderr


def test_an_external_workspace_killed_while_staged_is_restored_whole_by_the_next_restore(
        states: dict[str, Any], tmp_path: Path) -> None:
    """An external workspace restored into an empty folder: staged next to it and renamed over it, so a kill while
    staging leaves it empty (it used to hold part of the archive and the staging folder, and every later restore
    refused it as not empty); the next restore removes the dead stage, says so, and restores it."""
    outside = tmp_path / "notes-ws"
    outside.mkdir(mode=0o700)
    archive = crafted(tmp_path / "crafted.tar.gz", outside)
    home, hooks = tmp_path / "home", states["hooks"]
    # The state dir's three files are staged first; killed once the workspace's first file is.
    killed = _hermit(sys.executable, home, hooks, {}, "restore", str(archive), "--external", HERMIT_TEST_KILL="link:4")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout, killed.stderr)
    assert (home / "hermit.env").is_file() and list(outside.iterdir()) == []

    again = _hermit(sys.executable, home, hooks, {}, "restore", str(archive), "--force", "--external")
    assert again.returncode == 0, again.stderr
    assert "interrupted before it changed anything there; rolled back" in again.stderr
    assert (outside / "sub" / "authorized_keys").read_text() == "ssh-ed25519 AAAA attacker\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hermit-restore-")]


def test_a_restore_that_cannot_be_finished_stops_every_command_until_it_can(states: dict[str, Any]) -> None:
    """Killed half-way, then something stands where the rest must go (a file where the archive's folder is merged):
    no command runs on the mix; each says what is in the way and where the rest waits. Moved away, the next
    command finishes the restore."""
    case = Path(tempfile.mkdtemp(prefix="case-", dir=states["base"]))
    home, hooks = case / "home", states["hooks"]
    shutil.copytree(states["old_dir"], home, symlinks=True)
    killed = _hermit(sys.executable, home, hooks, {}, "restore", str(states["archive"]), "--force",
                     HERMIT_TEST_KILL="move:3")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    shutil.move(home / "workspace", case / "workspace-aside")
    (home / "workspace").write_text("in the way\n")
    for command in (["cron", "list"], ["backup", str(case / "b.tar.gz")]):
        stopped = _hermit(sys.executable, home, hooks, {}, *command)
        assert stopped.returncode == 1 and "interrupted half-way and cannot be finished" in stopped.stderr
        assert f"{home / 'workspace'} is a file; the archive has a folder there" in stopped.stderr
        assert "Traceback" not in stopped.stderr and not (case / "b.tar.gz").exists()
    (home / "workspace").unlink()
    shutil.move(case / "workspace-aside", home / "workspace")
    done = _hermit(sys.executable, home, hooks, {}, "cron", "list")
    assert done.returncode == 0 and "finished it" in done.stderr, done.stderr
    assert snapshot(home) == states["restored"]
