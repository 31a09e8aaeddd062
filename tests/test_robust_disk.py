"""A full disk is said as such: `memory index`, `memory search`, `agent` and `cron add` on a real full
filesystem (a tmpfs in a private mount namespace) say "the disk is full", never advise deleting the index
and print no traceback; the advice to delete and rebuild stays for an index that really is damaged; a
failed dictionary build leaves no temp file behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from conftest import write
from diskhelpers import RUNNER, FullDiskRun, hermit_on_full_disk, unshare_prefix
from hermit.db import index_error
from hermit.errors import DiskFullError, IndexError_
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

FAST_MEMORY = {"model": "all-MiniLM-L6-v2"}


def _home(tmp: Path, models: dict[str, object] | None = None) -> Path:
    home = tmp / "home"
    defaults: dict[str, object] = {"memory_search": FAST_MEMORY}
    cfg: dict[str, object] = {"agents": {"defaults": defaults}}
    if models:
        defaults["model"] = "fake/m"
        cfg["models"] = models
    write(home / "hermit.yaml", yaml.safe_dump(cfg))
    write(home / "workspace" / "memory" / "2026-12-01.md", "# 2026-12-01\n- The billing database is Postgres.\n")
    return home


def _hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def _says_disk_full(r: FullDiskRun) -> None:
    assert r.rc == 1, r.stderr
    assert "the disk is full" in r.stderr and "free some space" in r.stderr, r.stderr
    assert "delete it" not in r.stderr and "--force" not in r.stderr and "not a usable" not in r.stderr
    assert "Traceback" not in r.stderr


def test_memory_index_and_search_on_a_full_disk_say_so(tmp_path: Path) -> None:
    home = _home(tmp_path)
    for args in (["memory", "index"], ["memory", "search", "billing"]):  # no index yet: creating it fails
        _says_disk_full(hermit_on_full_disk(home, tmp_path / "mnt", *args))
    assert _hermit(home, "memory", "index").returncode == 0
    write(home / "workspace" / "memory" / "2026-12-02.md", "# 2026-12-02\n- The cat is called Tom.\n")
    for args in (["memory", "index"], ["memory", "search", "billing"], ["memory", "index", "--force"]):
        r = hermit_on_full_disk(home, tmp_path / "mnt", *args)  # an index to update: writing it fails
        _says_disk_full(r)
        assert "memory/main.sqlite" in r.files  # nothing was deleted
        assert not [f for f in r.files if ".rebuild-" in f or ".tmp" in f]  # nor left half-made


def test_agent_on_a_full_disk_says_so(tmp_path: Path) -> None:
    with FakeProvider([{"text": "hello", "repeat": True}]) as fake:
        home = _home(tmp_path, {"providers": {"fake": {"type": "anthropic", "base_url": fake.base_url,
                                                       "api_key": "sk-ant-test"}}})
        assert _hermit(home, "agent", "-m", "first").returncode == 0
        _says_disk_full(hermit_on_full_disk(home, tmp_path / "mnt", "agent", "-m", "second"))


def test_cron_add_on_a_full_disk_is_a_clean_error(tmp_path: Path) -> None:
    home = _home(tmp_path)
    r = hermit_on_full_disk(home, tmp_path / "mnt", "cron", "add", "--name", "water", "--every", "1h",
                            "--message", "water the plants")
    _says_disk_full(r)
    assert "cron job file" in r.stderr
    assert not [f for f in r.files if "jobs.json" in f]  # no job file, no temp file


def test_a_failed_dictionary_build_leaves_no_temp_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "cache").mkdir(parents=True)
    stale = src / "cache" / "lexicon-cedict-v3.sqlite.tmp999999999"  # a build killed long ago
    stale.write_bytes(b"x" * 1000)
    code = ("import sys; from pathlib import Path; from hermit.memory.search.lexicon import load_lexicon; "
            "print(load_lexicon(Path(sys.argv[1])))")
    mount = tmp_path / "mnt"
    r = subprocess.run([*unshare_prefix(), sys.executable, str(RUNNER), str(src), str(mount), "1024k", "--",
                        sys.executable, "-c", code, str(mount / "cache")], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0 and out["stdout"].strip() == "None", out  # no dictionary: search goes on without it
    assert out["files"] == [], out["files"]


def test_only_a_damaged_index_gets_the_rebuild_advice(tmp_path: Path) -> None:
    import sqlean as sqlite3

    home = _home(tmp_path)
    assert _hermit(home, "memory", "index").returncode == 0
    db = home / "memory" / "main.sqlite"
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database at all" * 200)
    r = _hermit(home, "memory", "search", "billing")
    assert r.returncode == 1 and "not a usable SQLite database" in r.stderr and "--force" in r.stderr, r.stderr
    # An I/O error with plenty of space is not corruption and not a full disk: no advice to delete.
    io = sqlite3.OperationalError("disk I/O error")
    err = index_error(io, tmp_path / "x.sqlite")
    assert isinstance(err, IndexError_) and "do not delete it" in err.hint
    full = index_error(sqlite3.OperationalError("database or disk is full"), tmp_path / "x.sqlite")
    assert isinstance(full, DiskFullError) and "the disk is full" in full.message
    enospc = index_error(OSError(28, "No space left on device"), tmp_path / "x.sqlite")
    assert isinstance(enospc, DiskFullError)


def test_full_disk_runner_works_for_an_unprivileged_user() -> None:
    """Where mounting is not allowed to the user, a user namespace gives the same full tmpfs (a root run
    checks it as `nobody`)."""
    as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # the venv's may be root's only
    top = Path(tempfile.mkdtemp(prefix="hermit-fullfs-"))  # under /tmp: pytest's own dirs are 0700 root's
    try:
        top.chmod(0o777)
        src = top / "src"
        src.mkdir()
        (src / "a.txt").write_text("x")
        src.chmod(0o755)
        code = "import sys; open(sys.argv[1] + '/b.txt', 'w').write('y' * 100000)"
        r = subprocess.run([*as_user, "unshare", "-r", "-m", python, str(RUNNER), str(src), str(top / "mnt"),
                            "1024k", "--", python, "-c", code, str(top / "mnt")],
                           capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["rc"] == 1 and "No space left on device" in out["stderr"]
        assert "a.txt" in out["files"]
    finally:
        shutil.rmtree(top, ignore_errors=True)
