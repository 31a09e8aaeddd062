"""Two Hermit state dirs on one PostgreSQL database and role: one's memory never shows in the other's search.

Before: a second state dir (another person's install, a test profile) pointed at the same DSN and
`schema_prefix` opened `hermit_main` as its own, searched the first one's notes as its memory and synced its
own files into the same tables. Now each state dir has an id (`state-id`) and each schema records the ids it
belongs to: another state dir is refused before it reads a row, with what to change; `hermit memory claim`
adds a state dir on purpose (several hosts, one memory) and `--only` takes the schema over; a state dir
restored from `hermit backup` keeps its id and opens its schema as before. The commands that only set a test
up (the first index, a claim or a backup the test does not look at) run in this process (`prepare`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ciguard import need
from conftest import write
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from prochelpers import PROC_TIMEOUT, python_as, pythonpath
from test_pg_processes import _hermit, _home, prepare

SECRET = "- Alice's note: the safe code is 4711."


@pytest.fixture
def srv() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer() as server:
        yield server


def _run(home: Path, dsn: str, *args: str) -> tuple[int, str, str]:
    proc = _hermit(home, dsn, *args)
    out, err = proc.communicate(timeout=PROC_TIMEOUT)
    return proc.returncode, out, err


def _two(tmp_path: Path, srv: FakeEmbeddingServer) -> tuple[Path, Path]:
    ws_a, ws_b = tmp_path / "alice-notes", tmp_path / "bob-notes"
    write(ws_a / "MEMORY.md", f"# Alice\n{SECRET}\n")
    write(ws_b / "MEMORY.md", "# Bob\n- Bob's note: buy oat milk.\n")
    return _home(tmp_path, "alice", ws_a, srv), _home(tmp_path, "bob", ws_b, srv)


def _texts(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(str(r[0]) for r in conn.execute("select text from hermit_main.chunks"))


def test_a_second_state_dir_is_refused_and_never_sees_the_first_ones_notes(
        tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bob = _two(tmp_path, srv)
    config = (bob / "hermit.yaml").read_text()  # Bob's search reads the index as it is (no sync first)
    write(bob / "hermit.yaml", config.replace("store: {backend: postgres}\n", "store: {backend: postgres}\n"
                                              "      sync: {on_search: false}\n", 1))
    prepare(monkeypatch, alice, pg_dsn, "memory", "index")
    rows = _texts(pg_dsn)

    for args in (("memory", "search", "safe code", "--json"), ("memory", "index"),
                 ("memory", "migrate", "--to", "sqlite")):
        rc, out, err = _run(bob, pg_dsn, *args)
        print(args, rc, out[-500:], err[-800:])
        assert "4711" not in out, f"{args}: Alice's note in Bob's {args[1]}"
        assert rc == 1, args
        assert "hermit_main" in err and "schema_prefix" in err and "hermit memory claim" in err, err
        assert "postgresql://" not in out + err
    assert _texts(pg_dsn) == rows  # nothing of Bob's went into Alice's schema
    rc, out, err = _run(bob, pg_dsn, "doctor", "--json")
    postgres = {c["name"]: c for c in json.loads(out)}["postgres"]
    assert postgres["status"] == "fail" and "belongs to another state dir" in postgres["detail"], postgres
    assert "hermit memory claim --agent main" in postgres["fix"]
    assert not (bob / "memory" / "main.sqlite").exists()  # nor did the migration copy Alice's out

    rc, out, err = _run(alice, pg_dsn, "memory", "search", "safe code", "--json")
    assert rc == 0 and "4711" in json.loads(out)["results"][0]["snippet"], err


def test_claim_adds_a_host_on_purpose_and_only_takes_the_schema_over(
        tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bob = _two(tmp_path, srv)
    prepare(monkeypatch, alice, pg_dsn, "memory", "index")
    rc, out, err = _run(bob, pg_dsn, "memory", "claim")
    assert rc == 0 and "belongs to this state dir" in out and "1 other" in out, out + err
    for home in (alice, bob):  # both are hosts of one memory now
        assert _run(home, pg_dsn, "memory", "search", "safe code", "--json")[0] == 0

    rc, out, err = _run(bob, pg_dsn, "memory", "claim", "--only", "--json")
    report = json.loads(out)
    assert rc == 0 and report["schema"] == "hermit_main" and len(report["before"]) == 2, out + err
    rc, _, err = _run(alice, pg_dsn, "memory", "search", "safe code", "--json")
    assert rc == 1 and "hermit memory claim" in err


def test_a_restored_state_dir_opens_its_schema_and_a_lost_id_is_refused(
        tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    alice, _ = _two(tmp_path, srv)
    prepare(monkeypatch, alice, pg_dsn, "memory", "index")
    archive = tmp_path / "alice.tar.gz"
    prepare(monkeypatch, alice, pg_dsn, "backup", str(archive))
    moved = tmp_path / "new-disk" / "alice"
    rc, out, err = _run(moved, pg_dsn, "restore", str(archive))
    assert rc == 0, out + err
    assert (moved / "state-id").read_text() == (alice / "state-id").read_text()
    rc, out, err = _run(moved, pg_dsn, "memory", "search", "safe code", "--json")
    assert rc == 0 and "4711" in json.loads(out)["results"][0]["snippet"], err

    (moved / "state-id").unlink()  # restored from an older backup, or removed by hand: a new id, refused
    rc, out, err = _run(moved, pg_dsn, "memory", "search", "safe code", "--json")
    assert rc == 1 and "4711" not in out and "hermit memory claim" in err, err
    assert _run(moved, pg_dsn, "memory", "claim", "--only")[0] == 0
    assert _run(moved, pg_dsn, "memory", "search", "safe code", "--json")[0] == 0


def test_a_rebuild_keeps_every_host_of_the_schema(tmp_path: Path, pg_dsn: str, srv: FakeEmbeddingServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`index --force` fills a staging schema and swaps it in: the swapped-in index belongs to the same state
    dirs as the old one, not only to the one that rebuilt it."""
    alice, _ = _two(tmp_path, srv)
    host_b = _home(tmp_path, "host-b", tmp_path / "alice-notes", srv)  # another host of the same notes
    prepare(monkeypatch, alice, pg_dsn, "memory", "index")
    prepare(monkeypatch, host_b, pg_dsn, "memory", "claim")
    rc, out, err = _run(alice, pg_dsn, "memory", "index", "--force")
    assert rc == 0, out + err
    for home in (host_b, alice):
        rc, out, err = _run(home, pg_dsn, "memory", "search", "safe code", "--json")
        assert rc == 0 and "4711" in json.loads(out)["results"][0]["snippet"], err


