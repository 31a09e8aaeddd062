"""Re-audit of the restore journal (restore_journal.py): what another local user can do with names shaped like a
killed restore's in the folders a restore finishes or rolls back in.

A fresh restore (into a folder that does not exist yet) stages next to it, in its parent: a shared sticky folder
such as /tmp is allowed. A restore killed there leaves its stage (the user's, 0700) in that shared folder, and the
next restore there removes it. Another user could put a `.hermit-restore-<hex>.ready` of theirs (a file, a link
or a folder) next to it: the marker turned the rollback into a move of the user's staged keys and config into
the shared folder (and, run as root, that folder made 0700: /tmp closed to everyone), or stopped the restore
with a traceback. In a parent others may write without the sticky bit, they could give any folder of the user's
a stage's name, and the next restore there removed it. Played as this process's uid and, when the tests run as
root, as uid 65534 too (another uid planting).
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import python_as, shared_dir
from test_crash_pairing import AS_USERS, _hermit
from test_crash_restore import KILLER
from test_restore_target import crafted

STAGE = ".hermit-restore-"


def _uid(as_user: dict[str, Any]) -> int:
    return int(as_user.get("user", os.geteuid()))


# (the user restoring, the other user planting): the other one is always another uid.
PAIRS = [(u, 65534 if not u else 65533) for u in AS_USERS]
IDS = [f"uid-{_uid(u)}-planted-by-{other}" for u, other in PAIRS]


@pytest.fixture
def shared() -> Iterator[Path]:
    with shared_dir("hermit-reaudit2-") as folder:
        yield folder


def _setup(shared: Path, as_user: dict[str, Any]) -> tuple[str, Path, Path]:
    """The interpreter for `as_user`, the killer hooks and an archive of theirs (outside the shared folder's top)."""
    python = python_as(as_user)
    need(python is not None, f"an interpreter that can import this checkout as uid {_uid(as_user)}")
    assert python is not None
    mine = shared / "mine"
    mine.mkdir(mode=0o755)
    hooks = mine / "hooks"
    hooks.mkdir(mode=0o755)
    (hooks / "sitecustomize.py").write_text(KILLER)
    archive = crafted(mine / "backup.tar.gz", mine / "ws")
    if as_user:
        os.chown(archive, as_user["user"], as_user["group"])
        os.chown(mine, as_user["user"], as_user["group"])
    return python, hooks, archive


def _killed_fresh_restore(python: str, hooks: Path, archive: Path, as_user: dict[str, Any], target: Path) -> str:
    """A restore into the new folder `target`, killed while staging: its stage stays in target's parent."""
    killed = _hermit(python, target, hooks, as_user, "restore", str(archive), HERMIT_TEST_KILL="link:2")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout, killed.stderr)
    stages = [p.name for p in target.parent.iterdir() if p.name.startswith(STAGE)]
    assert len(stages) == 1 and (target.parent / stages[0] / "hermit.env").is_file(), stages
    return stages[0]


def _plant(path: Path, kind: str, uid: int) -> None:
    if kind == "file":
        path.write_text('{"private": true}\n')
    elif kind == "link":
        path.symlink_to("/etc/hostname")
    else:
        path.mkdir()
    os.lchown(path, uid, uid)


@pytest.mark.parametrize("kind", ["file", "link", "folder"])
@pytest.mark.parametrize(("as_user", "other"), PAIRS, ids=IDS)
def test_a_marker_another_user_plants_next_to_a_dead_stage_is_no_marker(
        shared: Path, as_user: dict[str, Any], other: int, kind: str) -> None:
    """The dead stage is rolled back (removed) as it would have been; nothing of it lands in the shared folder, the
    folder keeps its mode, the restore goes on, and the other user's file stays where they put it."""
    need(os.geteuid() == 0, "root, to play another uid planting a file")
    python, hooks, archive = _setup(shared, as_user)
    stage = _killed_fresh_restore(python, hooks, archive, as_user, shared / "first")
    planted = shared / f"{stage}.ready"
    _plant(planted, kind, other)

    done = _hermit(python, shared / "second", hooks, as_user, "restore", str(archive))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "interrupted before it changed anything there; rolled back" in done.stderr, done.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert sorted(p.name for p in shared.iterdir()) == sorted(["mine", "second", planted.name])
    assert planted.lstat().st_uid == other
    assert (shared / "second" / "hermit.env").read_text() == "OPENAI_API_KEY=sk-restored\n"


