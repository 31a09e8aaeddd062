"""Audit 19, side doors: `hermit --agent family backup` is what an owner types to hand a relative their agent's
notes, and it wrote the whole state dir — the default agent's MEMORY.md and transcripts, hermit.env's keys, every
channel token — with exit 0 and no word that `--agent` was not a filter. `--workspace` (a folder to use as the
agent's workspace) was ignored the same way. Both are now refused before anything is written, naming what the
archive holds and how to copy one agent's notes; `restore` refuses them too (it restores every agent, and with
--force over the files of agents the flag did not name). The real CLI, as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prochelpers import PROC_TIMEOUT
from test_backup_live import here

MAIN_CANARY = "OKAPI-MAIN-4417"
KEY = "sk-OKAPIKEY-4418"


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def two_agents(tmp: Path) -> Path:
    home = tmp / "home"
    assert here(home, "init") == 0
    assert here(home, "agents", "add", "family") == 0
    with (home / "workspace" / "MEMORY.md").open("a", encoding="utf-8") as f:
        f.write(f"- {MAIN_CANARY}\n")
    (home / "hermit.env").write_text(f"OPENAI_API_KEY={KEY}\n", encoding="utf-8")
    os.chmod(home / "hermit.env", 0o600)
    return home


@pytest.mark.parametrize("flag", [["--agent", "family"], ["--workspace", "WS"]])
def test_backup_refuses_a_flag_that_would_not_narrow_it(tmp_path: Path, flag: list[str]) -> None:
    home = two_agents(tmp_path)
    flag = [str(home / "workspace-family") if f == "WS" else f for f in flag]
    archive = tmp_path / "family.tar.gz"
    r = hermit(home, *flag, "backup", str(archive))
    assert r.returncode == 1, r.stdout + r.stderr
    assert not archive.exists() and not list(tmp_path.glob("*.tar.gz"))
    assert "every agent" in r.stderr and flag[0] in r.stderr, r.stderr
    assert "hint:" in r.stderr and "cp -r" in r.stderr  # how to hand over one agent's notes instead
    assert MAIN_CANARY not in r.stdout + r.stderr and KEY not in r.stdout + r.stderr


def test_restore_refuses_agent_and_a_plain_backup_still_holds_every_agent(tmp_path: Path) -> None:
    home = two_agents(tmp_path)
    archive = tmp_path / "all.tar.gz"
    r = hermit(home, "backup", str(archive))  # the whole state dir, as documented: the guard changed nothing here
    assert r.returncode == 0, r.stderr
    new = tmp_path / "new"
    r = hermit(new, "--agent", "family", "restore", str(archive))
    assert r.returncode == 1 and "every agent" in r.stderr and "--agent" in r.stderr, r.stderr
    assert not new.exists()
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert MAIN_CANARY in (new / "workspace" / "MEMORY.md").read_text(encoding="utf-8")
    assert (new / "workspace-family" / "MEMORY.md").is_file()
    assert KEY in (new / "hermit.env").read_text(encoding="utf-8")
