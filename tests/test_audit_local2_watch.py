"""Audit of the local side, round 2: the journal of notes other chats add while an owner's command runs
(`<workspace>/.hermit-watch/`, memory/policy/added_notes.py) outside that command.

The journal holds other chats' words — a contact's note, a deleted message's copy among them — copied while the
owner's command runs. `hermit backup` stored it (the whole workspace is kept whatever its names), so every
archive taken while a command ran, or after a watcher was killed, carried those copies, and a restore brought
back a journal no command would remove until the owner's next one. A watcher killed mid-command (kill -9 of
`hermit chat`) left its journal on disk until the owner's next command, however long that took. Now backup
leaves the folder out (counted and named), restore never brings one back (an older archive's), and the next
start of an agent on the workspace removes a journal no live watcher holds — never a live one. Pending sign-in
tickets (keys to the gateway token for the gateway process that was running) are left out and never restored
either.
Real `hermit backup` / `hermit restore` subprocesses, real processes killed with -9.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from hermit.cli.main import main
from hermit.gateway.tickets import issue_ticket
from hermit.memory.policy import added_notes
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.workspace import ensure_workspace
from prochelpers import PROC_TIMEOUT

NOTE = "- Gus gets the door code 7741 (a contact's note)\n"
SECRET = b"7741"


def _hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, input=stdin)


def _state(home: Path, extra: Path) -> None:
    """A state dir made by `hermit setup` (called in this process: the backups and restores asserted on are the
    subprocesses) with a second agent on `extra`, each workspace holding a contact's note."""
    stdin, sys.stdin = sys.stdin, io.StringIO("sk-watch-key\n")
    try:
        assert main(["--home", str(home), "setup", "--provider", "openai-compatible", "--base-url",
                     "http://127.0.0.1:9/v1", "--model", "m", "--api-key-stdin", "--no-check"]) == 0
    finally:
        sys.stdin = stdin
    config = yaml.safe_load((home / "hermit.yaml").read_text(encoding="utf-8"))
    config["agents"]["list"] = [{"id": "main"}, {"id": "side", "workspace": str(extra)}]
    (home / "hermit.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for ws in (home / "workspace", extra):
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        (ws / "memory" / "2026-01-20.md").write_text("- the owner's own line\n" + NOTE)


@contextmanager
def _watcher(ws: Path) -> Iterator[int]:
    """Another process (the owner's `hermit chat`) watching a command on `ws` until the block ends; its pid."""
    read, write = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: watch, say so, wait until told (or killed)
        os.close(read)
        os.close(go_w)
        try:
            window = added_notes.watch(ws)
            os.write(write, b"1")
            os.read(go_r, 1)
            added_notes.unwatch(window)
        finally:
            os._exit(0)
    os.close(write)
    os.close(go_r)
    try:
        assert os.read(read, 1) == b"1"
        yield pid
    finally:
        os.close(read)
        os.close(go_w)  # a live child ends its watch; a killed one is reaped here
        os.waitpid(pid, 0)


def _killed_with_journal(ws: Path) -> None:
    """A watcher killed with -9 mid-command after a contact's note reached its journal."""
    with _watcher(ws) as pid:
        added_notes.added(ws / "memory" / "2026-01-20.md", NOTE)  # another chat's note, journaled for it
        assert SECRET in (ws / added_notes.WATCH_DIR / added_notes.JOURNAL).read_bytes()
        os.kill(pid, signal.SIGKILL)


def test_backup_leaves_out_the_watch_journal_of_a_live_and_a_killed_watcher(tmp_path: Path) -> None:
    home, extra = tmp_path / "home", tmp_path / "extra-ws"
    _state(home, extra)
    _killed_with_journal(extra)  # the side agent's workspace: a watcher killed mid-command
    (extra / "notes" / added_notes.WATCH_DIR).mkdir(parents=True)  # a user's folder of that name, deeper: kept
    (extra / "notes" / added_notes.WATCH_DIR / "mine.md").write_text("my own\n")
    ws = home / "workspace"
    (home / "gateway").mkdir(mode=0o700, exist_ok=True)
    issue_ticket(home, os.getpid())  # a phone's sign-in link made a minute ago: a key to the gateway token
    with _watcher(ws):  # the main workspace: a command runs while the backup is taken
        added_notes.added(ws / "memory" / "2026-01-20.md", NOTE)
        assert (ws / added_notes.WATCH_DIR / added_notes.JOURNAL).exists()
        r = _hermit(home, "backup", str(tmp_path / "b.tar.gz"))
    assert r.returncode == 0, r.stderr
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        names = tar.getnames()
        watch = [n for n in names if f"/{added_notes.WATCH_DIR}" in n]
        assert watch == ["hermit-backup/external/side/workspace/notes/.hermit-watch",
                         "hermit-backup/external/side/workspace/notes/.hermit-watch/mine.md"], watch
        manifest = json.loads(tar.extractfile("hermit-backup/manifest.json").read())  # type: ignore[union-attr]
        assert manifest["workspaces"] == ["home/workspace", "external/side/workspace"]
        assert not [n for n in names if "/gateway/ticket-" in n], names
        # the notes themselves are backed up; only the journal's copies are not
        assert tar.extractfile("hermit-backup/home/workspace/memory/2026-01-20.md") is not None
    assert "workspace/.hermit-watch/" in r.stdout and f"{extra}/.hermit-watch/" in r.stdout, r.stdout


def _with_watch_members(src: Path, dst: Path) -> None:
    """`src` as an older `hermit backup` wrote it: no workspaces in its manifest, a `.hermit-watch/` folder (a
    dead marker and a journal holding a contact's note) at the workspace's top, a pending sign-in ticket."""
    with tarfile.open(src) as old, tarfile.open(dst, "w:gz", format=tarfile.PAX_FORMAT) as new:
        for m in old.getmembers():
            data = old.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            if m.name == "hermit-backup/manifest.json":
                manifest = json.loads(data or b"{}")
                manifest.pop("workspaces", None)
                data = json.dumps(manifest).encode()
                m.size = len(data)
            new.addfile(m, io.BytesIO(data) if data is not None else None)
        base = "hermit-backup/home/workspace/.hermit-watch"
        folder = tarfile.TarInfo(base)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o700
        new.addfile(folder)
        ticket = {"ticket": "t", "expires": 9e9, "gateway": 1, "started": 35}
        for name, body in ((f"{base}/added.jsonl", json.dumps({"pid": "1.x", "at": 1, "path": "p", "text": NOTE}) + "\n"),
                           (f"{base}/4242.1.abcd1234", ""),
                           (f"hermit-backup/home/gateway/ticket-{'a' * 64}", json.dumps(ticket))):
            info = tarfile.TarInfo(name)
            raw = body.encode()
            info.size, info.mode = len(raw), 0o600
            new.addfile(info, io.BytesIO(raw))


def test_restore_never_brings_back_a_watch_journal_of_an_older_archive(tmp_path: Path) -> None:
    home, extra = tmp_path / "home", tmp_path / "extra-ws"
    _state(home, extra)
    r = _hermit(home, "backup", str(tmp_path / "b.tar.gz"))
    assert r.returncode == 0, r.stderr
    _with_watch_members(tmp_path / "b.tar.gz", tmp_path / "old.tar.gz")
    target = tmp_path / "restored"
    r = _hermit(target, "restore", str(tmp_path / "old.tar.gz"))
    assert r.returncode == 0, r.stderr
    assert (target / "workspace" / "memory" / "2026-01-20.md").read_text().endswith(NOTE)
    assert not (target / "workspace" / added_notes.WATCH_DIR).exists()
    assert not list((target / "gateway").glob("ticket-*"))
    assert "left out 3 transient files an older backup stored (.hermit-watch/" in r.stdout, r.stdout


def test_an_agents_start_removes_a_dead_journal_and_keeps_a_live_one(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    journal = ws / added_notes.WATCH_DIR / added_notes.JOURNAL
    _killed_with_journal(ws)
    with memory_writes_locked(ws):  # a writer holds the memory lock: the agent starts at once, the journal waits
        started = time.monotonic()
        ensure_workspace(ws)
        assert time.monotonic() - started < 5 and journal.exists()
    ensure_workspace(ws)  # what the gateway's and `hermit chat`'s agents do at start (agent/runtime.py)
    assert not journal.exists()
    assert not [p for p in journal.parent.iterdir()]  # the dead marker is swept too; the folder stays, empty

    # the other side: a watcher alive in another process keeps its journal, and still gets the notes
    with _watcher(ws):
        added_notes.added(ws / "memory" / "2026-01-20.md", NOTE)
        ensure_workspace(ws)
        assert SECRET in journal.read_bytes()
