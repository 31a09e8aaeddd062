"""A memory file that cannot be indexed (binary, over the size limit, a symlink out of the workspace, a FIFO) is
recorded as skipped with its reason and what to do, and no longer leaves the index "dirty" for good (new-user
audit): `memory status`, doctor and the web app said "dirty"/"updating" forever, every search synced again and
repeated the warning, and the counts did not add up ("8 files (2 indexed, 5 unchanged, 0 removed)"). Once the
file is fixed or removed, the next sync indexes it or forgets it. Both stores (SQLite, PostgreSQL), the real
local model; the CLI and the web app's Browse list end to end."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from starlette.testclient import TestClient

from agenthelpers import fixed_clock
from conftest import write
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import MemorySearchConfig
from hermit.gateway.state import ensure_token
from hermit.gateway.supervisor import Gateway
from hermit.memory.service import MemoryKey, MemoryService
from hermit.testing.scripted import FunctionModel, Reply
from memhelpers import chunk_rows, service
from prochelpers import PROC_TIMEOUT
from test_gateway_webapp import Web

BLOB = bytes(range(256)) * 30  # 7,680 bytes (under the 10,000-byte limit), NUL bytes in them: "looks binary"


def _hostile(ws: Path, outside: Path) -> None:
    """Two good notes and three files that cannot be indexed: binary, too large, a link out of the workspace."""
    write(ws / "MEMORY.md", "# Memory\n- The database is Postgres 16.\n")
    write(ws / "memory" / "2026-12-01.md", "# 2026-12-01\n- Deployed the billing service to Lisbon.\n")
    (ws / "memory" / "blob.md").write_bytes(BLOB)
    write(ws / "memory" / "huge.md", "- a long line of notes\n" * 1_000)
    secret = write(outside / "secret.md", "# secret\n- the vault code is hunter2\n")
    os.symlink(secret, ws / "memory" / "link.md")


def test_unindexable_files_are_recorded_as_skipped_and_the_index_stays_clean(
        workspace: Path, tmp_path: Path, e5: object, store_backend: str) -> None:
    _hostile(workspace, tmp_path / "outside")
    cfg = MemorySearchConfig.model_validate({"max_file_bytes": 10_000})
    svc = service(workspace, tmp_path / "idx.sqlite", e5, cfg)  # type: ignore[arg-type]
    try:
        r = svc.sync()
        assert svc.indexer.is_dirty() is False  # was: dirty for good, whatever was run
        assert (r.files_seen, r.files_indexed, r.files_unchanged, r.files_skipped) == (5, 2, 0, 3)
        assert r.files_seen == r.files_indexed + r.files_unchanged + r.files_skipped
        assert {(s.path, s.reason.split(" (")[0]) for s in r.skips} == {
            ("memory/blob.md", "looks binary"), ("memory/huge.md", "too large"), ("memory/link.md", "a symlink")}
        assert sorted(w.split(":")[0] for w in r.warnings) == ["memory/blob.md", "memory/huge.md", "memory/link.md"]
        assert "1 skipped" not in r.summary() and "3 skipped" in r.summary()
        assert "memory/blob.md (looks binary)" in r.summary()

        # Not dirty: nothing for a sync to do, so the next one changes nothing and says nothing new.
        assert svc.indexer.is_dirty() is False
        st = svc.status()
        assert st["dirty"] is False and st["files"] == 2
        assert [(s["path"], bool(s["fix"])) for s in st["skipped"]] == [
            ("memory/blob.md", True), ("memory/huge.md", True), ("memory/link.md", True)]
        assert "max_file_bytes" in st["skipped"][1]["fix"]
        r = svc.sync()
        assert (r.files_indexed, r.files_unchanged, r.files_skipped, r.warnings) == (0, 2, 3, [])
        res = svc.search("billing service")
        assert res["results"][0]["path"] == "memory/2026-12-01.md"
        assert "warnings" not in res, res.get("warnings")  # no repeated "skipped" / stale dirty on each search
        assert svc.search("hunter2")["results"] == []

        # Fixed: indexed at the next sync (before a search). Removed: forgotten.
        write(workspace / "memory" / "blob.md", "# blob\n- Zanzibar trip booked for March.\n")
        (workspace / "memory" / "link.md").unlink()
        assert svc.indexer.is_dirty() is True and svc.status()["dirty"] is True
        r = svc.sync()
        assert (r.files_indexed, r.files_skipped) == (1, 1)
        assert svc.search("Zanzibar trip")["results"][0]["path"] == "memory/blob.md"
        assert svc.indexer.is_dirty() is False
        assert [s["path"] for s in svc.status()["skipped"]] == ["memory/huge.md"]

        # An indexed note that turns binary loses its chunks and is recorded, once.
        (workspace / "memory" / "2026-12-01.md").write_bytes(BLOB)
        r = svc.sync()
        assert r.files_skipped == 2 and r.warnings == [
            "memory/2026-12-01.md: skipped, looks binary (NUL bytes); memory files must be text"]
        assert "memory/2026-12-01.md" not in {p for p, _, _ in chunk_rows(svc)}
        assert svc.indexer.is_dirty() is False
    finally:
        svc.close()


def test_a_rebuild_records_the_skipped_files_anew(workspace: Path, tmp_path: Path, e5: object,
                                                  store_backend: str) -> None:
    _hostile(workspace, tmp_path / "outside")
    cfg = MemorySearchConfig.model_validate({"max_file_bytes": 10_000})
    svc = service(workspace, tmp_path / "idx.sqlite", e5, cfg)  # type: ignore[arg-type]
    try:
        svc.sync()
        r = svc.sync(force=True)
        assert svc.indexer.is_dirty() is False
        assert r.rebuilt and r.files_skipped == 3 and len(r.warnings) == 3  # --force judges every file again
        assert len(svc.status()["skipped"]) == 3
    finally:
        svc.close()


def test_a_fifo_and_an_unchanged_skip_are_not_read_again(workspace: Path, tmp_path: Path, e5: object) -> None:
    write(workspace / "memory" / "a.md", "# a\n- alpha note\n")
    os.mkfifo(workspace / "memory" / "x.md")
    (workspace / "memory" / "blob.md").write_bytes(BLOB)
    svc = service(workspace, tmp_path / "idx.sqlite", e5)  # type: ignore[arg-type]
    try:
        r = svc.sync()
        assert svc.indexer.is_dirty() is False
        assert (r.files_seen, r.files_indexed, r.files_skipped) == (3, 1, 2)
        fifo = svc.status()["skipped"][1]
        assert (fifo["path"], fifo["reason"]) == ("memory/x.md", "a FIFO") and "regular files" in fifo["fix"]
        assert svc.indexer.is_dirty() is False
        # The same bytes written again (a new mtime): judged again, still skipped, not warned about twice.
        (workspace / "memory" / "blob.md").write_bytes(BLOB)
        assert svc.indexer.is_dirty() is True
        r = svc.sync()
        assert r.files_skipped == 2 and r.warnings == [] and svc.indexer.is_dirty() is False
    finally:
        svc.close()


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                          capture_output=True, timeout=PROC_TIMEOUT)


def test_cli_index_status_and_doctor_say_skipped_not_dirty(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_search:\n      max_file_bytes: 10000\n")
    _hostile(ws, tmp_path / "outside")

    r = _cli(home, "memory", "index")
    assert r.returncode == 0, r.stderr
    assert "5 files (2 indexed, 0 unchanged, 3 skipped, 0 removed)" in r.stdout, r.stdout
    assert "memory/blob.md (looks binary)" in r.stdout
    assert r.stderr.count("warning: memory/blob.md: skipped, looks binary") == 1

    r = _cli(home, "memory", "index")
    assert "5 files (0 indexed, 2 unchanged, 3 skipped, 0 removed)" in r.stdout, r.stdout
    assert "warning:" not in r.stderr  # said once, when first skipped

    r = _cli(home, "memory", "status")
    assert "dirty      no" in r.stdout, r.stdout
    assert "skipped    3 files not indexed:" in r.stdout
    assert r.stdout.count("memory/blob.md: looks binary — memory files must be text") == 1
    assert "memory/link.md: a symlink — memory files may not be symlinks" in r.stdout

    r = _cli(home, "memory", "search", "billing service")
    assert r.returncode == 0 and "memory/2026-12-01.md" in r.stdout
    assert "warning" not in r.stderr, r.stderr

    r = _cli(home, "memory", "index", "--json")
    assert [s["path"] for s in json.loads(r.stdout)["skips"]] == ["memory/blob.md", "memory/huge.md", "memory/link.md"]

    r = _cli(home, "doctor", "--json")
    check = next(c for c in json.loads(r.stdout) if c["name"] == "memory index")
    assert "up to date" in check["detail"] and "dirty" not in check["detail"], check
    assert check["status"] == "warn" and "3 not indexed: memory/blob.md (looks binary)" in check["detail"]
    assert "memory status" in check["fix"]


def _no_model(req: object) -> Reply:
    raise AssertionError("no chat turn in this test")


def test_web_browse_marks_skipped_files_and_status_is_not_updating(tmp_path: Path, e5: object) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    _hostile(ws, tmp_path / "outside")
    loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris",
                                                   "memory_search": {"max_file_bytes": 10_000}}}}, StatePaths(home))
    agent = loaded.agent()
    memory = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search,
                           e5)  # type: ignore[arg-type]
    memory.sync()
    rt = AgentRuntime(agent, FunctionModel(_no_model), memory=memory, clock=fixed_clock, fsync=False, home=home)
    token = ensure_token(home)
    gw = Gateway(loaded, home, {}, {"main": rt}, token, host="127.0.0.1", port=0, channels=[], service_factories=[])
    asyncio.run(gw.webchat.start(gw.bus))
    try:
        with TestClient(gw.app, base_url="http://localhost") as client, \
                client.websocket_connect("ws://localhost/ws") as sock:
            web = Web(sock)
            assert web.ok("connect", token=token, clientId="tab1")["type"] == "hello-ok"
            files = {f["path"]: f for f in web.ok("memory.files")["files"]}
            assert set(files) == {"MEMORY.md", "memory/2026-12-01.md", "memory/blob.md", "memory/huge.md",
                                  "memory/link.md"}
            assert files["memory/2026-12-01.md"]["indexed"] is True and files["memory/2026-12-01.md"]["skipped"] is None
            blob = files["memory/blob.md"]
            assert blob["indexed"] is False and blob["skipped"]["reason"] == "looks binary" and blob["skipped"]["fix"]
            assert blob["modified"] == "not indexed — looks binary"  # where the page shows a note's age
            assert files["memory/link.md"]["skipped"]["reason"] == "a symlink"
            st = web.ok("memory.status")
            assert st["dirty"] is False and [s["path"] for s in st["skipped"]] == [
                "memory/blob.md", "memory/huge.md", "memory/link.md"]
    finally:
        memory.close()
