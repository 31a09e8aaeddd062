"""Across processes: searching while another process indexes, and a killed indexer leaving a sound index.

What is tested is SQLite under two processes (WAL readers beside a writer, a kill at any moment), not the
embedding model: the other process embeds with the fake embeddings server, which holds its requests so
the test acts at a chosen point of the index (after N files, during a rebuild) instead of racing a clock.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.db import connect
from hermit.memory.embedders import create_embedder
from hermit.memory.index.chunking import chunk_markdown
from hermit.memory.service import MemoryKey, MemoryService
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from prochelpers import PROC_TIMEOUT, fake_embeddings_config, kill_stepped, start_hermit, step_through


@pytest.fixture
def srv() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer() as server:
        yield server


def _home(tmp_path: Path, srv: FakeEmbeddingServer) -> Path:
    home = tmp_path / "home"
    write(home / "hermit.yaml", fake_embeddings_config(srv))
    return home


def _hermit(home: Path, *args: str) -> subprocess.Popen[str]:
    return start_hermit(home, *args)


def _indexing(tag: str) -> Callable[[list[str]], bool]:
    """Which requests the test holds: the indexer's (its texts are the notes tagged `tag`), not a search's."""
    return lambda texts: any(tag in t for t in texts)


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


def test_search_in_one_process_while_another_indexes(tmp_path: Path, srv: FakeEmbeddingServer) -> None:
    home = _home(tmp_path, srv)
    ws = home / "workspace"
    write(ws / "MEMORY.md", "# M\n- The wifi password is in the blue notebook.\n")
    # This process only reads: it must not pick up the new files itself before the other process does.
    raw = yaml.safe_load((home / "hermit.yaml").read_text())["agents"]["defaults"]["memory_search"]
    cfg = MemorySearchConfig.model_validate({**raw, "sync": {"on_search": False}})
    svc = MemoryService(MemoryKey("main", ws), home / "memory" / "main.sqlite", cfg, create_embedder(cfg, {}))
    svc.sync()
    _many_notes(ws, 24, "bulk")  # ~100 chunks: several batches, each committed before the next request
    srv.hold(_indexing("bulk note"))
    proc = _hermit(home, "memory", "index")
    files_seen: list[int] = []

    def search_while_it_waits() -> None:
        """At each request the indexer is blocked on: a search answers, from the index as committed so far."""
        res = svc.search("wifi password")
        assert "error" not in res, res
        assert res["results"] and res["results"][0]["path"] == "MEMORY.md"
        (n,) = svc.store.conn.execute("select count(*) from files").fetchone()
        files_seen.append(n)

    try:
        searches = step_through(srv, proc, search_while_it_waits)
        _, err = proc.communicate(timeout=PROC_TIMEOUT)
        assert proc.returncode == 0, err
    finally:
        srv.release_all()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert searches >= 5, "the indexer made too few requests to overlap with searches"
    assert max(files_seen) > 1, "searches saw the other process's committed files while it was indexing"
    assert svc.search("bulk note 23.59")["results"]
    svc.close()


def test_killed_indexer_leaves_consistent_index_and_rerun_completes(tmp_path: Path,
                                                                    srv: FakeEmbeddingServer) -> None:
    home = _home(tmp_path, srv)
    ws = home / "workspace"
    write(ws / "MEMORY.md", "# M\n- seed\n")
    assert _hermit(home, "memory", "index").wait(timeout=PROC_TIMEOUT) == 0
    _many_notes(ws, 10, "kill")
    db = home / "memory" / "main.sqlite"
    srv.hold()
    proc = _hermit(home, "memory", "index")
    conn, _ = connect(db)

    def embedded_files() -> int:
        (n,) = conn.execute("select count(*) from files where embedded").fetchone()
        return int(n)

    try:
        # Killed with some (not all) notes embedded: a large sync stores every note keyword-only first,
        # then their vectors batch by batch.
        kill_stepped(srv, proc, lambda: embedded_files() >= 3)
        done = embedded_files()
    finally:
        conn.close()
    assert 3 <= done < 11
    partial = _consistent(db, ws)
    assert partial > 0
    rerun = _hermit(home, "memory", "index", "--json")
    out, err = rerun.communicate(timeout=PROC_TIMEOUT)
    assert rerun.returncode == 0, err
    report = json.loads(out)
    assert report["files_indexed"] == 11 - done  # the notes still waiting for their vectors, and no others
    conn, _ = connect(db)
    try:
        assert embedded_files() == 11
    finally:
        conn.close()
    assert _consistent(db, ws) >= partial


def test_killed_rebuild_keeps_the_live_index(tmp_path: Path, srv: FakeEmbeddingServer) -> None:
    home = _home(tmp_path, srv)
    ws = home / "workspace"
    _many_notes(ws, 6, "live")
    assert _hermit(home, "memory", "index").wait(timeout=PROC_TIMEOUT) == 0
    db = home / "memory" / "main.sqlite"
    before = _consistent(db, ws)
    # Another chunking: the --force rebuild must embed everything again, into a temporary database.
    write(home / "hermit.yaml", fake_embeddings_config(srv, "      chunking: {tokens: 200, overlap: 40}\n"))
    srv.hold()
    proc = _hermit(home, "memory", "index", "--force")
    kill_stepped(srv, proc, lambda: bool(list(db.parent.glob("main.sqlite.rebuild-*"))), "the rebuild")
    assert _consistent(db, ws) == before
    again = _hermit(home, "memory", "search", "live note 3.7", "--json")
    out, err = again.communicate(timeout=PROC_TIMEOUT)
    assert again.returncode == 0, err
    assert '"memory/2026-03-04-live.md"' in out
    rerun = _hermit(home, "memory", "index", "--force")
    assert rerun.wait(timeout=PROC_TIMEOUT) == 0
    assert not list(db.parent.glob("main.sqlite.rebuild-*"))
