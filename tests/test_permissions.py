"""Everything Hermit creates is owner-only (directories 0700, files 0600) however it is created, while
files the owner made by hand keep their own modes."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
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


def test_an_index_in_a_shared_or_a_named_directory_leaves_that_directorys_mode_alone(tmp_path: Path) -> None:
    """Opening an index tightens Hermit's own index dir only. A sticky world-writable directory (what /tmp
    is: as root, making it 0700 broke apt and every other user's temporary files) and (as root) another user's
    directory are refused with their modes kept (anyone could have made the index file there first: audit M2);
    the directory the user named in memory_search.store.path keeps its mode; the index files are 0600."""
    from hermit.config.schema import MemorySearchConfig
    from hermit.errors import IndexError_
    from hermit.memory.service import MemoryKey, MemoryService
    from hermit.memory.store.sqlite import IndexStore

    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(IndexError_, match="can be written by every user"):
        IndexStore(shared / "probe.sqlite")
    assert mode(shared) == 0o1777 and list(shared.iterdir()) == []

    ws = tmp_path / "ws"
    ensure_workspace(ws)
    (ws / "MEMORY.md").write_text("# Memory\n- the spare key is under the mat\n")
    named = tmp_path / "notes"
    named.mkdir()
    named.chmod(0o755)
    cfg = MemorySearchConfig.model_validate({"provider": "none", "store": {"path": str(named / "{agent_id}.sqlite")}})
    svc = MemoryService(MemoryKey("main", ws), named / "main.sqlite", cfg, None)
    svc.sync()
    assert svc.search("spare key")["results"]
    svc.close()
    assert mode(named) == 0o755
    assert [p.name for p in named.iterdir() if p.is_file() and mode(p) != 0o600] == []

    own = tmp_path / "state" / "memory"  # the state layout's index dir, left 0755 by an older version
    own.mkdir(parents=True)
    own.chmod(0o755)
    IndexStore(own / "main.sqlite").close()
    assert mode(own) == 0o700

    if os.geteuid() == 0:  # root running Hermit on a user's files: the user's directory stays theirs
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        theirs.chmod(0o755)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(IndexError_, match="belongs to another user"):
            IndexStore(theirs / "main.sqlite")
        assert mode(theirs) == 0o755 and list(theirs.iterdir()) == []


def test_init_refuses_a_shared_directory_and_tightens_a_state_dir_of_the_users(tmp_path: Path) -> None:
    """`hermit --home DIR init` makes the state dir owner-only. A directory every user may write (a sticky one
    like /tmp included: anyone may create hermit.env or hermit.yaml there first) is refused, its mode kept and
    nothing written into it; a folder inside it is fine (the sticky bit keeps others from renaming it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    r = hermit(shared, "init")
    assert r.returncode == 1 and "can be written by every user (mode 1777)" in r.stderr, r.stderr
    assert mode(shared) == 0o1777 and list(shared.iterdir()) == []
    r = hermit(shared / "inside", "init")
    assert r.returncode == 0, r.stderr
    assert mode(shared / "inside") == 0o700 and mode(shared / "inside" / "hermit.yaml") == 0o600
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o755)
    r = hermit(mine, "init")
    assert r.returncode == 0, r.stderr
    assert mode(mine) == 0o700


def test_tighten_dir_changes_the_directory_it_judged_never_a_link_put_in_its_place(tmp_path: Path) -> None:
    """A directory replaced by a link (to somewhere else of the user's) is not followed: what the link
    points at keeps its mode. The directory itself is tightened as before."""
    from hermit.config.paths import tighten_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o755)
    link = tmp_path / "index-dir"
    link.symlink_to(elsewhere)
    tighten_dir(link)
    assert mode(elsewhere) == 0o755
    real = tmp_path / "real"
    real.mkdir()
    real.chmod(0o755)
    tighten_dir(real)
    assert mode(real) == 0o700
