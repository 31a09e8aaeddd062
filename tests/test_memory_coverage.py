"""What is indexed and from where: `memory index`/`status` name the sources, and an empty search points at
memory_search.extra_paths when Markdown notes lie elsewhere in the workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import write
from hermit.memory.index.coverage import indexed_sources, uncovered_markdown
from prochelpers import PROC_TIMEOUT


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                          capture_output=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def test_notes_outside_memory_are_reported_and_indexed_once_extra_paths_names_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "init").returncode == 0
    ws = home / "workspace"
    write(ws / "memory" / "2026-12-01.md", "- dentist on Friday at 10\n")
    write(ws / "notes" / "projects" / "trip.md", "# Trip\n- the ferry leaves at 7:40 from pier 3\n")
    write(ws / "notes" / "books.md", "- reading: The Left Hand of Darkness\n")
    write(ws / "ideas.md", "- a bread oven in the garden\n")

    index = run(home, "memory", "index")
    assert index.returncode == 0, index.stderr
    assert "from: MEMORY.md (1), memory/** (1), sessions (off)" in index.stdout
    assert "3 Markdown files in the workspace are not indexed (in notes/, the workspace's top-level .md files)" \
        in index.stderr and "extra_paths: [notes]" in index.stderr
    status = run(home, "memory", "status", "--json")
    assert json.loads(status.stdout)["sources"] == {"MEMORY.md": 1, "memory/": 1, "extra_paths": {}, "sessions": 0}
    empty = run(home, "memory", "search", "ferry pier")
    assert empty.stdout == "no results\n" and "hint: 3 Markdown files" in empty.stderr

    cfg = yaml.safe_load((home / "hermit.yaml").read_text())
    cfg["agents"]["defaults"]["memory_search"]["extra_paths"] = ["notes", "ideas.md"]
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
    index = run(home, "memory", "index")
    assert "extra path notes (2), extra path ideas.md (1)" in index.stdout and "not indexed" not in index.stderr
    found = json.loads(run(home, "memory", "search", "ferry pier", "--json").stdout)["results"]
    assert found[0]["path"] == "notes/projects/trip.md"
    status = run(home, "memory", "status")
    assert "sources    MEMORY.md (1), memory/** (1), extra path notes (2), extra path ideas.md (1)" in status.stdout


def test_the_count_is_cheap_and_skips_what_is_covered_hidden_or_an_instruction_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for name in ("AGENTS.md", "SOUL.md", "MEMORY.md", "memory/a.md", ".git/notes.md", "indexed/x.md", "inbox/y.md"):
        write(ws / name, "x\n")
    assert uncovered_markdown(ws, ["indexed"]).count == 0
    for i in range(50):
        write(ws / "pile" / f"{i:02}.md", "x\n")
    capped = uncovered_markdown(ws, ["indexed"], max_entries=20)
    assert capped.capped and capped.count < 20
    full = uncovered_markdown(ws, ["indexed"])
    assert full.count == 50 and full.examples == ["pile/00.md", "pile/01.md", "pile/02.md"] and not full.capped
    outside = tmp_path / "elsewhere"
    assert indexed_sources([("MEMORY.md", "memory"), ("memory/b.md", "memory"), ("indexed/x.md", "memory"),
                            (str(outside / "n.md"), "memory"), ("sessions/s.jsonl", "sessions")], ws,
                           ["indexed", str(outside)]) == {
        "MEMORY.md": 1, "memory/": 1, "extra_paths": {"indexed": 1, str(outside): 1}, "sessions": 1}
