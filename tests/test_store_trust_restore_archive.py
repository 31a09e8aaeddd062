"""`hermit restore` takes the config, keys and notes of an archive only from a file nobody else could have
written: whoever can write the archive chooses hermit.yaml (the owner ids of every channel, the model
server), hermit.env and MEMORY.md of the restored Hermit — the owner's backup kept in a shared folder, and
swapped or rewritten there by another local user, would make that user the assistant's owner. An archive
another user owns, or one its group or others may write, is refused before anything is written; the owner
copies it to a file of their own once they know where it came from. Real `hermit backup` / `hermit restore`
subprocesses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ciguard import need
from test_restore_target import archive, built_archive, hermit  # noqa: F401 - the fixtures are used by name

NOBODY_UID = 65534


def refused(r: object, home: Path, why: str) -> None:
    rc, err = r.returncode, r.stderr  # type: ignore[attr-defined]
    assert rc == 1, (rc, err)
    assert why in err and "Traceback" not in err, err
    assert not home.exists(), sorted(home.rglob("*"))  # nothing written, not even the state dir


def test_an_archive_another_user_owns_is_refused(archive: Path, tmp_path: Path) -> None:  # noqa: F811
    need(os.geteuid() == 0, "root, to give the archive to another uid")
    os.chown(archive, NOBODY_UID, NOBODY_UID)
    home = tmp_path / "new"
    refused(hermit(home, "restore", str(archive)), home, f"belongs to another user (uid {NOBODY_UID})")


@pytest.mark.parametrize("mode", [0o666, 0o646])
def test_an_archive_others_may_write_is_refused(archive: Path, tmp_path: Path, mode: int) -> None:  # noqa: F811
    os.chmod(archive, mode)
    home = tmp_path / "new"
    refused(hermit(home, "restore", str(archive)), home, "can be written by")


def test_an_archive_of_ones_own_restores(archive: Path, tmp_path: Path) -> None:  # noqa: F811
    os.chmod(archive, 0o644)  # a copy made with cp under umask 022
    home = tmp_path / "new"
    r = hermit(home, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert "4711" in (home / "workspace" / "MEMORY.md").read_text(encoding="utf-8")
