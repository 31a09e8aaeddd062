"""Where `hermit restore` writes (audit B): never into a folder another user controls — they planted the fixed
temp name `.hermit.env.restore-tmp` and read the keys through it (F1) —, never with the archive's loose modes,
and external trees only with --external, to where the restored config puts them, never over a folder that
has something in it or into a hidden folder of the home folder (F5). Real `hermit backup` / `hermit restore`
subprocesses; the other user is a real second uid (65534) running its own program."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ciguard import need
from prochelpers import PROC_TIMEOUT, python_as, shared_dir

NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}
SECRET = "sk-VICTIM-SECRET-4471"

# The other user's program: makes the folder the owner will restore into (or its parent), and the moment a
# restore starts writing there, plants the name the old restore wrote hermit.env through — world-writable,
# kept open — then reports what it could read.
ATTACKER = r"""
import os, sys, threading
folder = sys.argv[1]
os.mkdir(folder, 0o755)
planted, stop = [], threading.Event()
def plant():
    while not stop.is_set() and not planted:
        for d in (folder, os.path.join(folder, "home")):
            try:
                if os.listdir(d) or sys.argv[2] == "now":
                    fd = os.open(os.path.join(d, ".hermit.env.restore-tmp"), os.O_RDWR | os.O_CREAT, 0o666)
                    os.fchmod(fd, 0o666)
                    planted.append(fd)
                    break
            except OSError:
                pass
