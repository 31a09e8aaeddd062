"""`hermit memory index` without a terminal (cron, `ssh -T`, output piped to a log): a first index of a large memory
printed nothing for its whole run (300 notes, 901 chunks: 20 s of silence), and a stop printed only "interrupted" —
the line saying what the index keeps appeared on a terminal only. Now a log gets plain progress lines on stderr (a
line per tenth of the chunks embedded, by count: no bar, no carriage return), the terminal's notices, and the same
stop line; a SIGTERM (`timeout`, a supervisor) stops it as Ctrl-C does, with that line.

Real `hermit` processes with stderr a pipe, the real local embedding model, real SQLite index files."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import test_setup as setup_cli  # its env_for (a module attribute: its tests are not collected here)
from conftest import write
from prochelpers import PROC_TIMEOUT

PROGRESS = re.compile(r"  embedded (\d+) of (\d+) chunks \((\d+)%\)(, [\d.]+ chunks/s, about \w+ left|, in \w+)?$")


def memory(home: Path, files: int) -> None:
    """`files` daily notes of 3 small chunks each; no vector per line (several embedding batches, quickly)."""
    assert run(home, "init").returncode == 0
    cfg = home / "hermit.yaml"
    cfg.write_text(cfg.read_text().replace("line_vectors: auto", "line_vectors: false")
                   .replace("tokens: 400", "tokens: 60").replace("overlap: 80", "overlap: 0"))
    for i in range(files):
        day = f"20{20 + i // 336}-{i // 28 % 12 + 1:02d}-{i % 28 + 1:02d}"
        body = "\n".join(f"- {day} item {n}: called the plumber about the leaking kitchen tap, quote {i * 100 + n} EUR"
                         for n in range(8))
        write(home / "workspace" / "memory" / f"{day}.md", f"# {day}\n\n{body}\n")


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=setup_cli.env_for(home), timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def test_a_first_index_into_a_log_prints_plain_progress_lines_by_count(tmp_path: Path) -> None:
    home = tmp_path / "home"
    memory(home, 40)
    r = run(home, "memory", "index")
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr + r.stdout and "\x1b" not in r.stderr + r.stdout
    lines = r.stderr.splitlines()
    assert lines[0].startswith("  keyword search is ready for 41 files; embedding "), r.stderr  # + MEMORY.md
    total = int(lines[0].split("embedding ")[1].split(" chunks")[0])
    assert total >= 100  # a large index: progress is worth a line
    assert lines[1] == (f"  embedding {total} chunks with the local model on CPU: a first index of a large memory "
                        "takes a while (later runs embed only what changed)")
    steps = [PROGRESS.match(x) for x in lines[2:]]
    assert steps and all(steps), r.stderr
    done = [int(m.group(1)) for m in steps if m]
    tenths = [int(m.group(3)) // 10 for m in steps if m]
    assert done == sorted(set(done)) and done[-1] == total and len(done) <= 10
    assert tenths == sorted(set(tenths))  # one line per tenth at most: a log is not flooded
    assert lines[-1].startswith(f"  embedded {total} of {total} chunks (100%), in ")
    assert r.stdout.startswith("indexed: 41 files")  # the summary, on stdout as before

    again = run(home, "memory", "index")  # nothing to embed: no progress lines
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert again.stdout.startswith("synced: 41 files")
    quiet = run(home, "memory", "index", "--force", "--json")  # --json: clean output, no progress
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["chunks_indexed"] == total


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_index_says_in_the_log_what_is_kept(tmp_path: Path, sig: signal.Signals) -> None:
    home = tmp_path / "home"
    memory(home, 80)  # 240 chunks: several batches after the first line
    proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "memory", "index"], env=setup_cli.env_for(home),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a shell starts it
    assert proc.stderr is not None
    seen = []
    try:
        for line in proc.stderr:  # until the first batch is embedded (and committed)
            seen.append(line)
            if PROGRESS.match(line.rstrip("\n")):
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=PROC_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, "".join(seen) + err
    stop = re.search(r"  stopped: keyword search covers all 81 files and (\d+) of (\d+) chunks are embedded "
                     r"\(your notes are untouched\); `hermit memory index` embeds the rest; `hermit memory search` "
                     r"answers meanwhile, by keyword for those not embedded\n", err)
    assert stop, "".join(seen) + err
    assert 0 < int(stop.group(1)) < int(stop.group(2))
    assert err.endswith("interrupted\n") and out == ""
    embedded = json.loads(run(home, "memory", "status", "--json").stdout)
    assert 0 < embedded["files_without_vectors"] < 81  # what the line says is so: some embedded, the rest to do
