"""End to end: the `hermit` CLI as a subprocess against a temp HERMIT_HOME (init, index, search, get, status)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import write
from prochelpers import PROC_TIMEOUT


def run(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                          capture_output=True, input=stdin, timeout=PROC_TIMEOUT)


def test_init_index_search_get_status(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = run(home, "init")
    assert r.returncode == 0, r.stderr
    ws = home / "workspace"
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "IDENTITY.md", "HEARTBEAT.md", "BOOTSTRAP.md",
                 "MEMORY.md"):
        assert (ws / name).is_file(), name
    assert (home / "hermit.yaml").is_file()
    assert "memory_search" in (ws / "AGENTS.md").read_text() or "memory" in (ws / "AGENTS.md").read_text()

    # init never overwrites
    (ws / "SOUL.md").write_text("my own soul\n")
    assert run(home, "init").returncode == 0
    assert (ws / "SOUL.md").read_text() == "my own soul\n"

    write(ws / "memory" / "2026-11-20.md", "# 2026-11-20\n\n- Moved POSTGRES_URL to db.internal:5432.\n"
                                            "- 决定把数据库迁移到托管服务。\n")
    r = run(home, "memory", "index")
    assert r.returncode == 0, r.stderr
    assert "chunks" in r.stdout and "embedded" in r.stdout and "cache hits" in r.stdout

    r = run(home, "memory", "search", "POSTGRES_URL", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert set(res) == {"results", "provider", "model"}
    assert res["results"][0]["path"] == "memory/2026-11-20.md"
    assert res["results"][0]["startLine"] == 1 and res["results"][0]["endLine"] == 4

    r = run(home, "memory", "search", "数据库迁移", "--max-results", "1")
    assert r.returncode == 0 and "memory/2026-11-20.md:" in r.stdout

    r = run(home, "memory", "get", "memory/2026-11-20.md", "--from", "3", "--lines", "1", "--json")
    assert json.loads(r.stdout) == {"path": "memory/2026-11-20.md", "text": "- Moved POSTGRES_URL to db.internal:5432."}

    r = run(home, "memory", "get", "../hermit.yaml")
    assert r.returncode == 1 and "error: path escapes the workspace" in r.stderr and "hint:" in r.stderr
    assert "Traceback" not in r.stderr

    r = run(home, "memory", "status", "--json")
    st = json.loads(r.stdout)
    assert st["provider"] == "local" and st["dims"] == 384 and st["files"] == 2 and st["dirty"] is False
    assert st["vector"]["available"] is True and st["vector"]["backend"] == "vec0"

    r = run(home, "doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[ok  ] sqlite-vec" in r.stdout and "[ok  ] embedding model" in r.stdout


def test_batch_queries_one_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "workspace" / "MEMORY.md", "# M\n- Alice Chen leads data platform.\n- Bob runs infra.\n")
    queries = "\n".join(json.dumps({"id": f"q{i}", "query": q})
                        for i, q in enumerate(["Alice", "who runs infrastructure", "nothing matches zzzz"]))
    r = run(home, "memory", "search", "--json", "--queries", "-", stdin=queries + "\n")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["id"] for x in lines] == ["q0", "q1", "q2"]
    assert lines[0]["results"][0]["path"] == "MEMORY.md"
    assert all("results" in x for x in lines)
    bad = run(home, "memory", "search", "--json", "--queries", "-", stdin="not json\n")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"].startswith("line 1: expected a JSON object")


def test_config_error_is_actionable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_serch: {}\n")
    r = run(home, "memory", "status")
    assert r.returncode == 1
    assert "unknown key 'agents.defaults.memory_serch'" in r.stderr and "memory_search" in r.stderr
    assert "Traceback" not in r.stderr
    r = run(home, "doctor")
    assert r.returncode == 1 and "[FAIL] config" in r.stdout


def test_watcher_reindexes_after_debounce(tmp_path: Path, e5: object) -> None:
    from hermit.config.schema import MemorySearchConfig
    from hermit.memory.index.watch import watch_memory
    from memhelpers import service

    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# M\n- seed\n")
    cfg = MemorySearchConfig.model_validate({"sync": {"debounce_ms": 300}})
    svc = service(ws, tmp_path / "idx.sqlite", e5, cfg)  # type: ignore[arg-type]
    svc.sync()
    stop = threading.Event()
    reports: list[object] = []
    lock = threading.Lock()

    def sync() -> object:
        with lock:
            return svc.sync()

    watching = threading.Event()
    t = threading.Thread(target=watch_memory, args=(ws, [], sync),
                         kwargs={"debounce_ms": 300, "stop": stop, "on_report": reports.append,
                                 "on_ready": watching.set}, daemon=True)
    t.start()
    assert watching.wait(PROC_TIMEOUT)
    try:
        write(ws / "memory" / "2026-12-01.md", "# d\n- The locksmith code is 7731.\n")
        (ws / "memory" / "tmp.md").write_text("# temp\n")
        (ws / "memory" / "tmp.md").rename(ws / "memory" / "renamed.md")
        write(ws / "notes.txt", "ignored\n")
        deadline = time.monotonic() + PROC_TIMEOUT
        found = False
        while time.monotonic() < deadline and not found:
            time.sleep(0.1)
            with lock:
                conn = svc.store.conn
                found = bool(conn.execute("select 1 from files where path='memory/2026-12-01.md'").fetchone())
        assert found, "the watcher re-indexed the new file"
        want = {"MEMORY.md", "memory/2026-12-01.md", "memory/renamed.md"}  # the rename too, never notes.txt
        paths: set[str] = set()
        while time.monotonic() < deadline and paths != want:
            with lock:
                paths = {r[0] for r in svc.store.conn.execute("select path from files")}
            time.sleep(0.05)
        assert paths == want
        with lock:
            assert svc.search("locksmith code")["results"][0]["path"] == "memory/2026-12-01.md"
    finally:
        stop.set()
        t.join(timeout=10)
        svc.close()
