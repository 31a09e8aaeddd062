"""Session 23, t5: `hermit service uninstall` keeps a unit file the owner wrote or edited by hand.

`install` has kept such files since s22 (a content stamp, cli/service_units.py), but `uninstall` removed whatever
was at the unit's path: an `Environment=` line the owner added, or a unit written by hand for this state dir, was
deleted with no word. Now uninstall stops and disables the service as before, removes the files whose stamp
matches what install wrote, and keeps the others, naming each and the way to remove it (`--force`).

Real `hermit` processes; a fake `systemctl` on PATH answers as a user manager does and logs its calls.
"""

from __future__ import annotations

from pathlib import Path

from test_s20_cli_service import calls, installed, machine, state_dir
from test_service import hermit


def _units(tmp_path: Path, name: str) -> tuple[Path, Path]:
    folder = tmp_path / "xdg" / "systemd" / "user"
    return folder / f"{name}.service", folder / f"{name}.socket"


def test_uninstall_keeps_a_unit_edited_by_hand_and_removes_it_with_force(tmp_path: Path) -> None:
    home = state_dir(tmp_path)
    env = machine(tmp_path, home)
    name = installed(tmp_path, home, env)
    service, socket = _units(tmp_path, name)
    assert service.exists() and socket.exists()
    edited = service.read_text().replace("[Service]\n", "[Service]\nEnvironment=HTTPS_PROXY=http://10.0.0.1:3128\n")
    service.write_text(edited)  # the owner's own line
    r = hermit(env, "service", "uninstall")
    assert r.returncode == 0, r.stderr
    assert service.read_text() == edited  # kept as the owner left it
    assert f"kept {service}" in r.stdout and "--force" in r.stdout, r.stdout
    assert not socket.exists() and f"removed {socket}" in r.stdout  # install's own file: removed
    assert f"--user disable --now {name}.service {name}.socket" in calls(tmp_path)  # the service is stopped
    r = hermit(env, "service", "uninstall", "--force")
    assert r.returncode == 0 and not service.exists(), r.stdout + r.stderr


def test_uninstall_still_removes_the_units_install_wrote(tmp_path: Path) -> None:
    home = state_dir(tmp_path)
    env = machine(tmp_path, home)
    name = installed(tmp_path, home, env)
    service, socket = _units(tmp_path, name)
    r = hermit(env, "service", "uninstall")
    assert r.returncode == 0 and not service.exists() and not socket.exists(), r.stdout + r.stderr
    assert "kept" not in r.stdout
