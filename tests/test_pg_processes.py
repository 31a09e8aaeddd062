"""Several hosts, one memory on PostgreSQL: two Hermit processes with their own state dirs (the second added
with `hermit memory claim`, tests/test_pg_state_claim.py) index and search one database at once; a SIGKILLed
indexer leaves a consistent index that the next sync completes. What only sets a test up (the first index, a
`claim` the test does not look at) runs in this process (`prepare`): the same CLI code without a Python start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from conftest import write
from hermit.cli.main import main
from hermit.memory.index.chunking import chunk_markdown
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from prochelpers import PROC_TIMEOUT, fake_embeddings_config, kill_stepped


@pytest.fixture
def srv() -> Iterator[FakeEmbeddingServer]:
    # What is tested is PostgreSQL under several processes, not the model: the fake embeds in milliseconds
    # and holds requests, so a kill lands where the test says.
    with FakeEmbeddingServer() as server:
        yield server


def _home(tmp_path: Path, name: str, ws: Path, srv: FakeEmbeddingServer) -> Path:
    home = tmp_path / name
    config = fake_embeddings_config(srv, "      store: {backend: postgres}\n")
    write(home / "hermit.yaml", config.replace("  defaults:\n", f"  defaults:\n    workspace: {ws}\n", 1))
    return home


def _hermit(home: Path, dsn: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE", "HERMIT_PG_DSN": dsn}
    return subprocess.Popen([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def prepare(monkeypatch: pytest.MonkeyPatch, home: Path, dsn: str, *args: str) -> None:
    """`hermit ARGS` on `home` and the database `dsn`, in this process, for what only sets a test up."""
    monkeypatch.setenv("HERMIT_PG_DSN", dsn)
    assert main(["--home", str(home), *args]) == 0


def _notes(ws: Path, n: int, tag: str, lines: int = 30) -> None:
    for i in range(n):
        body = [f"# {tag} {i}"] + [f"- {tag} note {i}.{j}: met the team about project {i * 7 + j} and "
                                   f"agreed on the plan for release {j}" for j in range(lines)]
        write(ws / "memory" / f"{tag}-{i:03d}.md", "\n".join(body) + "\n")


def _consistent(dsn: str, ws: Path, schema: str = "hermit_main") -> int:
    """Every indexed file's chunks are exactly its current content's, each with one vector unless the file
    is marked as waiting for its vectors (a large sync stores files keyword-only first); no orphans, no
    duplicates; the BM25 totals match the rows. Returns the number of chunks."""
    with psycopg.connect(dsn) as conn:
        files = dict(conn.execute(f"select path, embedded from {schema}.files").fetchall())
        total = 0
        for path in files:
            want = [(c.start_line, c.end_line) for c in chunk_markdown((ws / path).read_text(encoding="utf-8"))]
            got = conn.execute(f"select start_line, end_line from {schema}.chunks where path=%s"
                               " order by start_line, id", (path,)).fetchall()
            assert [tuple(g) for g in got] == want, path
            total += len(want)
        (chunks, orphans, no_vec, waiting) = conn.execute(
            f"select count(*), count(*) filter (where path not in (select path from {schema}.files)),"
            f" count(*) filter (where id not in (select id from {schema}.chunks_vec)),"
            f" count(*) filter (where path in (select path from {schema}.files where not embedded))"
            f" from {schema}.chunks").fetchone()
        assert (chunks, orphans, no_vec) == (total, 0, waiting)
        meta = dict(conn.execute(f"select key, value from {schema}.meta").fetchall())
        (ntok,) = conn.execute(f"select coalesce(sum(ntok), 0) from {schema}.chunks").fetchone()
        assert (int(meta.get("fts_docs", 0)), int(meta.get("fts_tokens", 0))) == (total, ntok)
        return total


def _expected_chunks(ws: Path) -> int:
    return sum(len(chunk_markdown(p.read_text(encoding="utf-8"))) for p in [ws / "MEMORY.md", *(ws / "memory").glob("*.md")]
               if p.exists())


def _files(dsn: str, schema: str = "hermit_main") -> int:
    with psycopg.connect(dsn) as conn:
        try:
            return int(conn.execute(f"select count(*) from {schema}.files").fetchone()[0])  # type: ignore[index]
        except psycopg.Error:
            return 0


@pytest.mark.slow
def test_two_hosts_index_and_search_one_database_at_once(tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "shared"
    write(ws / "MEMORY.md", "# M\n- The wifi password is in the blue notebook.\n")
    a, b = _home(tmp_path, "host-a", ws, srv), _home(tmp_path, "host-b", ws, srv)
    prepare(monkeypatch, a, pg_dsn, "memory", "index")  # the note searched for below
    prepare(monkeypatch, b, pg_dsn, "memory", "claim")  # a second host, on purpose
    for rnd in range(3):
        _notes(ws, 15, f"r{rnd}a")
        _notes(ws, 15, f"r{rnd}b")
        if rnd == 2:  # edits and deletes too
            _notes(ws, 5, "r0a", lines=12)
            for p in (ws / "memory").glob("r1b-00*.md"):
                p.unlink()
        procs = [_hermit(a, pg_dsn, "memory", "index", "--json"), _hermit(b, pg_dsn, "memory", "index", "--json"),
                 _hermit(a, pg_dsn, "memory", "search", "wifi password", "--json"),
                 _hermit(b, pg_dsn, "memory", "search", f"r{rnd}a note 3.7", "--json")]
        outs = [p.communicate(timeout=PROC_TIMEOUT) for p in procs]
        for p, (out, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err
            assert "postgresql://" not in out + err
        # Whichever of the four got the writer lock first indexed (a search syncs too); the others waited
        # (index) or searched what was committed (search).
        assert all(not json.loads(outs[k][0])["skipped"] for k in (0, 1))
        assert json.loads(outs[2][0])["results"][0]["path"] == "MEMORY.md"
        assert _consistent(pg_dsn, ws) == _expected_chunks(ws)
    # Both hosts now see everything, and nothing is left to do on either.
    for home in (a, b):
        out, err = _hermit(home, pg_dsn, "memory", "index", "--json").communicate(timeout=PROC_TIMEOUT)
        assert json.loads(out)["files_indexed"] == 0, err
        out, _ = _hermit(home, pg_dsn, "memory", "search", "r2b note 14.3", "--json").communicate(timeout=PROC_TIMEOUT)
        assert json.loads(out)["results"][0]["path"] == "memory/r2b-014.md"


@pytest.mark.slow
def test_a_host_killed_mid_sync_leaves_a_consistent_index_that_the_next_sync_completes(
        tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "shared"
    write(ws / "MEMORY.md", "# M\n- seed\n")
    a, b = _home(tmp_path, "host-a", ws, srv), _home(tmp_path, "host-b", ws, srv)
    prepare(monkeypatch, a, pg_dsn, "memory", "index")
    prepare(monkeypatch, b, pg_dsn, "memory", "claim")  # a second host, on purpose
    _notes(ws, 80, "kill")
    srv.hold()
    proc = _hermit(a, pg_dsn, "memory", "index")
    kill_stepped(srv, proc, lambda: _files(pg_dsn) >= 4, "the indexer")
    partial = _consistent(pg_dsn, ws)
    assert 0 < partial <= _expected_chunks(ws)
    done = _embedded_files(pg_dsn)
    assert done < 81  # killed before every new note had its vectors
    # The killed host's connection is gone, so its writer lock is too: the other host syncs at once.
    out, err = _hermit(b, pg_dsn, "memory", "index", "--json").communicate(timeout=PROC_TIMEOUT)
    report = json.loads(out)
    assert not report["skipped"], err
    assert _consistent(pg_dsn, ws) == _expected_chunks(ws)
    assert _embedded_files(pg_dsn) == 81
    assert report["files_indexed"] == 81 - done


def _embedded_files(dsn: str, schema: str = "hermit_main") -> int:
    """Files indexed with their vectors (a killed sync may leave others stored keyword-only, or absent)."""
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(f"select count(*) from {schema}.files where embedded").fetchone()[0])  # type: ignore[index]


@pytest.mark.slow
def test_a_killed_rebuild_keeps_the_live_index_and_resumes_from_the_cache(
        tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "shared"
    _notes(ws, 60, "live")
    a = _home(tmp_path, "host-a", ws, srv)
    prepare(monkeypatch, a, pg_dsn, "memory", "index")
    before = _consistent(pg_dsn, ws)
    # Another chunking: a --force that must embed everything again; killed once it has cached some.
    write(a / "hermit.yaml", (a / "hermit.yaml").read_text() + "      chunking: {tokens: 60, overlap: 0}\n")

    def cache_rows() -> int:
        with psycopg.connect(pg_dsn) as conn:
            return int(conn.execute("select count(*) from hermit_main.embedding_cache").fetchone()[0])  # type: ignore[index]

    cached_before = cache_rows()
    srv.hold()
    proc = _hermit(a, pg_dsn, "memory", "index", "--force")
    kill_stepped(srv, proc, lambda: cache_rows() > cached_before, "the rebuild")
    with psycopg.connect(pg_dsn) as conn:
        staging = [r[0] for r in conn.execute("select nspname from pg_namespace where nspname like 'hermit_main_rb%'")]
    assert staging, "the killed rebuild left its staging schema"
    assert _consistent(pg_dsn, ws) == before  # the live index never changed
    cached = cache_rows() - cached_before
    out, err = _hermit(a, pg_dsn, "memory", "index", "--json").communicate(timeout=PROC_TIMEOUT)
    report = json.loads(out)
    assert report["rebuilt"] and report["cache_hits"] >= cached, err
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute("select nspname from pg_namespace where nspname like 'hermit_main_%'").fetchall()
    assert left == []


def test_memory_status_on_postgres_names_the_server_never_the_dsn(tmp_path: Path, pg_dsn: str,
                                                                  srv: FakeEmbeddingServer) -> None:
    ws = tmp_path / "shared"
    write(ws / "MEMORY.md", "# M\n- the boat is moored at pier 9\n")
    home = _home(tmp_path, "host", ws, srv)
    dsn = pg_dsn.replace("postgres@", "postgres:pw-SECRET-123@")  # trust auth: the password is never checked
    out, err = _hermit(home, dsn, "memory", "index").communicate(timeout=PROC_TIMEOUT)
    text = out + err
    out, err = _hermit(home, dsn, "memory", "status").communicate(timeout=PROC_TIMEOUT)
    text += out + err
    assert "store      postgres 18" in out and "schema hermit_main" in out
    assert "pgvector 0.8" in out and "1 vector, exact scan (HNSW index from 10,000 vectors)" in out
    js, err = _hermit(home, dsn, "memory", "status", "--json").communicate(timeout=PROC_TIMEOUT)
    text += js + err
    st = json.loads(js)["store"]
    assert st["vectors"] == 1 and st["hnsw_index"] is False and st["server"].startswith("127.0.0.1:")
    logs = "".join(p.read_text(errors="replace") for p in home.rglob("*") if p.is_file() and p.suffix in
                   (".log", ".jsonl", ".json", ".yaml"))
    for secret in ("pw-SECRET-123", dsn, "postgresql://"):
        assert secret not in text + logs
