"""`hermit backup` into a directory other users can write (/tmp): a name planted there first — the old fixed
temp name `.<file>.partial` as the planter's own file or as a symlink, or the archive's own name as a symlink —
never gets the archive (whose keys and notes the planter would then own) and never makes Hermit write
through a link. Real `hermit backup` subprocesses, a sticky world-writable folder standing in for /tmp."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from prochelpers import PROC_TIMEOUT

NOBODY = 65534


def hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, input=stdin)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    r = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
               "--model", "m", "--api-key-stdin", "--no-check", stdin="sk-planted-test-key\n")
    assert r.returncode == 0, r.stderr
    (home / "workspace" / "MEMORY.md").write_text("- the safe code is 4711\n", encoding="utf-8")
    return home


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)  # like /tmp
    return folder


def plant_own_file(path: Path) -> None:
    """The planter's regular file, world-writable; another user's when the test runs as root."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.close(fd)
    os.chmod(path, 0o666)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)


def assert_ours_and_whole(archive: Path) -> None:
    st = os.lstat(archive)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600
    with tarfile.open(archive) as tar:
        assert "hermit-backup/home/workspace/MEMORY.md" in tar.getnames()


def test_a_planted_temp_name_gets_nothing(home: Path, shared: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("must not change\n")
    plant_own_file(shared / ".bk1.tar.gz.partial")
    (shared / ".bk2.tar.gz.partial").symlink_to(victim)

    for name in ("bk1.tar.gz", "bk2.tar.gz"):
        r = hermit(home, "backup", str(shared / name))
        assert r.returncode == 0, r.stderr
        assert_ours_and_whole(shared / name)
    assert os.path.getsize(shared / ".bk1.tar.gz.partial") == 0  # the planted file got not one byte
    assert victim.read_text() == "must not change\n"
    leftovers = sorted(p.name for p in shared.iterdir())
    assert leftovers == [".bk1.tar.gz.partial", ".bk2.tar.gz.partial", "bk1.tar.gz", "bk2.tar.gz"]


def test_the_archives_own_name_planted_is_refused(home: Path, shared: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("must not change\n")
    (shared / "bk.tar.gz").symlink_to(victim)
    (shared / "dangling.tar.gz").symlink_to(tmp_path / "nothing-here")
    plant_own_file(shared / "theirs.tar.gz")
    for name in ("bk.tar.gz", "dangling.tar.gz", "theirs.tar.gz"):
        r = hermit(home, "backup", str(shared / name))
        assert r.returncode == 1 and "exists" in r.stderr and "never overwrites" in r.stderr, (name, r.stderr)
    assert victim.read_text() == "must not change\n" and not (tmp_path / "nothing-here").exists()
    assert os.path.getsize(shared / "theirs.tar.gz") == 0


def test_without_o_tmpfile_a_random_exclusive_name_is_used_and_removed(shared: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback for file systems without O_TMPFILE: mkstemp's random O_EXCL|O_NOFOLLOW name, linked into
    place and removed; the old fixed name planted as a symlink is not touched."""
    from hermit.cli.backup import write_new_file

    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    (shared / ".out.bin.partial").symlink_to(shared / "target")
    write_new_file(shared / "out.bin", lambda raw: raw.write(b"archive bytes"))
    st = os.lstat(shared / "out.bin")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1
    assert (shared / "out.bin").read_bytes() == b"archive bytes" and not (shared / "target").exists()
    assert sorted(p.name for p in shared.iterdir()) == [".out.bin.partial", "out.bin"]
