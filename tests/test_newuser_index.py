"""A new user's first `hermit memory index` of a memory of many notes, stopped with Ctrl-C on a terminal (what the
H5 audit found): it printed only "interrupted", leaving the user to guess whether the minutes spent were lost.
It now says what the index keeps (keyword search for every file, the chunks embedded so far) and how to go on;
and it is so: a search of what is stored finds a note at once, and the next index embeds the rest. The `init` that
only makes the state dir runs in this process; the commands asserted on are subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import test_setup as setup_cli  # its Terminal (a module attribute: its tests are not collected here)
from clihere import hermit_here
from conftest import write
from prochelpers import PROC_TIMEOUT

FILES = 40  # 3 chunks each: several embedding batches of 32


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=setup_cli.env_for(home), timeout=PROC_TIMEOUT)


def test_ctrl_c_in_a_first_index_says_what_is_kept_and_the_next_index_goes_on(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert hermit_here(home, "init", env=setup_cli.env_for(home)).returncode == 0
    cfg = home / "hermit.yaml"  # small chunks and no vector per line: several embedding batches, quickly
    cfg.write_text(cfg.read_text().replace("line_vectors: auto", "line_vectors: false")
                   .replace("tokens: 400", "tokens: 60").replace("overlap: 80", "overlap: 0"))
    for i in range(FILES):
        day = f"2026-{i // 28 + 1:02d}-{i % 28 + 1:02d}"
        body = "\n".join(f"- {day} item {n}: called the plumber about the leaking kitchen tap, quote {i * 100 + n} EUR"
                         for n in range(8))
        write(home / "workspace" / "memory" / f"{day}.md", f"# {day}\n\n{body}\n")
    term = setup_cli.Terminal(["memory", "index"], {**setup_cli.env_for(home), "COLUMNS": "200"})
    try:
        term.expect("keyword search is ready for")
        term.expect("embedding chunks")  # the model is loaded and working: stop it there
        os.killpg(term.proc.pid, 2)  # Ctrl-C reaches the terminal's foreground group
        term.expect("interrupted")
    finally:
        code = term.close()
    assert code == 130, term.seen
    assert f"stopped: keyword search covers all {FILES + 1} files and " in term.seen, term.seen  # + MEMORY.md
    assert "chunks are embedded (your notes are untouched); `hermit memory index` embeds the rest" in term.seen

    assert "`hermit memory search` answers meanwhile" in term.seen
    before = json.loads(run(home, "memory", "status", "--json").stdout)["files_without_vectors"]
    assert 0 < before <= FILES + 1
    found = run(home, "memory", "search", "quote 3907 EUR", "--json")  # as the line says: it answers meanwhile
    assert found.returncode == 0 and "2026-02-12.md" in found.stdout, found.stdout + found.stderr
    status = run(home, "memory", "status", "--json")
    assert json.loads(status.stdout)["files_without_vectors"] == before, status.stdout  # it embedded none
    again = run(home, "memory", "index")
    assert again.returncode == 0 and again.stdout.startswith("synced:"), again.stdout + again.stderr
    assert json.loads(run(home, "memory", "status", "--json").stdout)["files_without_vectors"] == 0
