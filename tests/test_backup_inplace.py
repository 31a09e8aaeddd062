"""`hermit backup` against a writer that saves a file in place (truncate, then write), at the exact points
that lost a note (CI flake of test_backup_live.py's real writer): the backup's read and its re-check both fell
between the truncate and the write, saw a stable empty file, stored it and never looked again — exit 0, the
note '' in the archive. Now every stored file is looked at again once all are written, and one changed since
is stored again as a later member, which `restore` (and `tar -x`) take. And a state dir that does not exist
or holds nothing of Hermit's (a mistyped HERMIT_HOME) is refused by `backup`, its archive by `restore`.

Real `hermit backup` / `hermit restore` processes on real files; the writer acts under a hook (os.fdopen
wrapped in the backup process, as in test_backup_live.py) at a named read of a named file, never by timing.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from prochelpers import PROC_TIMEOUT
from test_backup_live import NEW_TEXT, NOTE, big_note, env, here, hermit, members

# Runs `hermit ARGS` with os.fdopen wrapped: at the first read() of each file named in BACKUP_STEPS, before
# that read, its step acts once — "truncate" empties `target` in place, "write" writes `text` into `target`
# in place (no truncate: the second half of an editor's save), "churn" from then on rewrites `target` in place
# (its letters' case swapped, the same length) each time the backup looks at it (os.lstat): it changes after
# every version stored; "grow" appends a line instead (a transcript being written), which is not named.
HOOK = r"""
import json, os, sys
spec = json.loads(os.environ["BACKUP_STEPS"])
real_fdopen, real_lstat = os.fdopen, os.lstat
done = set()
churned = []
grown = []

def lstat(path, *args, **kwargs):
    if str(path) in grown:
        with open(path, "ab") as f:
            f.write(b"- one more line\n")
    if str(path) in churned:  # rewritten in place, the same length: not an append
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(data.swapcase())
    return real_lstat(path, *args, **kwargs)

def act(i, step):
    if i in done:
        return
    done.add(i)
    with open(spec["fired"], "a") as f:
        f.write(step["act"] + "\n")
    if step["act"] == "truncate":
        with open(step["target"], "r+b") as f:
            f.truncate(0)
    elif step["act"] == "write":
        with open(step["target"], "r+b") as f:
            f.write(step["text"].encode())
    elif step["act"] == "churn":
        churned.append(step["target"])
    elif step["act"] == "grow":
        grown.append(step["target"])

class Hooked:
    def __init__(self, f, path):
        self._f, self._path = f, path
    def read(self, *args):
        for i, step in enumerate(spec["steps"]):
            if step["on"] == self._path:
                act(i, step)
        return self._f.read(*args)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def fdopen(fd, mode="r", *args, **kwargs):
    f = real_fdopen(fd, mode, *args, **kwargs)
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f
    return Hooked(f, path) if mode == "rb" and any(s["on"] == path for s in spec["steps"]) else f

os.fdopen, os.lstat = fdopen, lstat
from hermit.cli.main import main
sys.exit(main())
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir made by the real `hermit init` (in this process), with a large note and eighteen small ones,
    once per module."""
    home = tmp_path_factory.mktemp("backup-inplace") / "old"
    assert here(home, "init") == 0
    mem = home / "workspace" / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    big_note(mem / "2026-01-01.md")
    for d in range(2, 20):
        (mem / f"2026-01-{d:02d}.md").write_text(f"# day {d}\n\n- important note of day {d}\n")
    return home


@pytest.fixture
def home(made: Path, tmp_path: Path) -> Path:
    """This test's own copy (modes and times kept) of `made`."""
    shutil.copytree(made, tmp_path / "old", symlinks=True)
    return tmp_path / "old"


def stepped_backup(home: Path, archive: Path, steps: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """`hermit backup ARCHIVE` under HOOK; asserts every step acted."""
    fired = archive.parent / "steps-fired"
    fired.unlink(missing_ok=True)
    spec = {"steps": steps, "fired": str(fired)}
    r = subprocess.run([sys.executable, "-c", HOOK, "backup", str(archive)], capture_output=True, text=True,
                       env=env(home, BACKUP_STEPS=json.dumps(spec)), timeout=PROC_TIMEOUT)
    print("backup:", r.returncode, r.stdout, r.stderr)
    acted = fired.read_text().split() if fired.exists() else []
    assert acted == [s["act"] for s in steps], f"the hook acted {acted}: the backup no longer reads files as it did"
    return r


def versions(archive: Path, name: str) -> list[bytes]:
    """Every member stored under `name`, in archive order."""
    with tarfile.open(archive) as tar:
        return [tar.extractfile(m).read() for m in tar if m.name == name]  # type: ignore[union-attr]


def test_a_save_in_place_whose_truncate_and_write_straddle_the_copy_is_stored_as_the_new_text(
        home: Path, tmp_path: Path) -> None:
    """The flake, at its exact points: the note is emptied just before the backup reads it (the backup reads
    it again and finds it stable, and empty), and the editor's write lands when the backup has moved on to the
    next note."""
    mem = home / "workspace" / "memory"
    note = str(mem / "2026-01-01.md")
    archive = tmp_path / "b.tar.gz"
    r = stepped_backup(home, archive, [{"act": "truncate", "on": note, "target": note},
                                       {"act": "write", "on": str(mem / "2026-01-02.md"), "target": note,
                                        "text": NEW_TEXT}])
    assert r.returncode == 0, r.stderr
    assert (mem / "2026-01-01.md").read_text() == NEW_TEXT  # the save finished, in place
    stored = versions(archive, NOTE.format(1))
    assert stored[-1] == NEW_TEXT.encode(), stored[-1][:80]  # the last member of the name is the saved note
    assert stored == [b"", NEW_TEXT.encode()]  # the empty one was stored first: the backup saw the gap
    files = members(archive)  # reads every member back
    assert all(NOTE.format(d) in files for d in range(1, 20))
    assert "2026-01-01.md" not in r.stdout + r.stderr

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"restored {len([m for m in files if not m.endswith('manifest.json')])} files")
    assert (new / "workspace" / "memory" / "2026-01-01.md").read_text() == NEW_TEXT
    assert (new / "workspace" / "memory" / "2026-01-19.md").read_text() == "# day 19\n\n- important note of day 19\n"

    need(shutil.which("tar") is not None, "tar")
    plain = tmp_path / "plain"
    plain.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(plain)], check=True, timeout=PROC_TIMEOUT)
    assert (plain / NOTE.format(1)).read_text() == NEW_TEXT  # tar's own rule: the last member wins


