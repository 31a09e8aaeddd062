"""Local-side leftovers of the audit (another uid, a root-run Hermit, kill -9):

1. `<state>/hermit.env` was stat'ed, chmod'ed and read by name: a symlink there had a root-run Hermit chmod what
   it names (/etc/passwd to 0600) and read it, `hermit setup` copied the linked file's lines into the new
   hermit.env, and a FIFO there hung every command. Now it is opened O_NOFOLLOW | O_NONBLOCK and judged, chmod'ed
   and read on the descriptor: a link or anything but a regular file is reported, nothing read or changed.
2. A folder `write_beneath` made (a new `memory/<sub>/`) was 0755: another user could list its note names
   wherever the user's own memory/ is 0755. Now 0700.
3. `write_beneath` carried a replaced file's setuid/setgid/sticky bits (and any bits of another user's file):
   now only this user's file's rwx bits are kept.
4. A killed watcher's `.hermit-watch/` journal (other chats' notes) waited for the next command or agent start;
   now a memory sync removes it too — without waiting on a held memory-write lock.
Real files and folders, real forked children as uid 65534, a real FIFO, a real index sync.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from hermit.config.envfile import read_env_file, set_env_values
from hermit.config.schema import MemorySearchConfig
from hermit.errors import ConfigError
from hermit.memory.index.sync import Indexer
from hermit.memory.policy import added_notes
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.store.sqlite import IndexStore
from hermit.tools import safe_fs
from prochelpers import PROC_TIMEOUT, pythonpath

OTHER = 65534
ROOT = os.geteuid() == 0
UIDS = [None, OTHER] if ROOT else [None]  # None: this process's uid (root in CI); OTHER as root only


def _as(uid: int | None, work: Callable[[], Any]) -> Any:
    """`work()`'s JSON-able result, run in a forked child as `uid` (None: this uid); an exception's repr is raised
    here. Everything is imported before the fork: the venv's Python may sit where uid 65534 cannot read."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            out = {"ok": work()}
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = {"error": repr(e)}
        try:
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    got = json.loads(data)
    if "error" in got:
        raise AssertionError(f"the child as uid {uid} failed: {got['error']}")
    return got["ok"]


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every uid may enter (pytest's tmp_path is root-only), removed after."""
    made = Path(tempfile.mkdtemp(prefix="hermit-leftovers-"))
    os.chmod(made, 0o755)
    try:
        yield made
    finally:
        subprocess.run(["rm", "-rf", str(made)], check=True)


def _home(base: Path, uid: int | None) -> Path:
    home = base / f"state-{uid}"
    home.mkdir(mode=0o700)
    if uid is not None:
        os.chown(home, uid, uid)
    return home


# -- 1. hermit.env -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("uid", UIDS)
def test_a_link_at_hermit_env_is_never_chmodded_through_nor_read(base: Path, uid: int | None) -> None:
    home = _home(base, uid)
    target = home / "passwd"  # stands in for /etc/passwd: the user's (root's) own file, readable by all
    target.write_text("root:x:0:0:root:/root:/bin/bash\nOPENAI_BASE_URL=http://127.0.0.1:9/planted\n")
    os.chmod(target, 0o644)
    if uid is not None:
        os.chown(target, uid, uid)
    env = home / "hermit.env"
    env.symlink_to(target)

    def read() -> dict[str, Any]:
        got = read_env_file(env)
        return {"values": got.values, "problems": got.problems}

    got = _as(uid, read)
    assert got["values"] == {}, got  # nothing of the linked file is used
    assert len(got["problems"]) == 1 and "symbolic link" in got["problems"][0] and str(env) in got["problems"][0]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # was chmodded 0600 through the link
    assert env.is_symlink()


@pytest.mark.parametrize("uid", UIDS)
def test_setup_never_copies_a_linked_files_lines_into_hermit_env(base: Path, uid: int | None) -> None:
    home = _home(base, uid)
    target = home / "other.env"
    target.write_text("HTTPS_PROXY=http://127.0.0.1:9\n")
    os.chmod(target, 0o644)
    if uid is not None:
        os.chown(target, uid, uid)
    env = home / "hermit.env"
    env.symlink_to(target)

    def write() -> str:
        try:
            set_env_values(env, {"OPENAI_API_KEY": "sk-new"})
        except ConfigError as e:
            return f"{e} | {e.hint}"
        return "written"

    said = _as(uid, write)
    assert "symbolic link" in said and "will not add your keys" in said and str(env) in said, said
    assert env.is_symlink() and target.read_text() == "HTTPS_PROXY=http://127.0.0.1:9\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


READ_FIFO = """
import json, sys
from pathlib import Path
from hermit.config.envfile import read_env_file
got = read_env_file(Path(sys.argv[1]))
print(json.dumps({"values": got.values, "problems": got.problems}))
"""


def test_a_fifo_at_hermit_env_is_reported_at_once_not_waited_on(base: Path) -> None:
    home = _home(base, None)
    env = home / "hermit.env"
    os.mkfifo(env, 0o644)
    try:  # no writer ever opens it: a read by name waits for ever
        done = subprocess.run([sys.executable, "-c", READ_FIFO, str(env)], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PYTHONPATH": pythonpath()})
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO at hermit.env hung")
    got = json.loads(done.stdout)
    assert got["values"] == {} and "a FIFO" in got["problems"][0] and "mv " in got["problems"][0], got
    assert stat.S_IMODE(env.lstat().st_mode) == 0o644  # nothing done to it


def test_another_users_unreadable_hermit_env_is_still_named_as_theirs(base: Path) -> None:
    need(ROOT, "root, to plant another user's file")  # CI runs as root
    home = _home(base, OTHER)
    env = home / "hermit.env"
    env.write_text("HTTPS_PROXY=http://127.0.0.1:9\n")
    os.chmod(env, 0o600)  # root's, in uid 65534's state dir: not even openable by it

    def read() -> list[str]:
        return read_env_file(env).problems

    assert _as(OTHER, read) == [f"not read: it belongs to another user (uid 0); it holds your keys, so it must be "
                                f"yours and written by you alone (check what it says, then: chown $(id -u) {env} "
                                f"&& chmod 600 {env})"]


def test_a_regular_hermit_env_is_still_read_and_made_owner_only(base: Path) -> None:
    home = _home(base, None)
    env = home / "hermit.env"
    env.write_text("OPENAI_API_KEY=sk-mine\n")
    os.chmod(env, 0o644)
    assert read_env_file(env).values == {"OPENAI_API_KEY": "sk-mine"}
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    set_env_values(env, {"ANTHROPIC_API_KEY": "sk-ant"})
    assert read_env_file(env).values == {"OPENAI_API_KEY": "sk-mine", "ANTHROPIC_API_KEY": "sk-ant"}
    assert stat.S_IMODE(env.stat().st_mode) == 0o600 and not env.is_symlink()


# -- 2. and 3. write_beneath -------------------------------------------------------------------------------

def _workspace(base: Path, uid: int | None) -> Path:
    """A workspace whose memory/ is 0755 (a user's umask 022 folder), owned by `uid`."""
    ws = base / f"ws-{uid}"
    (ws / "memory").mkdir(parents=True)
    for p in (ws, ws / "memory"):
        os.chmod(p, 0o755)
        if uid is not None:
            os.chown(p, uid, uid)
    return ws


@pytest.mark.parametrize("uid", UIDS)
def test_a_folder_write_beneath_makes_is_owner_only(base: Path, uid: int | None) -> None:
    ws = _workspace(base, uid)

    def write() -> list[int]:
        os.umask(0o022)
        fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        try:
            safe_fs.write_beneath(fd, "memory/people/family/gus.md", b"- Gus: the door code is 7741\n")
        finally:
            os.close(fd)
        return [stat.S_IMODE((ws / p).stat().st_mode) for p in ("memory/people", "memory/people/family")]

    assert _as(uid, write) == [0o700, 0o700]
    if ROOT:  # another user enters memory/ (0755) but cannot list the new folder's note names
        def peek() -> str:
            try:
                return ",".join(os.listdir(ws / "memory" / "people" / "family"))
            except PermissionError:
                return "refused"

        other = 1 if uid == OTHER else OTHER  # uid 1 (daemon) looks at uid 65534's folder
        assert os.listdir(ws / "memory") == ["people"]
        assert _as(other, peek) == "refused"


@pytest.mark.parametrize("uid", UIDS)
def test_write_beneath_never_keeps_setuid_setgid_or_sticky_bits(base: Path, uid: int | None) -> None:
    ws = _workspace(base, uid)
    tool = ws / "memory" / "run.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    if uid is not None:
        os.chown(tool, uid, uid)
    os.chmod(tool, 0o6755)  # setuid + setgid (root's, in the root case)
    sticky = ws / "memory" / "notes.md"
    sticky.write_text("- one\n")
    if uid is not None:
        os.chown(sticky, uid, uid)
    os.chmod(sticky, 0o1640)

    def write() -> list[int]:
        fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        try:
            safe_fs.write_beneath(fd, "memory/run.sh", b"#!/bin/sh\nid\n")
            safe_fs.write_beneath(fd, "memory/notes.md", b"- one\n- two\n")
            safe_fs.write_beneath(fd, "memory/new.sh", b"#!/bin/sh\n", mode=0o4755)  # asked for: not given
        finally:
            os.close(fd)
        return [stat.S_IMODE((ws / "memory" / n).stat().st_mode) for n in ("run.sh", "notes.md", "new.sh")]

    assert _as(uid, write) == [0o755, 0o640, 0o755]  # the rwx bits are kept
    assert tool.read_text() == "#!/bin/sh\nid\n"


def test_write_beneath_lends_no_bits_of_another_users_file(base: Path) -> None:
    need(ROOT, "root, to plant another user's file")  # CI runs as root
    ws = _workspace(base, None)
    planted = ws / "memory" / "shared.md"
    planted.write_text("- theirs\n")
    os.chown(planted, OTHER, OTHER)
    os.chmod(planted, 0o666)
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        safe_fs.write_beneath(fd, "memory/shared.md", b"- the owner's text\n")
    finally:
        os.close(fd)
    st = planted.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600)  # was 0666: anyone could read it


# -- 4. a killed watcher's journal and a memory sync -------------------------------------------------------

NOTE = "- Gus gets the door code 7741 (a contact's note)\n"


def _killed_watcher_journal(ws: Path) -> Path:
    """A watcher (the owner's `hermit chat`) killed with -9 mid-command after a contact's note reached its
    journal; the journal's path."""
    read, write = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.close(go_w)
        try:
            added_notes.watch(ws)
            os.write(write, b"1")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(write)
    os.close(go_r)
    try:
        assert os.read(read, 1) == b"1"
        added_notes.added(ws / "memory" / "2026-01-20.md", NOTE)
        os.kill(pid, signal.SIGKILL)
    finally:
        os.close(read)
        os.close(go_w)
        os.waitpid(pid, 0)
    journal = ws / added_notes.WATCH_DIR / added_notes.JOURNAL
    assert b"7741" in journal.read_bytes()
    return journal


def test_a_memory_sync_removes_a_killed_watchers_journal_without_waiting_on_the_lock(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-20.md").write_text("- the owner's own line\n" + NOTE)
    journal = _killed_watcher_journal(ws)
    indexer = Indexer(IndexStore(tmp_path / "index.sqlite"), ws, MemorySearchConfig(), None)
    with memory_writes_locked(ws):  # a writer holds the memory lock (a long flush): the sync does not wait
        report = indexer.sync()
        assert report.files_indexed == 1 and journal.exists()
    (ws / "memory" / "2026-01-21.md").write_text("- next day\n")
    report = indexer.sync()  # what `hermit memory index` and the gateway's watcher run
    assert report.files_indexed == 1
    assert not journal.exists() and list(journal.parent.iterdir()) == []  # the dead marker swept too


def test_a_memory_sync_keeps_a_live_watchers_journal(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    window = added_notes.watch(ws)  # this process watches a command: alive
    try:
        added_notes.added(ws / "memory" / "2026-01-20.md", NOTE)
        journal = ws / added_notes.WATCH_DIR / added_notes.JOURNAL
        Indexer(IndexStore(tmp_path / "index.sqlite"), ws, MemorySearchConfig(), None).sync()
        assert NOTE in "".join(added_notes.additions(window, ws / "memory" / "2026-01-20.md"))
    finally:
        added_notes.unwatch(window)
    assert not journal.exists()  # the last watcher's end removes it, as before


def test_hermit_memory_index_removes_a_killed_watchers_journal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    (ws / "memory").mkdir(parents=True)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search:\n      provider: none\n")
    (ws / "memory" / "2026-01-20.md").write_text("- the owner's own line\n" + NOTE)
    journal = _killed_watcher_journal(ws)
    done = subprocess.run([sys.executable, "-m", "hermit.cli.main", "memory", "index"], capture_output=True,
                          text=True, timeout=PROC_TIMEOUT, env={**os.environ, "HERMIT_HOME": str(home),
                                                                "OMP_WAIT_POLICY": "PASSIVE"})
    assert done.returncode == 0, done.stderr
    assert not journal.exists()
