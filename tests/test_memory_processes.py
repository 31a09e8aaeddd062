"""Across processes: searching while another process indexes, and a killed indexer leaving a sound index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.db import connect
from hermit.memory.chunking import chunk_markdown
from hermit.memory.embedders.local_e5 import E5Embedder
from hermit.memory.service import MemoryKey, MemoryService


def _hermit(home: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.Popen([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # type: ignore[call-overload]


def _many_notes(ws: Path, n: int, tag: str) -> None:
    for i in range(n):
        lines = [f"# Day {i}"] + [f"- {tag} note {i}.{j}: met the team about project {i * 7 + j} and "
                                  f"agreed on the plan for release {j}" for j in range(60)]
        write(ws / "memory" / f"2026-03-{i + 1:02d}-{tag}.md", "\n".join(lines) + "\n")


def _consistent(db: Path, ws: Path) -> int:
    """Assert every indexed file's chunks match its current content exactly; return chunk count."""
    conn, _ = connect(db)
    try:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        files = dict(conn.execute("select path, hash from files").fetchall())
        total = 0
        for path in files:
            text = (ws / path).read_text(encoding="utf-8")
            want = [(c.start_line, c.end_line) for c in chunk_markdown(text)]
            got = conn.execute("select start_line, end_line from chunks where path=? order by start_line, id",
                               (path,)).fetchall()
            assert [tuple(g) for g in got] == want, path
            (n_fts,) = conn.execute("select count(*) from chunks_fts where rowid in "
                                    "(select id from chunks where path=?)", (path,)).fetchone()
            assert n_fts == len(want)
            total += len(want)
        (orphans,) = conn.execute("select count(*) from chunks where path not in (select path from files)").fetchone()
        assert orphans == 0
        return total
    finally:
        conn.close()


@pytest.mark.slow
def test_search_in_one_process_while_another_indexes(tmp_path: Path, e5: E5Embedder) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    write(ws / "MEMORY.md", "# M\n- The wifi password is in the blue notebook.\n")
    # This process only reads: it must not pick up the new files itself before the other process does.
    cfg = MemorySearchConfig.model_validate({"sync": {"on_search": False}})
    svc = MemoryService(MemoryKey("main", ws), home / "memory" / "main.sqlite", cfg, e5)
    svc.sync()
    _many_notes(ws, 12, "bulk")  # ~12 files × 60 lines: several seconds of embedding in the other process
    proc = _hermit(home, "memory", "index")
    try:
        searches = 0
        seen_progress = False
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            res = svc.search("wifi password")
            assert "error" not in res, res
            assert res["results"] and res["results"][0]["path"] == "MEMORY.md"
            searches += 1
            (n,) = svc.store.conn.execute("select count(*) from files").fetchone()
            seen_progress = seen_progress or n > 1
            time.sleep(0.05)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert searches >= 5, "the indexer finished too fast to overlap with searches"
        assert seen_progress, "searches saw the other process's committed files while it was indexing"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert svc.search("bulk note 11.59")["results"]
    svc.close()


@pytest.mark.slow
def test_killed_indexer_leaves_consistent_index_and_rerun_completes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    write(ws / "MEMORY.md", "# M\n- seed\n")
    first = _hermit(home, "memory", "index")
    assert first.wait(timeout=120) == 0
    _many_notes(ws, 10, "kill")
    db = home / "memory" / "main.sqlite"
    proc = _hermit(home, "memory", "index")
    # Kill once some (not all) files are committed.
    conn, _ = connect(db)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        (n,) = conn.execute("select count(*) from files").fetchone()
        if n >= 3:
            break
        time.sleep(0.02)
    conn.close()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    partial = _consistent(db, ws)
    assert partial > 0
    rerun = _hermit(home, "memory", "index")
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert "11 files" in out
    full = _consistent(db, ws)
    assert full > partial


@pytest.mark.slow
def test_killed_rebuild_keeps_the_live_index(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    _many_notes(ws, 6, "live")
    assert _hermit(home, "memory", "index").wait(timeout=300) == 0
    db = home / "memory" / "main.sqlite"
    before = _consistent(db, ws)
    proc = _hermit(home, "memory", "index", "--force")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(db.parent.glob("main.sqlite.rebuild-*")):
        time.sleep(0.02)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _consistent(db, ws) == before
    again = _hermit(home, "memory", "search", "live note 3.7", "--json")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert '"memory/2026-03-04-live.md"' in out
    assert not list(db.parent.glob("main.sqlite.rebuild-*")) or True  # cleaned by the next writer
    rerun = _hermit(home, "memory", "index", "--force")
    assert rerun.wait(timeout=300) == 0
    assert not list(db.parent.glob("main.sqlite.rebuild-*"))
