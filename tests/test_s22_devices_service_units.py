"""`hermit service install` and unit files it did not write as they are (cli/service_units.py): it replaced a
hand-written `.socket` at its name, and a `.service` of this state dir changed by hand, without a word. Now each unit
Hermit writes carries a stamp of its content; a file without a matching one is kept, install stops naming it and
`--force`, and nothing at all is written (neither unit, no `systemctl` call). Running install again over its own files
stays harmless, also over files of a Hermit before the stamp. Real `hermit` processes, a fake `systemctl` (the
helpers of test_service_homes.py)."""

from __future__ import annotations

from pathlib import Path

from test_service import hermit
from test_service_homes import calls, own_name, setup_env, started


def installed(tmp_path: Path, *args: str) -> tuple[dict[str, str], Path, Path]:
    """A state dir with its service installed (port 40571 unless `args` say otherwise): (env, .service, .socket)."""
    home = tmp_path / "home"
    env = setup_env(tmp_path, home)
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "service", "install", "--port", "40571", *args)
    assert r.returncode == 0, r.stderr
    units = tmp_path / "xdg" / "systemd" / "user"
    name = own_name(units, home)
    calls(tmp_path)
    return env, units / f"{name}.service", units / f"{name}.socket"


def test_install_again_over_its_own_files_is_harmless(tmp_path: Path) -> None:
    env, service, socket_unit = installed(tmp_path)
    before = (service.read_bytes(), socket_unit.read_bytes())
    assert before[1].decode().splitlines()[-1].startswith("# hermit-sha256: ")
    r = hermit(env, "service", "install", "--port", "40571")
    assert r.returncode == 0, r.stderr
    assert (service.read_bytes(), socket_unit.read_bytes()) == before
    assert calls(tmp_path) == started(service.stem)


def test_a_socket_unit_changed_by_hand_is_kept_and_install_says_so_until_force(tmp_path: Path) -> None:
    env, service, socket_unit = installed(tmp_path)
    mine = socket_unit.read_text().replace("Backlog=128\n", "Backlog=128\nFreeBind=yes\n")
    socket_unit.write_text(mine)
    service_before = service.read_bytes()
    r = hermit(env, "service", "install", "--port", "40572")  # even a new port does not overwrite it
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{socket_unit} is not the file `hermit service install` wrote" in r.stderr, r.stderr
    assert "--force" in r.stderr and f"systemctl --user edit {socket_unit.name}" in r.stderr, r.stderr
    assert socket_unit.read_text() == mine and service.read_bytes() == service_before  # nothing written
    assert calls(tmp_path) == []

    r = hermit(env, "service", "install", "--port", "40572", "--force")
    assert r.returncode == 0, r.stderr
    assert "FreeBind" not in socket_unit.read_text() and "ListenStream=127.0.0.1:40572" in socket_unit.read_text()
    assert calls(tmp_path) == started(service.stem)


def test_a_hand_written_socket_unit_at_its_name_is_kept(tmp_path: Path) -> None:
    env, service, socket_unit = installed(tmp_path)
    service.unlink()
    own = "[Socket]\nListenStream=127.0.0.1:40580\n\n[Install]\nWantedBy=sockets.target\n"
    socket_unit.write_text(own)
    r = hermit(env, "service", "install", "--port", "40571")
    assert r.returncode == 1 and f"{socket_unit} is not the file" in r.stderr, r.stderr
    assert socket_unit.read_text() == own and not service.exists()


def test_a_service_of_this_state_dir_changed_by_hand_is_kept(tmp_path: Path) -> None:
    env, service, socket_unit = installed(tmp_path)
    mine = service.read_text().replace("RestartSec=5\n", "RestartSec=5\nNice=10\n")
    service.write_text(mine)
    socket_before = socket_unit.read_bytes()
    r = hermit(env, "service", "install", "--port", "40571")
    assert r.returncode == 1 and f"{service} is not the file" in r.stderr, r.stderr
    assert service.read_text() == mine and socket_unit.read_bytes() == socket_before


def test_a_stale_socket_unit_changed_by_hand_is_not_removed(tmp_path: Path) -> None:
    """--port 0 gets no socket unit and removes the one an earlier install wrote — not one the user changed."""
    env, service, socket_unit = installed(tmp_path)
    mine = socket_unit.read_text() + "# mine\n"
    socket_unit.write_text(mine)
    r = hermit(env, "service", "install", "--port", "0")
    assert r.returncode == 1 and f"{socket_unit} is not the file" in r.stderr, r.stderr
    assert socket_unit.read_text() == mine and calls(tmp_path) == []


def test_files_of_a_hermit_before_the_stamp_are_still_its_own(tmp_path: Path) -> None:
    """Held: a unit exactly as this Hermit writes it less the stamp (what the version before it wrote) is replaced."""
    env, service, socket_unit = installed(tmp_path)
    for unit in (service, socket_unit):
        lines = unit.read_text().splitlines(keepends=True)
        unit.write_text("".join(lines[:-1]))
    r = hermit(env, "service", "install", "--port", "40571")
    assert r.returncode == 0, r.stderr
    assert socket_unit.read_text().splitlines()[-1].startswith("# hermit-sha256: ")
