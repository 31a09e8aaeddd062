"""A new user's first commands in a fresh HOME, as root and as another user (uid 65534): `hermit --help` says where
to start (its list of commands is in no order a new user starts from), `hermit setup` with a model that answers,
`hermit doctor` all ok without building the lexicon, and `hermit service status` on a machine without systemd
gives a way to keep the gateway running that works there.

Real `hermit` processes (as uid 65534 through prochelpers.python_as), the fake provider on 127.0.0.1, and a fake
`systemctl` that says what a container's says ("offline")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

NOBODY = 65534
OFFLINE = "#!/bin/sh\ncase \"$*\" in is-system-running) echo offline; exit 1 ;; esac\nexit 1\n"


@pytest.fixture(params=["root", "nobody"])
def user(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, Any], Path]]:
    """(subprocess's user arguments, a fresh HOME of theirs) — in /tmp, which uid 65534 can reach."""
    as_user: dict[str, Any] = {} if request.param == "root" else {"user": NOBODY, "group": NOBODY,
                                                                   "extra_groups": []}
    if as_user and os.geteuid() != 0:
        as_user = {}  # not root: this user is the other one
    top = Path(tempfile.mkdtemp(prefix="hermit-s20-newuser-"))
    top.chmod(0o755)
    home = top / "home"
    home.mkdir()
    (top / "bin").mkdir()
    (top / "bin" / "systemctl").write_text(OFFLINE)
    (top / "bin" / "systemctl").chmod(0o755)
    if as_user:
        os.chown(home, NOBODY, NOBODY)
    try:
        yield as_user, home
    finally:
        shutil.rmtree(top)


def run(as_user: dict[str, Any], home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    python = python_as(as_user)
    assert python is not None, "no interpreter that uid can run"
    env = {"PATH": f"{home.parent / 'bin'}:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": pythonpath(),
           "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([python, "-P", "-m", "hermit", *args], capture_output=True, text=True, env=env,
                          timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL, **as_user)


def test_a_new_users_first_commands(user: tuple[dict[str, Any], Path]) -> None:
    as_user, home = user
    r = run(as_user, home, "--help")
    assert r.returncode == 0, r.stderr
    assert "first time: `hermit setup`" in r.stdout and "`hermit service install` keeps the gateway" in r.stdout
    with FakeProvider([{"text": "hello", "repeat": True}]) as fake:
        r = run(as_user, home, "setup", "--provider", "fake", "--base-url", fake.openai_base_url)
        assert r.returncode == 0, r.stdout + r.stderr
        r = run(as_user, home, "doctor")
    assert "[FAIL]" not in r.stdout, r.stdout
    assert "its lookup table is built by the first search" in r.stdout
    assert not list((home / ".hermit" / "cache").glob("lexicon-*"))
    r = run(as_user, home, "service", "status")
    assert r.returncode == 1, r.stdout
    assert "this machine does not run systemd" in r.stderr and "gateway run" in r.stderr, r.stderr
    assert "`hermit service install`" not in r.stderr
    st = (home / ".hermit").stat()
    assert st.st_uid == (NOBODY if as_user else os.geteuid()) and st.st_mode & 0o077 == 0


def test_a_group_typed_alone_lists_its_subcommands(tmp_path: Path) -> None:
    """`hermit service` (or `memory`, `cron`…) without a subcommand said only "the following arguments are
    required: SUBCOMMAND"; it now prints the group's help, each subcommand with its line, and exits 2."""
    env = {**os.environ, "HOME": str(tmp_path), "HERMIT_HOME": str(tmp_path / "state"), "OMP_WAIT_POLICY": "PASSIVE"}
    for group, expected in (("service", "    restart   restart the service's gateway"),
                            ("memory", "    get       read a memory file or a line range of it"),
                            ("gateway", "    run       run the gateway in the foreground")):
        r = subprocess.run([sys.executable, "-m", "hermit", group], capture_output=True, text=True, env=env,
                           timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)
        assert r.returncode == 2 and r.stdout == "", r.stdout
        assert expected in r.stderr, r.stderr
        assert r.stderr.endswith(f"hermit {group}: error: give one of the subcommands above\n"), r.stderr
    r = subprocess.run([sys.executable, "-m", "hermit", "memory", "get"], capture_output=True, text=True, env=env,
                       timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)  # other missing arguments: argparse's words
    assert r.returncode == 2 and "the following arguments are required: path" in r.stderr, r.stderr