threading.Thread(target=plant, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
stop.set()
seen = "".join(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace") for fd in planted)
for root, dirs, files in os.walk(folder):
    for name in files:
        try:
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                seen += f.read()
        except OSError:
            pass
print("SEEN:" + seen.replace("\n", " "), flush=True)
"""


def hermit(home: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    environ.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE", **env)
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=environ, timeout=PROC_TIMEOUT, input=stdin)


@pytest.fixture(scope="module")
def built_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir `old` made by the real `hermit setup` and its `hermit backup` archive, once per module (two
    CLI runs); each test's `archive` is a copy of both."""
    root = tmp_path_factory.mktemp("archive")
    home = root / "old"
    r = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
               "--model", "m", "--api-key-stdin", "--no-check", stdin=SECRET + "\n")
    assert r.returncode == 0, r.stderr
    (home / "workspace" / "MEMORY.md").write_text("- the safe code is 4711\n", encoding="utf-8")
    r = hermit(home, "backup", str(root / "backup.tar.gz"))
    assert r.returncode == 0, r.stderr
    return root


@pytest.fixture
def archive(built_archive: Path, tmp_path: Path) -> Path:
    """This test's own copy (modes and times kept) of the state dir at tmp_path/old and of its archive."""
    shutil.copytree(built_archive / "old", tmp_path / "old", symlinks=True)
    out = tmp_path / "backup.tar.gz"
    shutil.copy2(built_archive / "backup.tar.gz", out)
    return out


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky world-writable folder like /tmp, outside /root so the other uid can reach it."""
    with shared_dir("hermit-restore-") as folder:
        yield folder


@pytest.mark.parametrize("theirs, force", [("the state dir", False), ("its parent", False), ("the state dir", True)])
def test_restore_into_a_folder_another_user_controls_gives_them_nothing(archive: Path, shared: Path,
                                                                        theirs: str, force: bool) -> None:
    """Planted the moment restore starts writing (the auditor's race), or — with --force, which restores into a
    folder that is not empty — before it starts."""
    python = python_as(NOBODY)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    folder = shared / "theirs"
    target = folder if theirs == "the state dir" else folder / "home"
    attacker = subprocess.Popen([python, "-c", ATTACKER, str(folder), "now" if force else "later"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd="/", env={"PATH": "/usr/bin:/bin"}, **NOBODY)  # type: ignore[call-overload]
    try:
        assert attacker.stdout is not None and attacker.stdin is not None
        assert attacker.stdout.readline().strip() == "ready"
        assert os.stat(folder).st_uid == 65534
        deadline = time.monotonic() + PROC_TIMEOUT
        while force and not (folder / ".hermit.env.restore-tmp").exists():
            assert time.monotonic() < deadline, "the other user's program planted nothing"
        r = hermit(target, "restore", str(archive), *(["--force"] if force else []))
        attacker.stdin.write("go\n")
        attacker.stdin.flush()
        seen = attacker.stdout.readline()
    finally:
        attacker.kill()
        attacker.wait(PROC_TIMEOUT)
    print("restore:", r.returncode, r.stdout, r.stderr)
    print("the other user saw:", seen)
    assert SECRET not in seen and "4711" not in seen
    assert r.returncode == 1 and "belongs to another user (uid 65534)" in r.stderr and "Traceback" not in r.stderr
    assert "nothing was written" in r.stderr
    left = [".hermit.env.restore-tmp"] if force else []  # nothing written there, so nothing planted either
    assert sorted(p.name for p in folder.iterdir()) == left


def test_a_state_dir_others_may_write_is_refused(archive: Path, tmp_path: Path) -> None:
    new = tmp_path / "new"
    new.mkdir()
    new.chmod(0o777)
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 1 and "can be written by its group or by others (mode 777)" in r.stderr, r.stderr
    assert list(new.iterdir()) == []


def crafted(path: Path, workspace: Path) -> Path:
    """The auditor's archive: loose modes, and its own hermit.yaml pointing the workspace outside the state dir."""
    def add(tar: tarfile.TarFile, name: str, data: bytes | None = None, mode: int = 0o600) -> None:
        info = tarfile.TarInfo(f"hermit-backup/{name}")
        info.mode = mode
        if data is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            return
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(path, "w:gz") as tar:
        add(tar, "manifest.json", json.dumps({"format": 1}).encode())
        add(tar, "home/agents", mode=0o777)
        add(tar, "home/agents/main", mode=0o777)
        add(tar, "home/hermit.env", b"OPENAI_API_KEY=sk-restored\n", mode=0o666)
        add(tar, "home/tool.sh", b"#!/bin/sh\n", mode=0o777)
        add(tar, "home/hermit.yaml", f"agents:\n  defaults:\n    workspace: {workspace}\n".encode(), mode=0o644)
        add(tar, "external/main/workspace/sub", mode=0o777)
        add(tar, "external/main/workspace/sub/authorized_keys", b"ssh-ed25519 AAAA attacker\n", mode=0o666)
        add(tar, "external/main/workspace/run.sh", b"#!/bin/sh\n", mode=0o777)
    return path


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def test_archive_modes_are_not_taken_and_external_trees_need_the_flag(tmp_path: Path) -> None:
    outside = tmp_path / "notes-ws"
    archive = crafted(tmp_path / "crafted.tar.gz", outside)
    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert modes(new) == {".": 0o700, "agents": 0o700, "agents/main": 0o700, "hermit.env": 0o600,
                          "tool.sh": 0o700, "hermit.yaml": 0o600}
    assert not outside.exists()
    assert "--external" in r.stdout and str(outside) in r.stdout

    r = hermit(new, "restore", str(archive), "--force", "--external")
    assert r.returncode == 0, r.stderr
    assert f"restoring agent main's workspace to {outside}" in r.stdout
    assert (outside / "sub" / "authorized_keys").read_text() == "ssh-ed25519 AAAA attacker\n"
    assert modes(outside) == {".": 0o700, "sub": 0o755, "sub/authorized_keys": 0o644, "run.sh": 0o755}

    again = hermit(new, "restore", str(archive), "--force", "--external")  # never over a folder holding something
    assert again.returncode == 1 and f"{outside} is not empty" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr


def test_external_trees_never_go_into_a_hidden_folder_of_the_home_folder(tmp_path: Path) -> None:
    user_home = tmp_path / "user"
    user_home.mkdir()
    archive = crafted(tmp_path / "crafted.tar.gz", user_home / ".ssh")
    r = hermit(tmp_path / "new", "restore", str(archive), "--external", HOME=str(user_home))
    assert r.returncode == 1 and "hidden folder of your home folder" in r.stderr, r.stderr
    assert not (user_home / ".ssh").exists()
    assert (tmp_path / "new" / "hermit.env").is_file()  # the state dir itself is restored
