"""Before `hermit init` and in broken environments, every command says what to do and creates nothing. The
commands asserted on are subprocesses; an `init` or `index` that only sets up a state dir runs in this process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ciguard import need
from clihere import hermit_here
from conftest import write
from prochelpers import PROC_TIMEOUT

_KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY")

COMMANDS = [
    ("memory", "watch"),
    ("memory", "search", "anything"),
    ("memory", "search", "anything", "--json"),
    ("memory", "status"),
    ("memory", "get", "MEMORY.md"),
    ("memory", "index"),
    ("agent", "-m", "hello"),
    ("chat",),
    ("sessions", "list"),
    ("sessions", "show", "agent:main:main"),
]


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARS}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return env


def run(home: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "hermit", *args], env=env_for(home), text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)


def _ids(cmd: tuple[str, ...]) -> str:
    return " ".join(cmd)


@pytest.mark.parametrize("cmd", COMMANDS, ids=_ids)
def test_before_init_says_run_init_and_creates_nothing(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    r = run(home, *cmd)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert f"error: workspace {home / 'workspace'} does not exist" in r.stderr
    assert "hint: run `hermit setup` first (or `hermit init` for memory only)" in r.stderr
    assert not home.exists(), sorted(str(p) for p in home.rglob("*"))


@pytest.mark.parametrize("cmd", [("memory", "search", "x"), ("memory", "index")], ids=_ids)
def test_a_config_without_its_workspace_says_run_init_which_keeps_the_config(tmp_path: Path,
                                                                             cmd: tuple[str, ...]) -> None:
    home = tmp_path / "home"  # setup has run (a config), the workspace was moved away: setup would not make it
    home.mkdir(mode=0o700)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search:\n      provider: none\n")
    r = run(home, *cmd)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"error: workspace {home / 'workspace'} does not exist" in r.stderr
    assert "hint: run `hermit init`: it makes the missing workspace and keeps your config" in r.stderr, r.stderr
    assert sorted(p.name for p in home.iterdir()) == ["hermit.yaml"]


@pytest.mark.parametrize("cmd", [("init",), ("memory", "search", "x"), ("agent", "-m", "hi"), ("sessions", "list")],
                         ids=_ids)
def test_hermit_home_is_a_file(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    home.write_text("I am a file\n")
    r = run(home, *cmd)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"error: the state dir {home} is a file, not a directory" in r.stderr
    assert "hint: set HERMIT_HOME" in r.stderr
    assert home.read_text() == "I am a file\n"


@pytest.mark.parametrize("cmd", [("init",), ("memory", "status"), ("agents", "list")], ids=_ids)
def test_config_path_is_a_directory(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    (home / "hermit.yaml").mkdir(parents=True)
    (home / "workspace").mkdir()
    r = run(home, *cmd)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"the config path {home / 'hermit.yaml'} is a directory, not a file" in r.stderr


def _bwrap() -> str:
    path = shutil.which("bwrap")
    need(path is not None, "bubblewrap (bwrap)")
    assert path is not None
    return path


def test_read_only_state_dir_never_advises_deleting_the_index(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert hermit_here(home, "init", env=env_for(home)).returncode == 0  # setup: in this process
    write(home / "workspace" / "memory" / "2026-12-01.md", "# 2026-12-01\n- The kiwi tree needs water.\n")
    assert hermit_here(home, "memory", "index", env=env_for(home)).returncode == 0
    index = home / "memory" / "main.sqlite"
    before = index.read_bytes()
    write(home / "workspace" / "memory" / "2026-12-02.md", "# 2026-12-02\n- New note makes the index dirty.\n")
    # A real read-only filesystem (bind mount), not a permission bit: root ignores those.
    ro = (_bwrap(), "--bind", "/", "/", "--dev", "/dev", "--ro-bind", str(home), str(home))
    for cmd in (("memory", "search", "kiwi"), ("memory", "index"), ("memory", "status")):
        r = run(home, *cmd, prefix=ro)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "read-only" in r.stderr, r.stderr
        assert "delete it and run" not in r.stderr and "--force" not in r.stderr
        assert "do not delete it" in r.stderr
    assert index.read_bytes() == before


def test_index_on_a_read_only_filesystem_is_not_called_corrupt(tmp_path: Path) -> None:
    """Below the CLI (the gateway opens indexes too): db.connect itself must not blame the file."""
    d = tmp_path / "state"
    d.mkdir()
    db = str(d / "i.sqlite")
    code = f"from hermit.db import connect; c, _ = connect({db!r}); c.execute('create table t(x)'); c.close()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=PROC_TIMEOUT)
    probe = ("from hermit.db import connect\nfrom hermit.errors import HermitError\n"
             f"try:\n    connect({db!r})\nexcept HermitError as e:\n    print(e.message); print(e.hint)\n")
    r = subprocess.run([_bwrap(), "--bind", "/", "/", "--dev", "/dev", "--ro-bind", str(d), str(d),
                        sys.executable, "-c", probe], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert "read-only" in r.stdout and "do not delete it" in r.stdout, r.stdout + r.stderr
    assert "derived data" not in r.stdout
