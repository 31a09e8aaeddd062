"""`hermit gateway install|uninstall` with several state dirs: every state dir's service had the one name
`hermit-gateway.service`, so installing a second one silently replaced the first's unit and uninstalling the
first removed the second's; and install took no --host/--port for the gateway it runs. Now ~/.hermit keeps the
plain name, any other state dir gets one of its own, a unit that runs another state dir's gateway is never
replaced nor removed, and --host/--port go into the unit's command line.

Real `hermit` processes; a fake `systemctl` on PATH answers as a user manager does and logs its calls.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from test_service import env_for, hermit, unit_values

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$SYSTEMCTL_LOG"
exit 0
"""


def setup_env(tmp_path: Path, home: Path) -> dict[str, str]:
    """HOME is tmp_path/user, units go to tmp_path/xdg, `systemctl` is the fake one."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
        (bin_dir / "systemctl").chmod(0o755)
    return env_for(home, tmp_path / "user", XDG_CONFIG_HOME=str(tmp_path / "xdg"),
                   PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SYSTEMCTL_LOG=str(tmp_path / "systemctl.log"))


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "systemctl.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [x for x in lines if x != "--user show-environment"]


def home_of(unit: Path) -> str:
    argv = shlex.split(unit_values(unit.read_text())["ExecStart"])
    return argv[argv.index("--home") + 1]


def started(name: str) -> list[str]:
    """What install asks of systemd: its socket unit (it holds the port) started before the service."""
    return ["--user daemon-reload", f"--user stop {name}.service", f"--user enable --now {name}.socket",
            f"--user enable --now {name}.service"]


def removed(name: str) -> list[str]:
    return [f"--user disable --now {name}.service {name}.socket", "--user daemon-reload"]


def own_name(units: Path, home: Path) -> str:
    """The name of the one unit in `units` that runs `home`'s gateway."""
    names = [p.name.removesuffix(".service") for p in units.glob("*.service") if home_of(p) == str(home)]
    assert len(names) == 1, names
    return names[0]


def test_two_state_dirs_get_two_services_and_each_uninstall_removes_only_its_own(tmp_path: Path) -> None:
    user = tmp_path / "user"
    default, work = user / ".hermit", tmp_path / "Work Hermit"
    units = tmp_path / "xdg" / "systemd" / "user"
    for h in (default, work):
        assert hermit(setup_env(tmp_path, h), "init").returncode == 0

    r = hermit(setup_env(tmp_path, default), "gateway", "install")
    assert r.returncode == 0, r.stderr
    plain = units / "hermit-gateway.service"  # ~/.hermit keeps the plain name
    assert home_of(plain) == str(default)
    assert calls(tmp_path) == started("hermit-gateway")

    r = hermit(setup_env(tmp_path, work), "gateway", "install")
    assert r.returncode == 0, r.stderr
    name = own_name(units, work)
    assert re.fullmatch(r"hermit-gateway-work-hermit-[0-9a-f]{8}", name), name
    assert f"started {name}" in r.stdout and f"journalctl --user -u {name}" in r.stdout
    assert calls(tmp_path) == started(name)
    assert home_of(units / f"{name}.service") == str(work)
    assert home_of(plain) == str(default)  # the first one's unit is untouched

    r = hermit(setup_env(tmp_path, default), "gateway", "uninstall")
    assert r.returncode == 0, r.stderr
    assert calls(tmp_path) == removed("hermit-gateway")
    assert not plain.exists() and not plain.with_suffix(".socket").exists() and home_of(units / f"{name}.service") == str(work)
    again = hermit(setup_env(tmp_path, default), "gateway", "uninstall")
    assert again.returncode == 1 and f"no service file at {plain} (for the state dir {default})" in again.stderr

    r = hermit(setup_env(tmp_path, work), "gateway", "uninstall")
    assert r.returncode == 0, r.stderr
    assert calls(tmp_path) == removed(name)
    assert list(units.iterdir()) == []


def test_a_unit_of_another_state_dir_is_never_replaced_nor_removed_and_an_old_plain_one_is_still_found(
        tmp_path: Path) -> None:
    home1, home2 = tmp_path / "home1", tmp_path / "home2"
    units = tmp_path / "xdg" / "systemd" / "user"
    for h in (home1, home2):
        assert hermit(setup_env(tmp_path, h), "init").returncode == 0
    # home1's service under the plain name, as every version before this one wrote it
    r = hermit(setup_env(tmp_path, home1), "gateway", "install", "--no-start", "--name", "hermit-gateway")
    assert r.returncode == 0, r.stderr
    plain = units / "hermit-gateway.service"
    before = plain.read_text()

    r = hermit(setup_env(tmp_path, home2), "gateway", "install", "--no-start", "--name", "hermit-gateway")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{plain} runs the gateway of another state dir, {home1} (this one is {home2}); not replacing it" \
        in r.stderr, r.stderr
    assert f"HERMIT_HOME={home1} hermit service uninstall" in r.stderr
    r = hermit(setup_env(tmp_path, home2), "gateway", "uninstall", "--name", "hermit-gateway")
    assert r.returncode == 1 and "not removing it" in r.stderr, r.stderr
    assert plain.read_text() == before and calls(tmp_path) == []

    # home1 without --name: its unit under the plain name is the one it reinstalls and removes — never a twin
    r = hermit(setup_env(tmp_path, home1), "gateway", "install", "--no-start")
    assert r.returncode == 0 and f"wrote {plain}" in r.stdout, r.stdout + r.stderr
    assert sorted(p.name for p in units.iterdir()) == ["hermit-gateway.service", "hermit-gateway.socket"]
    r = hermit(setup_env(tmp_path, home2), "gateway", "install", "--no-start")
    assert r.returncode == 0, r.stderr
    name2 = own_name(units, home2)
    assert re.fullmatch(r"hermit-gateway-home2-[0-9a-f]{8}", name2), name2
    r = hermit(setup_env(tmp_path, home1), "gateway", "uninstall")
    assert r.returncode == 0 and not plain.exists(), r.stderr
    assert sorted(p.name for p in units.iterdir()) == [f"{name2}.service", f"{name2}.socket"]

    (units / "hermit-gateway.service").write_text("[Service]\nExecStart=/usr/bin/true\n")  # one written by hand
    r = hermit(setup_env(tmp_path, home1), "gateway", "install", "--no-start", "--name", "hermit-gateway")
    assert r.returncode == 1 and "was not written by `hermit gateway install`" in r.stderr, r.stderr
    assert (units / "hermit-gateway.service").read_text() == "[Service]\nExecStart=/usr/bin/true\n"


def test_install_keeps_host_and_port_in_the_units_command_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = setup_env(tmp_path, home)
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "gateway", "install", "--no-start", "--host", "127.0.0.1", "--port", "40555")
    assert r.returncode == 0, r.stderr
    unit = tmp_path / "xdg" / "systemd" / "user" / f"{own_name(tmp_path / 'xdg' / 'systemd' / 'user', home)}.service"
    argv = shlex.split(unit_values(unit.read_text())["ExecStart"])
    assert argv == [sys.executable, "-P", "-m", "hermit", "--home", str(home), "gateway", "run",
                    "--host", "127.0.0.1", "--port", "40555"]
    assert "gateway run --host 127.0.0.1 --port 40555" in r.stdout
    bad = hermit(env, "gateway", "install", "--no-start", "--port", "70000")
    assert bad.returncode == 1 and "--port 70000 is not a port" in bad.stderr