@pytest.mark.parametrize(("as_user", "other"), PAIRS, ids=IDS)
def test_a_marker_of_another_user_without_its_stage_is_left_alone(
        shared: Path, as_user: dict[str, Any], other: int) -> None:
    """A lone `.hermit-restore-<hex>.ready` of another user's in /tmp: not removed (a user could not remove it
    from a sticky folder: every restore into a new folder there stopped with a traceback), and the restore runs."""
    need(os.geteuid() == 0, "root, to play another uid planting a file")
    python, hooks, archive = _setup(shared, as_user)
    planted = shared / f"{STAGE}0123456789abcdef.ready"
    _plant(planted, "file", other)

    done = _hermit(python, shared / "home", hooks, as_user, "restore", str(archive))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert planted.read_text() == '{"private": true}\n' and planted.stat().st_uid == other
    assert (shared / "home" / "hermit.env").is_file()


@pytest.mark.parametrize("as_user", AS_USERS, ids=lambda u: f"uid-{_uid(u)}")
def test_a_folder_renamed_to_a_stage_in_a_folder_others_may_write_is_not_removed(as_user: dict[str, Any]) -> None:
    """A parent every user may write without the sticky bit: anyone can rename the user's folder there to a stage's
    name (not remove what is in it). The restore into a new folder there is refused, as before — and no longer
    removes that folder first, as a dead restore's."""
    python = python_as(as_user)
    need(python is not None, f"an interpreter that can import this checkout as uid {_uid(as_user)}")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="hermit-reaudit2-"))
    try:
        os.chmod(base, 0o755)
        mine, drop = base / "mine", base / "drop"
        mine.mkdir(mode=0o755)
        drop.mkdir()
        drop.chmod(0o777)  # not sticky
        archive = crafted(mine / "backup.tar.gz", mine / "ws")
        project = drop / "project"
        project.mkdir()
        (project / "notes.md").write_text("- the user's own notes\n")
        if as_user:
            for path in (mine, archive, project, project / "notes.md"):
                os.chown(path, as_user["user"], as_user["group"])
        renamed = drop / f"{STAGE}0123456789abcdef"
        project.rename(renamed)  # what the other user can do there

        done = _hermit(python, drop / "home", mine, as_user, "restore", str(archive))
        assert done.returncode == 1 and "can be written by" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "rolled back" not in done.stderr
        assert (renamed / "notes.md").read_text() == "- the user's own notes\n"
    finally:
        shutil.rmtree(base, ignore_errors=True)


UNPRIVILEGED = AS_USERS[-1]  # uid 65534 when the tests run as root (root writes into a read-only folder)


def test_a_dead_stage_in_a_state_dir_that_cannot_be_written_does_not_stop_commands(shared: Path) -> None:
    """A state dir made read-only (0500) holding a stage killed before its marker: the folder is as it was
    before that restore, so commands run, saying the copy could not be removed (it was a traceback each time)."""
    python, hooks, archive = _setup(shared, UNPRIVILEGED)
    home = shared / "home"
    restored = _hermit(python, home, hooks, UNPRIVILEGED, "restore", str(archive))
    assert restored.returncode == 0, restored.stderr
    dead = home / f"{STAGE}0123456789abcdef"
    dead.mkdir(mode=0o700)
    (dead / "hermit.env").write_text("OPENAI_API_KEY=sk-half-staged\n")
    if UNPRIVILEGED:
        for path in (dead, dead / "hermit.env"):
            os.chown(path, UNPRIVILEGED["user"], UNPRIVILEGED["group"])
    home.chmod(0o500)
    try:
        done = _hermit(python, home, hooks, UNPRIVILEGED, "cron", "list")
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "could not be removed" in done.stderr and "is as it was before that restore" in done.stderr
        assert dead.is_dir()  # what it held may be gone: it is only that restore's copy
    finally:
        home.chmod(0o700)
    again = _hermit(python, home, hooks, UNPRIVILEGED, "cron", "list")
    assert again.returncode == 0 and "rolled back" in again.stderr, again.stderr
    assert not dead.exists() and (home / "hermit.env").read_text() == "OPENAI_API_KEY=sk-restored\n"
