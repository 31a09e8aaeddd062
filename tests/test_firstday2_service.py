"""`hermit gateway uninstall` in a container (no systemd: `systemctl is-system-running` says "offline"): it removed
the unit and then said to stop the service with `systemctl --user disable --now …`, which fails there ("Failed to
connect to bus") for a service that never ran. Now it says what is true there: the service never ran, nothing to
disable, and how a gateway started another way is stopped. Where systemd runs, the advice stands.

Real `hermit` processes; the fake `systemctl` of test_firstday_service answers as systemd does and logs its calls."""

from __future__ import annotations

from pathlib import Path

from hermit.cli.service import unit_name_for
from test_firstday_service import machine
from test_service import hermit


def test_uninstall_without_systemd_offers_no_systemctl_step(tmp_path: Path) -> None:
    home = tmp_path / "state"
    env = machine(tmp_path, home, "offline")
    assert hermit(env, "init").returncode == 0
    assert hermit(env, "gateway", "install", "--no-start").returncode == 0  # the unit, for an image booting systemd
    unit = tmp_path / "xdg" / "systemd" / "user" / f"{unit_name_for(home, tmp_path / 'user')}.service"
    assert unit.is_file()
    r = hermit(env, "gateway", "uninstall")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not unit.exists()
    assert f"removed {unit}" in r.stdout
    assert "this machine does not run systemd" in r.stdout and "nothing to disable" in r.stdout, r.stdout
    assert "hermit gateway status" in r.stdout
    assert "systemctl" not in r.stdout + r.stderr
    calls = (tmp_path / "systemctl.log").read_text().splitlines()
    assert "is-system-running" in calls and not any("disable" in c for c in calls), calls


def test_uninstall_with_systemd_but_no_user_manager_still_gives_the_systemctl_step(tmp_path: Path) -> None:
    home = tmp_path / "state"
    env = machine(tmp_path, home, "running")
    assert hermit(env, "init").returncode == 0
    assert hermit(env, "gateway", "install", "--no-start").returncode == 0
    r = hermit(env, "gateway", "uninstall")
    assert r.returncode == 0, r.stdout + r.stderr
    name = unit_name_for(home, tmp_path / "user")
    assert f"if it is running, stop it with: systemctl --user disable --now {name}.service" in r.stdout, r.stdout
