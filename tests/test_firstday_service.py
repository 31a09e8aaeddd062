"""`hermit gateway install` on a machine without systemd (a container — the first-day walk ran in one): it wrote a
unit that can never start, exited 0 and told the user to run `systemctl --user daemon-reload` and `enable --now`,
which fail there the same way ("Failed to connect to bus"), with no word of what to do instead. Now it writes
nothing, exits 1 and gives the exact gateway command to keep running another way (the container's command, or in
the background); `--no-start` still writes the unit. Where systemd does run but this shell reaches no user manager
(su, sudo, ssh without a session), the unit is written and the steps say how to get one.

Real `hermit` processes; a fake `systemctl` on PATH answers as systemd does in each case (`is-system-running`
says "offline" where PID 1 is not systemd) and logs its calls."""

from __future__ import annotations

import os
import pwd
import shlex
import sys
from pathlib import Path

from hermit.cli.service import unit_name_for
from test_service import env_for, hermit

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$SYSTEMCTL_LOG"
case "$*" in
  is-system-running) echo "$SYSTEM_STATE"; [ "$SYSTEM_STATE" = running ] ;;
  "--user show-environment") echo "Failed to connect to bus: No medium found" >&2; exit 1 ;;
  *) echo "Failed to connect to bus: No medium found" >&2; exit 1 ;;
esac
"""


def machine(tmp_path: Path, home: Path, state: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    return env_for(home, tmp_path / "user", XDG_CONFIG_HOME=str(tmp_path / "xdg"), SYSTEM_STATE=state,
                   PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SYSTEMCTL_LOG=str(tmp_path / "systemctl.log"))


def test_without_systemd_install_writes_nothing_and_gives_the_command_to_keep_running(tmp_path: Path) -> None:
    home = tmp_path / "state"
    env = machine(tmp_path, home, "offline")
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "gateway", "install", "--port", "18999")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "this machine does not run systemd (a container, or another init system)" in r.stderr
    assert "nothing was written" in r.stderr
    command = shlex.join([sys.executable, "-P", "-m", "hermit", "--home", str(home), "gateway", "run", "--port",
                          "18999"])
    assert f"\n      {command}\n" in r.stderr, r.stderr  # the container's command, exactly
    assert f"nohup {command} >/dev/null 2>&1 &" in r.stderr
    assert "systemctl --user" not in r.stdout + r.stderr  # steps that fail here are not offered
    assert not (tmp_path / "xdg").exists()
    calls = (tmp_path / "systemctl.log").read_text().splitlines()
    assert calls == ["--user show-environment", "is-system-running"], calls

    kept = hermit(env, "gateway", "install", "--no-start")  # a unit for an image that boots systemd later
    assert kept.returncode == 0, kept.stderr
    assert (tmp_path / "xdg" / "systemd" / "user" / f"{unit_name_for(home, tmp_path / 'user')}.service").is_file()


def test_with_systemd_but_no_user_manager_the_unit_is_written_and_the_steps_say_how_to_get_one(tmp_path: Path) -> None:
    home = tmp_path / "user" / ".hermit"
    env = machine(tmp_path, home, "running")
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "gateway", "install")
    assert r.returncode == 0, r.stderr
    unit = tmp_path / "xdg" / "systemd" / "user" / "hermit-gateway.service"
    assert unit.is_file()
    me = pwd.getpwuid(os.getuid()).pw_name
    assert f"no user manager of {me}'s answers in this shell" in r.stdout, r.stdout
    assert f"as root: loginctl enable-linger {me}" in r.stdout
    assert "    systemctl --user enable --now hermit-gateway.service" in r.stdout

