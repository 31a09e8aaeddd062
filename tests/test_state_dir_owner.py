"""A state dir another local user controls is refused (audit G): with `HERMIT_HOME=/tmp/x` made by someone else
first, `hermit setup` wrote the owner's keys into a folder they could read and rename, and kept their own
planted lines (a proxy) in the new hermit.env. The other user is uid 65534 (files chowned to it, as root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ciguard import need
from prochelpers import PROC_TIMEOUT

THEIRS = 65534
KEY = "sk-ant-OWNERS-KEY-5521"


def hermit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.endswith("_PROXY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=PROC_TIMEOUT)


def setup(home: Path) -> subprocess.CompletedProcess[str]:
    return hermit(home, "setup", "--provider", "anthropic", "--api-key-stdin", "--no-check", stdin=KEY + "\n")


def test_a_state_dir_or_a_parent_of_another_user_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root (to hand a folder to another uid)")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chmod(theirs, 0o777)
    os.chown(theirs, THEIRS, THEIRS)
    (theirs / "hermit.env").write_text("HTTPS_PROXY=http://127.0.0.1:9\n")
    os.chown(theirs / "hermit.env", THEIRS, THEIRS)
    r = setup(theirs)
    assert r.returncode == 1 and f"the state dir {theirs} belongs to another user (uid {THEIRS})" in r.stderr, r.stderr
    assert sorted(p.name for p in theirs.iterdir()) == ["hermit.env"] and KEY not in (theirs / "hermit.env").read_text()
    doctor = hermit(theirs, "doctor")
    assert "belongs to another user" in doctor.stdout + doctor.stderr

    inside = tmp_path / "parent" / "home"  # a folder of ours inside one they own: they could swap it
    inside.parent.mkdir()
    os.chown(inside.parent, THEIRS, THEIRS)
    r = setup(inside)
    assert r.returncode == 1 and f"is inside {inside.parent}, which belongs to another user" in r.stderr, r.stderr
    assert not inside.exists()


def test_their_hermit_env_or_hermit_yaml_in_our_state_dir_is_never_used(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root (to hand a file to another uid)")
    home = tmp_path / "home"
    assert hermit(home, "init").returncode == 0
    env = home / "hermit.env"
    env.write_text("HTTPS_PROXY=http://127.0.0.1:9\nANTHROPIC_API_KEY=sk-ant-theirs\n")
    os.chown(env, THEIRS, THEIRS)
    r = setup(home)  # their lines would be kept beside the key
    assert r.returncode == 1 and "belongs to another user" in r.stderr and "will not add your keys" in r.stderr
    assert KEY not in env.read_text()
    listed = hermit(home, "models", "list")
    assert "not read: it belongs to another user (uid 65534)" in listed.stderr, listed.stderr
    os.unlink(env)
    assert setup(home).returncode == 0 and KEY in env.read_text() and os.stat(env).st_uid == os.geteuid()

    os.chown(home / "hermit.yaml", THEIRS, THEIRS)
    r = hermit(home, "models", "list")
    assert r.returncode == 1 and f"the config file {home / 'hermit.yaml'} belongs to another user" in r.stderr

    os.chown(home / "hermit.yaml", os.geteuid(), os.getegid())
    os.chmod(home, 0o777)  # ours, but every user may write it: they could plant either file
    r = hermit(home, "models", "list")
    assert r.returncode == 1 and "can be written by every user (mode 777)" in r.stderr, r.stderr


def test_a_linked_hermit_home_is_followed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HERMIT_HOME naming a link in another user's folder was checked at its target, then followed again at
    every use: re-pointed in between, the owner's key went into the other user's folder (audit R). The state
    dir is resolved once; what the commands write goes where the checks looked."""
    from hermit.cli.context import CliContext
    from hermit.config.envfile import env_file_path, set_env_values

    need(os.geteuid() == 0, "root (to hand a folder to another uid)")
    theirs, own, trap = tmp_path / "theirs", tmp_path / "own", tmp_path / "trap"
    for d in (theirs, own, trap):
        d.mkdir(mode=0o700)
    os.chown(theirs, THEIRS, THEIRS)
    link = theirs / "h"
    link.symlink_to(own)
    monkeypatch.setenv("HERMIT_HOME", str(link))
    ctx = CliContext.from_args(None, None, None, False)
    assert ctx.home == own
    link.unlink()
    link.symlink_to(trap)  # the other user re-points it after the checks
    set_env_values(env_file_path(ctx.home), {"ANTHROPIC_API_KEY": KEY})
    assert KEY in (own / "hermit.env").read_text() and list(trap.iterdir()) == []
