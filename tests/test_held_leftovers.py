"""What a Hermit process makes and removes again — a room's staging folder, a temp file of an atomic write, a
lexicon build, a command's cgroup — is swept by the next process only once its maker died, and liveness is the maker's lock on
it, not the pid in its name: a pid from another pid namespace, or one reused since, says nothing.

Each case is run with a real second process that makes the thing through Hermit's own code and then forks:
the process whose pid is in the name exits (its pid looks dead), its child keeps the descriptor and the lock
(alive). A sweep keeps that one, and removes a leftover whose name holds a live pid but that nobody holds;
once the holder exits, the next sweep removes the first one too. As root, and as uid 65534 in a folder of its
own.
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

import pytest

from ciguard import need
from hermit.locks import pid_alive
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

# argv: kind, folder. Makes one thing in `folder` the way Hermit does, prints its paths and this pid, forks:
# this process exits at once, its child holds the thing until its stdin closes.
MAKE_AND_ORPHAN = r"""
import json, os, sys
from pathlib import Path
kind, where = sys.argv[1], Path(sys.argv[2])
if kind == "staging":
    from hermit.tools.room_sandbox import new_staging
    paths = [str(new_staging(where)[0])]
elif kind == "temp":
    from hermit.durable import held_temp
    paths = [str(held_temp(where / "sessions.json")[1])]
elif kind == "lexicon":
    from hermit.memory.search.lexicon import held_build
    paths = [str(held_build(where / "lexicon-cedict-v3.sqlite")[1])]
else:
    from hermit.tools.exec_cgroup import CommandCgroup, find_site
    site, why = find_site()
    paths = [str(d) for d in CommandCgroup.create(site, 64 << 20, 8).dirs]
if os.fork():
    print(json.dumps({"paths": paths, "pid": os.getpid()}), flush=True)
    os._exit(0)
sys.stdin.read()
os._exit(0)
"""

# argv: kind, folder. One sweep, as Hermit runs it before its own work.
SWEEP = r"""
import sys
from pathlib import Path
kind, where = sys.argv[1], Path(sys.argv[2])
if kind == "staging":
    from hermit.tools.room_sandbox import sweep_staging
    sweep_staging(where)
elif kind == "temp":
    from hermit.durable import write_atomic
    write_atomic(where / "sessions.json", "{}")
elif kind == "lexicon":
    from hermit.memory.search.lexicon import clean_stale_builds
    clean_stale_builds(where)
else:
    from hermit.tools.exec_cgroup import remove_stale_groups
    remove_stale_groups()
"""

AS_USERS: list[dict[str, Any]] = [{}]
if os.geteuid() == 0:
    AS_USERS.append({"user": 65534, "group": 65534, "extra_groups": []})


def _uid(as_user: dict[str, Any]) -> str:
    return "uid-" + str(as_user.get("user", os.geteuid()))


@pytest.fixture
def folder(request: pytest.FixtureRequest) -> Iterator[tuple[Path, dict[str, Any], str]]:
    """A folder of the test's uid that it alone writes (pytest's tmp_path is root-only), and its interpreter."""
    as_user: dict[str, Any] = request.param
    python = python_as(as_user)
    need(python is not None, f"an interpreter that can import this checkout as {_uid(as_user)}")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="hermit-held-"))
    try:
        os.chmod(base, 0o755)
        where = base / "rooms"
        where.mkdir(mode=0o700)
        if as_user:
            os.chown(where, as_user["user"], as_user["group"])
        yield where, as_user, python
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(python: str, as_user: dict[str, Any], code: str, *args: str, **kw: Any) -> Any:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}
    return subprocess.Popen([python, "-c", code, *args], env=env, text=True, **as_user, **kw)


def _check(kind: str, where: Path, as_user: dict[str, Any], python: str, leftover: Path) -> None:
    """Make `kind` in a second process whose named pid dies while its child holds it; then sweep, twice."""
    maker = _run(python, as_user, MAKE_AND_ORPHAN, kind, str(where), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert maker.stdout is not None and maker.stdin is not None
    made = json.loads(maker.stdout.readline())
    assert maker.wait(PROC_TIMEOUT) == 0 and not pid_alive(made["pid"])  # the pid in the names is gone
    held = [Path(p) for p in made["paths"]]
    assert all(str(made["pid"]) in p.name for p in held)

    def sweep() -> None:
        assert _run(python, as_user, SWEEP, kind, str(where)).wait(PROC_TIMEOUT) == 0

    sweep()
    assert all(p.exists() for p in held), "a live process's folder or file was swept for its pid"
    assert not leftover.exists(), "a leftover nobody holds was kept for a live pid in its name"
    maker.stdin.close()  # the holder exits; its end of stdout closing is the event
    assert maker.stdout.read() == ""
    sweep()
    assert not any(p.exists() for p in held), "a dead holder's leftover was kept"


@pytest.mark.parametrize("folder", AS_USERS, ids=_uid, indirect=True)
def test_a_staging_folder_is_swept_by_its_lock_not_its_pid(folder: tuple[Path, dict[str, Any], str]) -> None:
    where, as_user, python = folder
    leftover = where / f".incoming-{os.getpid()}-left"  # named after a live process, held by none
    leftover.mkdir()
    (leftover / "what-came-back.bin").write_bytes(b"x" * 1000)
    if as_user:
        for p in (leftover, leftover / "what-came-back.bin"):
            os.chown(p, as_user["user"], as_user["group"])
    _check("staging", where, as_user, python, leftover)


@pytest.mark.parametrize("folder", AS_USERS, ids=_uid, indirect=True)
def test_an_atomic_writes_temp_is_swept_by_its_lock_not_its_pid(folder: tuple[Path, dict[str, Any], str]) -> None:
    where, as_user, python = folder
    leftover = where / f".sessions.json.tmp-{os.getpid()}-0123abcd"
    leftover.write_text("{half")
    if as_user:
        os.chown(leftover, as_user["user"], as_user["group"])
    _check("temp", where, as_user, python, leftover)


@pytest.mark.parametrize("folder", AS_USERS, ids=_uid, indirect=True)
def test_a_lexicon_build_is_swept_by_its_lock_not_its_pid(folder: tuple[Path, dict[str, Any], str]) -> None:
    where, as_user, python = folder
    leftover = where / f"lexicon-cedict-v3.sqlite.tmp{os.getpid()}-0123abcd"
    leftover.write_bytes(b"SQLite format 3\x00")
    if as_user:
        os.chown(leftover, as_user["user"], as_user["group"])
    _check("lexicon", where, as_user, python, leftover)


@pytest.mark.parametrize("folder", [{}], ids=_uid, indirect=True)
def test_a_command_cgroup_is_swept_by_its_lock_not_its_pid(folder: tuple[Path, dict[str, Any], str]) -> None:
    from hermit.tools.exec_cgroup import find_site

    where, as_user, python = folder
    site, why = find_site()
    need(site is not None, f"a cgroup Hermit can make ({why})")
    assert site is not None
    leftover = site.memory_parent / f"hermit-exec-{os.getpid()}-999999-left"
    leftover.mkdir()
    try:
        _check("cgroup", where, as_user, python, leftover)
    finally:
        if leftover.exists():
            leftover.rmdir()
