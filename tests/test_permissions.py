"""Everything Hermit creates is owner-only (directories 0700, files 0600) however it is created, while
files the owner made by hand keep their own modes."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from hermit.gateway.logs import setup_logging
from hermit.testing import FakeProvider
from hermit.workspace import ensure_workspace
from prochelpers import PROC_TIMEOUT


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    # A permissive umask, as many desktops have: Hermit must not depend on the user's.
    return subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0o002); from hermit.cli.main import main; "
                           "sys.exit(main(sys.argv[1:]))", *args],
                          capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def test_init_creates_an_owner_only_state_dir_and_workspace(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = hermit(home, "init")
    assert r.returncode == 0, r.stderr
    ws = home / "workspace"
    assert mode(home) == 0o700 and mode(ws) == 0o700 and mode(ws / "memory") == 0o700
    assert mode(home / "hermit.yaml") == 0o600
    made = [p for p in ws.rglob("*")]
    assert len(made) >= 8
    assert {p.name: mode(p) for p in made if p.is_file()} == {p.name: 0o600 for p in made if p.is_file()}


def test_an_agents_own_files_are_private_and_the_owners_hand_made_files_keep_their_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert hermit(home, "init").returncode == 0
    mine = home / "workspace" / "memory" / "shared-with-the-family.md"
    mine.write_text("- the wifi password is on the fridge\n")
    mine.chmod(0o644)
    script = [{"tool_calls": [{"name": "write", "arguments": {"path": "notes/plan.md", "content": "- book flights\n"}},
                              {"name": "exec", "arguments": {"command": "echo hi > made-by-exec.txt"}}]},
              {"text": "Done."}]
    with FakeProvider(script) as fake:
        cfg = yaml.safe_load((home / "hermit.yaml").read_text())
        cfg["agents"]["defaults"].update(model="fake/m", memory_search={"provider": "none"})
        cfg["models"] = {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
        r = hermit(home, "agent", "-m", "plan the trip")
    assert r.returncode == 0, r.stderr
    ws = home / "workspace"
    assert mode(ws / "notes") == 0o700 and mode(ws / "notes" / "plan.md") == 0o600
    assert mode(ws / "made-by-exec.txt") == 0o600
    assert mode(mine) == 0o644  # the owner's own file, untouched
    sessions = home / "agents" / "main" / "sessions"
    assert mode(home / "agents") == 0o700 and mode(sessions) == 0o700
    assert all(mode(p) == 0o600 for p in sessions.iterdir() if p.is_file())


def test_ensure_workspace_is_owner_only_under_any_umask_and_keeps_an_existing_folder(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        ensure_workspace(tmp_path / "ws")
        existing = tmp_path / "shared"
        existing.mkdir()
        existing.chmod(0o755)
        ensure_workspace(existing)
    finally:
        os.umask(old)
    assert mode(tmp_path / "ws") == 0o700 and mode(tmp_path / "ws" / "memory") == 0o700
    assert mode(tmp_path / "ws" / "MEMORY.md") == 0o600
    assert mode(existing) == 0o755  # a folder the owner pointed the agent at keeps its mode
    assert mode(existing / "memory") == 0o700 and mode(existing / "AGENTS.md") == 0o600


def test_gateway_logs_are_owner_only_including_rotated_files(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o755)
    logs.chmod(0o755)
    old_log = logs / "gateway.log"
    old_log.write_text("left by an older version\n")
    old_log.chmod(0o644)
    previous = os.umask(0o022)
    try:
        path = setup_logging(logs, "text", [], max_bytes=300, backups=2)
        log = logging.getLogger("hermit.test-permissions")
        for i in range(20):
            log.info("line %d %s", i, "x" * 40)
    finally:
        os.umask(previous)
        for name in ("hermit", "uvicorn", "uvicorn.error"):
            for h in logging.getLogger(name).handlers:
                h.close()
            logging.getLogger(name).handlers = []
            logging.getLogger(name).propagate = True
    assert path == old_log and mode(logs) == 0o700
    files = sorted(logs.iterdir())
    assert [p.name for p in files] == ["gateway.log", "gateway.log.1", "gateway.log.2"]
    assert all(mode(p) == 0o600 for p in files)