AS_USERS: list[dict[str, Any]] = [{}]
if os.geteuid() == 0:
    AS_USERS.append({"user": 65534, "group": 65534, "extra_groups": []})

STATE_ID = r"""
import sys
from pathlib import Path
from hermit.errors import StoreError
from hermit.memory.store.postgres.claim import StateId
try:
    print(StateId.of(Path(sys.argv[1])).value)
except StoreError as e:
    print("refused:", e.message)
"""


@pytest.mark.parametrize("as_user", AS_USERS, ids=lambda u: "uid-" + str(u.get("user", os.geteuid())))
def test_the_state_id_is_the_owners_own_file_and_never_a_link(as_user: dict[str, Any]) -> None:
    python = python_as(as_user)
    need(python is not None, f"an interpreter that can import this checkout as uid {as_user.get('user')}")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="hermit-state-id-"))  # not under /root: the other uid reaches it
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        home.mkdir(mode=0o700)
        if as_user:
            os.chown(home, as_user["user"], as_user["group"])

        def state_id() -> str:
            done = subprocess.run([python, "-c", STATE_ID, str(home)], capture_output=True, text=True,
                                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}, timeout=PROC_TIMEOUT,
                                  **as_user)
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()

        first = state_id()
        st = (home / "state-id").stat()
        assert len(first) == 32 and st.st_mode & 0o777 == 0o600 and st.st_uid == as_user.get("user", os.geteuid())
        assert state_id() == first  # made once, then kept
        (home / "state-id").unlink()
        elsewhere = base / "planted-id"
        elsewhere.write_text("0" * 32 + "\n")
        os.symlink(elsewhere, home / "state-id")
        if as_user:
            os.lchown(home / "state-id", as_user["user"], as_user["group"])
        assert state_id().startswith("refused:")  # a link is not followed, and no new id is made over it
    finally:
        shutil.rmtree(base, ignore_errors=True)
