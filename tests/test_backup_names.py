"""What `hermit backup` keeps (audit B): every file of the owner's workspaces whatever its name looks like —
`finances.sqlite`, `release.lock`, `letter.tmp` were dropped without a word (F3) — and only Hermit's own
derived files at their own places left out, counted and named; a second name (hard link) of MEMORY.md stays a
second name of it after a restore, so what was withheld from an MCP client stays withheld (F2). Real
`hermit backup` / `hermit restore` subprocesses, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from prochelpers import PROC_TIMEOUT
from test_backup_live import here

# An MCP client's read of one note, through the real memory tools with the MCP audience (not the owner).
MCP_GET = r"""
import json, os, sys
from hermit.cli.context import CliContext
from hermit.memory.policy.audience import MCP, Reader
from hermit.tools.memory import MemoryTools
ctx = CliContext.from_args(os.environ["HERMIT_HOME"], None, None, False)
svc = ctx.memory_service(ctx.agent())
try:
    r = MemoryTools(svc, reader=Reader(MCP, owner=False)).memory_get(sys.argv[1], None, None)
    print(json.dumps({"text": r.get("text", "")}))
except Exception as e:
    print(json.dumps({"refused": str(e).splitlines()[0]}))
finally:
    svc.close()
"""


def hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, input=stdin)


def set_up(home: Path, agents: list[dict[str, str]] | None = None) -> None:
    """A state dir made by the real `hermit setup`, in this process (the backups and restores are processes)."""
    assert here(home, "setup", "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1",
                "--model", "m", "--api-key-stdin", "--no-check", stdin="sk-names-key\n") == 0
    if agents:
        config = yaml.safe_load((home / "hermit.yaml").read_text(encoding="utf-8"))
        config["agents"]["list"] = agents
        (home / "hermit.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def mcp_get(home: Path, rel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([sys.executable, "-c", MCP_GET, rel], capture_output=True, text=True, env=env,
                       timeout=PROC_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def test_workspace_files_are_kept_whatever_their_names_and_only_hermits_own_are_left_out(tmp_path: Path) -> None:
    home = tmp_path / "old"
    extra = tmp_path / "extra-ws"
    set_up(home, [{"id": "main"}, {"id": "side", "workspace": str(extra)}])
    ws = home / "workspace"
    mine = {"finances.sqlite": "ledger\n", "release.lock": "release checklist\n", "letter.tmp": "draft\n",
            "notes.tmp-v2.md": "my notes\n", "projects/app.tmp/main.py": "print('app')\n", ".lock": "mine too\n",
            "db.sqlite-wal": "wal?\n"}
    for rel, text in mine.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    extra.mkdir()
    (extra / "data.sqlite").write_text("side ledger\n")
    (extra / "x.lock").write_text("side lock\n")
    # Hermit's own, at its own places: a log, a session lock, a temp of an unfinished write, the index and its WAL.
    (home / "logs").mkdir()
    (home / "logs" / "gateway.log").write_text("derived\n")
    sessions = home / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "s1.jsonl").write_text('{"type": "session"}\n')
    (sessions / "main-0a1b2c3d.lock").write_text("")
    (home / ".hermit.yaml.tmp-4242-0123abcd").write_text("half a config")
    (ws / ".MEMORY.md.0123456789ab.tmp").write_text("half a note")

    archive = tmp_path / "out.tar.gz"
    r = hermit(home, "backup", str(archive))
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for rel in mine:
        assert f"hermit-backup/home/workspace/{rel}" in names, rel
    assert {"hermit-backup/external/side/workspace/data.sqlite",
            "hermit-backup/external/side/workspace/x.lock"} <= names
    assert "hermit-backup/home/agents/main/sessions/s1.jsonl" in names
    for theirs in ("logs/gateway.log", "agents/main/sessions/main-0a1b2c3d.lock", ".hermit.yaml.tmp-4242-0123abcd",
                   "workspace/.MEMORY.md.0123456789ab.tmp"):
        assert f"hermit-backup/home/{theirs}" not in names, theirs
        assert (theirs if theirs[:5] != "logs/" else "logs/") in r.stdout, theirs  # named in what was left out
    # logs/, the session lock, the config lock (`hermit agents add` took it) and the two temps
    assert "left out 5 derived or transient files and folders" in r.stdout and ".config.lock" in r.stdout

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    for rel, text in mine.items():
        assert (new / "workspace" / rel).read_text() == text, rel


def test_a_hard_link_of_memory_md_stays_one_and_stays_withheld(tmp_path: Path) -> None:
    home = tmp_path / "old"
    set_up(home)
    ws = home / "workspace"
    (ws / "MEMORY.md").write_text("# Memory\n- PRIVATE: the lawyer's PIN is 4471\n")
    (ws / "memory").mkdir(exist_ok=True)
    os.link(ws / "MEMORY.md", ws / "memory" / "pinned.md")
    outside = tmp_path / "outside.md"
    outside.write_text("- a note with a second name somewhere else\n")
    os.link(outside, ws / "memory" / "twin.md")
    (ws / "memory" / "shared.md").write_text("- an ordinary note\n")
    assert "refused" in mcp_get(home, "memory/pinned.md")

    archive = tmp_path / "out.tar.gz"
    r = hermit(home, "backup", str(archive))
    assert r.returncode == 0, r.stderr
    assert "workspace/memory/twin.md (a second name" in r.stdout  # left out, and said so
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("hermit-backup/manifest.json"))  # type: ignore[arg-type]
    assert "hermit-backup/home/workspace/MEMORY.md" in names
    assert "hermit-backup/home/workspace/memory/pinned.md" not in names  # never a separate plain file
    assert "hermit-backup/home/workspace/memory/twin.md" not in names
    assert manifest["links"] == [["home/workspace/memory/pinned.md", "home/workspace/MEMORY.md"]]

    new = tmp_path / "new"
    r = hermit(new, "restore", str(archive))
    assert r.returncode == 0, r.stderr
    memory, pinned = (os.stat(new / "workspace" / p) for p in ("MEMORY.md", "memory/pinned.md"))
    assert (pinned.st_dev, pinned.st_ino) == (memory.st_dev, memory.st_ino) and pinned.st_nlink == 2
    assert not (new / "workspace" / "memory" / "twin.md").exists()
    seen = mcp_get(new, "memory/pinned.md")
    assert "refused" in seen and "4471" not in json.dumps(seen)
    assert mcp_get(new, "memory/shared.md") == {"text": "- an ordinary note\n"}