def test_a_file_that_keeps_changing_in_place_after_it_was_stored_is_named_and_the_backup_fails(
        home: Path, tmp_path: Path) -> None:
    mem = home / "workspace" / "memory"
    note = str(mem / "2026-01-03.md")
    archive = tmp_path / "b.tar.gz"
    r = stepped_backup(home, archive, [{"act": "churn", "on": str(mem / "2026-01-02.md"), "target": note}])
    assert r.returncode == 1
    assert "workspace/memory/2026-01-03.md (" in r.stderr and "may not be stored whole" in r.stderr, r.stderr
    assert "run `hermit backup` again" in r.stderr and "Traceback" not in r.stderr
    files = members(archive)  # kept, readable, with everything
    assert all(NOTE.format(d) in files for d in range(1, 20))
    assert len(versions(archive, NOTE.format(3))) > 1  # it was stored again, and again


def test_a_file_only_appended_to_while_the_backup_runs_is_kept_and_the_backup_succeeds(
        home: Path, tmp_path: Path) -> None:
    """A transcript or daily log a running Hermit keeps appending to: each version stored is a whole earlier
    one, so the backup does not fail for it however long the appends go on."""
    mem = home / "workspace" / "memory"
    note = mem / "2026-01-03.md"
    before = note.read_bytes()
    archive = tmp_path / "b.tar.gz"
    r = stepped_backup(home, archive, [{"act": "grow", "on": str(mem / "2026-01-02.md"), "target": str(note)}])
    assert r.returncode == 0, r.stderr
    stored = versions(archive, NOTE.format(3))
    assert len(stored) > 1 and all(v.startswith(before) for v in stored)  # stored again as it grew, each whole
    assert all(NOTE.format(d) in members(archive) for d in range(1, 20))


def test_backup_of_a_missing_or_empty_state_dir_is_refused_with_the_path_looked_at(tmp_path: Path) -> None:
    typo = tmp_path / "home-typo"
    r = hermit(typo, "backup", str(tmp_path / "x.tar.gz"))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout
    assert f"nothing to back up: {typo} does not exist (from HERMIT_HOME={typo}, which may be mistyped)" in r.stderr
    assert "wrote" not in r.stdout and not (tmp_path / "x.tar.gz").exists()

    empty = tmp_path / "empty"
    (empty / "logs").mkdir(parents=True, mode=0o700)
    empty.chmod(0o700)
    (empty / "logs" / "gateway.log").write_text("only a log\n")
    r = hermit(empty, "backup", str(tmp_path / "y.tar.gz"))
    assert r.returncode == 1, r.stdout
    assert f"{empty} holds no Hermit state (no hermit.yaml, no workspace)" in r.stderr
    assert not (tmp_path / "y.tar.gz").exists()

    (empty / "workspace").mkdir(mode=0o700)  # a workspace without a config is still a Hermit's
    (empty / "workspace" / "MEMORY.md").write_text("# Long-term\n")
    r = hermit(empty, "backup", str(tmp_path / "z.tar.gz"))
    assert r.returncode == 0, r.stderr
    assert members(tmp_path / "z.tar.gz")["hermit-backup/home/workspace/MEMORY.md"] == b"# Long-term\n"


def test_restore_of_an_archive_without_hermit_state_is_refused(tmp_path: Path) -> None:
    """What a backup of a mistyped HERMIT_HOME wrote before it was refused: a manifest and nothing else."""
    archive = tmp_path / "x.tar.gz"
    manifest = json.dumps({"format": 1, "created": "2026-12-05T05:00:00+0000", "home": str(tmp_path / "home-typo"),
                           "agents": ["main"], "external": {}, "links": []}).encode()
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("hermit-backup/manifest.json")
        info.size, info.mode = len(manifest), 0o600
        tar.addfile(info, io.BytesIO(manifest))
    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout
    assert "holds no Hermit state (no hermit.yaml, no workspace file); nothing was restored" in r.stderr
    assert "HERMIT_HOME" in r.stderr and "restored" not in r.stdout
    assert not new.exists()
    assert not os.path.lexists(new)
