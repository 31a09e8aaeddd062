"""`hermit service install` writes a socket unit beside the service (cli/service.py): systemd holds the gateway's
listening sockets — 127.0.0.1 and [::1] at its port, as gateway/listen.py binds them — and hands them to the gateway
(tests/test_s21_socket_activation.py runs that hand-over for real), so the port never goes free while the gateway
restarts. The units are checked by `systemd-analyze verify` (this machine has no user manager, so in system mode: it
parses every line and checks ExecStart's program; a misspelled copy shows the check is not blind). Real `hermit`
processes; a fake `systemctl` logs what install, stop and uninstall ask of the user manager."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hermit.cli.service import listen_addresses
from test_service import hermit, unit_values
from test_service_homes import calls, own_name, removed, setup_env, started


def verify(*units: Path) -> str:
    """What `systemd-analyze verify` says of `units` (its warnings go to stderr; it exits 0 even then)."""
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze (package systemd) is needed"
    done = subprocess.run([tool, "verify", *map(str, units)], capture_output=True, text=True, timeout=60,
                          cwd=units[0].parent)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_install_writes_a_socket_unit_holding_both_loopback_addresses_and_systemd_accepts_both_units(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = setup_env(tmp_path, home)
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "service", "install", "--port", "40555")
    assert r.returncode == 0, r.stderr
    units = tmp_path / "xdg" / "systemd" / "user"
    name = own_name(units, home)
    service, socket_unit = units / f"{name}.service", units / f"{name}.socket"
    assert calls(tmp_path) == started(name)  # the socket (the port) first, then the service that takes it
    addresses = listen_addresses("127.0.0.1", 40555)
    assert addresses is not None and addresses[0] == "127.0.0.1:40555"
    listens = [x.removeprefix("ListenStream=") for x in socket_unit.read_text().splitlines()
               if x.startswith("ListenStream=")]
    assert listens == addresses  # and [::1]:40555 where this machine has IPv6 loopback
    assert f"holds {', '.join(addresses)}" in r.stdout
    values = unit_values(service.read_text())
    assert values["Requires"] == f"{name}.socket" and values["After"].endswith(f"{name}.socket"), values
    assert socket_unit.stat().st_mode & 0o777 == 0o644
    assert verify(socket_unit, service) == ""  # no warning about any line
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / socket_unit.name).write_text(socket_unit.read_text().replace("ListenStream=", "ListenStrem=", 1))
    (broken / service.name).write_text(service.read_text())
    assert "Unknown key 'ListenStrem'" in verify(broken / socket_unit.name, broken / service.name)

    status = hermit(env, "service", "status")
    assert status.returncode == 3, status.stderr  # installed, its gateway not running (the fake manager runs none)
    assert f"socket   {name}.socket (" in status.stdout and "holds the gateway's port" in status.stdout, status.stdout

    stop = hermit(env, "service", "stop")
    assert stop.returncode == 0, stop.stderr
    assert "its socket unit keeps the port taken" in stop.stdout, stop.stdout
    assert calls(tmp_path)[-1] == f"--user stop {name}.service"  # the socket stays: nobody else gets the port

    r = hermit(env, "service", "uninstall")
    assert r.returncode == 0 and not service.exists() and not socket_unit.exists(), r.stderr
    assert calls(tmp_path) == removed(name)  # disabling the socket lets the port go with the service


def test_a_service_on_a_port_chosen_at_each_start_gets_no_socket_unit_and_an_old_one_is_let_go(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = setup_env(tmp_path, home)
    assert hermit(env, "init").returncode == 0
    assert hermit(env, "service", "install", "--port", "40556").returncode == 0
    units = tmp_path / "xdg" / "systemd" / "user"
    name = own_name(units, home)
    calls(tmp_path)
    r = hermit(env, "service", "install", "--port", "0")
    assert r.returncode == 0, r.stderr
    assert "no socket unit" in r.stdout and "browsers are not kept signed in" in r.stdout, r.stdout
    assert not (units / f"{name}.socket").exists()
    assert "Requires=" not in (units / f"{name}.service").read_text()
    assert calls(tmp_path) == [f"--user disable --now {name}.socket", "--user daemon-reload",
                               f"--user enable --now {name}.service", "--user daemon-reload"]
    assert verify(units / f"{name}.service") == ""
