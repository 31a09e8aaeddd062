"""Work survives a crash: a SIGKILLed first index (or `--force`) resumes from what it committed (the
first index its keyword-only files, both the embedding cache batch by batch), and the temporary rebuild
files a killed `--force` left are removed by the next process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import sqlean

from conftest import write
from prochelpers import kill_when


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}


def _cache_rows(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlean.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("select count(*) from embedding_cache").fetchone()[0])
    except sqlean.Error:
        return 0  # not created yet
    finally:
        conn.close()


def _kill_once_cached(home: Path, db: Path, *args: str) -> int:
    """Start `hermit memory index ARGS`, SIGKILL it as soon as the live index holds cached embeddings."""
    proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "memory", "index", *args], env=_env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cached = [0]

    def ready() -> bool:
        cached[0] = _cache_rows(db)
        return cached[0] > 0

    kill_when(proc, ready, "the index")
    return cached[0]


def test_a_killed_first_index_resumes_from_its_cache_and_cleans_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_search:\n"
                                "      provider: local\n      model: all-MiniLM-L6-v2\n")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]
    for i in range(400):
        body = " ".join(words[(i + k) % len(words)] for k in range(60))
        write(home / "workspace" / "memory" / f"2026-01-{i:04d}.md", f"# Note {i}\n\n{body} number {i}\n")
    db = home / "memory" / "main.sqlite"
    cached = _kill_once_cached(home, db)
    assert cached >= 1
    # A first index is built in place (issue 25): every note was stored keyword-only before the model
    # ran, so the killed index already answers keyword searches, and no staging copy is left.
    assert not list(db.parent.glob(db.name + ".rebuild-*"))
    conn = sqlean.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        files, waiting = conn.execute("select count(*), sum(embedded=0) from files").fetchone()
    finally:
        conn.close()
    assert files == 400 and waiting >= 1

    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "memory", "index", "--json"], env=_env(home),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    # Each note is one chunk and two lines with vectors of their own: 1,200 texts. Notes finished before
    # the kill are unchanged now; of the others, every chunk embedded before the kill came from the cache.
    assert report["embedded"] + report["cache_hits"] + 3 * report["files_unchanged"] >= 1200
    assert report["embedded"] <= 1200 - cached
    assert report["files_indexed"] == waiting
    assert not list(db.parent.glob(db.name + ".rebuild-*"))


def test_a_killed_force_rebuild_is_cleaned_up_by_the_next_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_search:\n"
                                "      provider: local\n      model: all-MiniLM-L6-v2\n")
    for i in range(400):
        # Several lines a file, so the 40-token chunks below are new text that must be embedded again.
        lines = "".join(f"- line {j} of note {i}: some text about topic {(i + j) % 37} and its details\n"
                        for j in range(8))
        write(home / "workspace" / "memory" / f"n{i:04d}.md", f"# {i}\n{lines}")
    db = home / "memory" / "main.sqlite"
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "memory", "index"], env=_env(home),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # A --force with another chunking re-embeds everything; kill it once the new model output is cached.
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_search:\n"
                                "      provider: local\n      model: all-MiniLM-L6-v2\n"
                                "      chunking: {tokens: 40, overlap: 0}\n")
    before = _cache_rows(db)
    proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "memory", "index", "--force"],
                            env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not list(db.parent.glob("*.rebuild-*")):
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # at once: on an idle machine the whole rebuild is quick
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(db.parent.glob(db.name + ".rebuild-*")), "the killed --force left its temporary files"
    assert _cache_rows(db) >= before
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "memory", "search", "topic 5", "--json"],
                       env=_env(home), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"], "the live index was intact all along"
    assert not list(db.parent.glob(db.name + ".rebuild-*"))  # removed when the search process started
