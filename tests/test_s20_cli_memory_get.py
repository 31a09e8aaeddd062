"""`hermit memory get` reads the file as the owner's memory_get does, without the memory service: building it opened
the index and its vector extension, imported the embedding code and numpy, and in a new state dir created the index
file, to print one Markdown file. Now cli/memory_read.py reads it with the same rules; a start past the last line is
the agent's error (how many lines there are), not an empty line printed with exit 0.

The answers are held to the agent's memory_get (MemoryTools over a real MemoryService, as the owner) for each kind
of path: a note, a range, MEMORY.md, a file whose origin markers broke, an extra path, a missing file, a directory,
a binary file, a symlink, a path out of the workspace, a transcript; the command is a real `hermit` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from clihere import hermit_here
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.errors import HermitError
from hermit.memory.index.session_source import SESSIONS_PREFIX
from hermit.memory.service import MemoryKey, MemoryService
from hermit.tools.memory import MemoryTools
from prochelpers import PROC_TIMEOUT
from test_cli_lazy_imports import MEMORY, env_for, imported_by, loaded

DAMAGED = "bob wrote this\n<!-- /origin -->\n"  # a close marker with no block open (`sort -u` over a note)


def state(tmp_path: Path) -> Path:
    home = tmp_path / "state"
    assert hermit_here(home, "init", env=env_for(home)).returncode == 0
    extra = tmp_path / "notes"
    extra.mkdir()
    (extra / "plan.md").write_text("# plan\n\n- one\n- two\n", encoding="utf-8")
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search:\n      provider: none\n"
                                      f"      extra_paths: [{json.dumps(str(extra))}]\n      sources: [memory, sessions]\n",
                                      encoding="utf-8")
    ws = home / "workspace"
    (ws / "memory" / "2026-12-01.md").write_text("# Monday\n\nline three\nline four\nline five\n", encoding="utf-8")
    (ws / "memory" / "bob.md").write_text(DAMAGED, encoding="utf-8")
    (ws / "memory" / "blob.md").write_bytes(b"\x00\x01binary")
    (ws / "memory" / "folder.md").mkdir()
    (ws / "memory" / "link.md").symlink_to(ws / "memory" / "2026-12-01.md")
    return home


def answer(call: Any) -> dict[str, Any]:
    try:
        return {"ok": call()}
    except HermitError as e:
        return {"error": e.message, "hint": e.hint}


def test_memory_get_answers_as_the_agents_memory_get(tmp_path: Path) -> None:
    from hermit.cli.memory_read import SESSIONS, read_memory

    home = state(tmp_path)
    agent = load_config(StatePaths(home)).agent("main")
    sessions = agent.sessions_dir
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "abc123.jsonl").write_text(json.dumps({"type": "message", "role": "user", "content": "hello"}) + "\n",
                                           encoding="utf-8")
    cfg = agent.settings.memory_search
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, cfg, None,
                        sessions_dir=sessions, cache_dir=home / "cache", environ={}, state_dir=home)
    tools = MemoryTools(svc, private=True)
    extra = str(tmp_path / "notes" / "plan.md")
    cases = [("MEMORY.md", None, None), ("memory/2026-12-01.md", None, None), ("memory/2026-12-01.md", 3, 2),
             ("memory/2026-12-01.md", 4, None), ("memory/2026-12-01.md", 40, None), ("memory/2026-12-01.md", None, 1),
             ("memory/bob.md", None, None), (extra, 3, 1), ("memory/none.md", None, None), ("memory/folder.md", None, None),
             ("memory/blob.md", None, None), ("memory/link.md", None, None), ("../hermit.yaml", None, None),
             ("memory/x.txt", None, None), ("sessions/abc123.jsonl", None, None), ("sessions/abc123.jsonl", 9, None),
             ("sessions/../x.jsonl", None, None)]
    try:
        for path, first, count in cases:
            agents = answer(lambda: tools.memory_get(path=path, from_line=first, lines=count))  # noqa: B023
            cli = answer(lambda: read_memory(agent, path, first, count))  # noqa: B023
            assert cli == agents, (path, first, count)
    finally:
        svc.close()
    assert "no longer pair up" in str(answer(lambda: read_memory(agent, "memory/bob.md", None, None))["ok"].get("note"))
    assert SESSIONS == SESSIONS_PREFIX
    # A line 0 the tool's schema refuses before the call (from ≥ 1) is refused by the CLI's own check.
    assert answer(lambda: read_memory(agent, "MEMORY.md", 0, None)) == {"error": "'from' is 1-based",
                                                                       "hint": "pass from ≥ 1"}


def test_the_command_reads_the_file_without_the_memory_service_or_an_index(tmp_path: Path) -> None:
    home = state(tmp_path)
    p, found = imported_by(home, "memory", "get", "memory/2026-12-01.md", "--from", "3", "--lines", "2")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "line three\nline four\n"
    assert not loaded(found, MEMORY + ("hermit.memory.search.lexicon",)), loaded(found, MEMORY)
    assert not (home / "memory").exists()  # no index file made to read a note
    env = env_for(home)
    r = subprocess.run([sys.executable, "-m", "hermit", "memory", "get", "memory/2026-12-01.md", "--from", "9"],
                       capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert "error: line 9 is past the end of memory/2026-12-01.md (5 lines)" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "hermit", "memory", "get", "memory/bob.md", "--json"],
                       capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT)
    got = json.loads(r.stdout)
    assert got["text"] == DAMAGED and "no longer pair up" in got["note"], got
    assert os.path.isdir(home / "workspace")
