"""Hints that name the way to keep the gateway running as a service say `hermit service install` (t6 made `hermit
service` the group a user types for the service; `hermit gateway install` is the same command and still works).

Setup's "next:" line is checked in tests/test_firstday_setup.py and a unit of another state dir's in
tests/test_service_homes.py; here: `hermit logs` before any log, `hermit dashboard` with no gateway running, `hermit
service install` on a machine without systemd, `hermit service uninstall` with nothing installed (the phone
sign-in's hint: test_s20_phone_service_words.py). Real `hermit` processes; a fake `systemctl` on PATH answers as
systemd does (test_firstday_service)."""

from __future__ import annotations

from pathlib import Path

from hermit.gateway.state import ensure_token
from test_firstday_service import machine
from test_service import env_for, hermit


def test_logs_and_dashboard_before_the_gateway_runs_name_hermit_service_install(tmp_path: Path) -> None:
    env = env_for(tmp_path / "state", tmp_path / "user")
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "logs")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "hint: start the gateway (`hermit gateway run`, or `hermit service install` for a service); its log is " \
           "written there" in r.stderr, r.stderr
    ensure_token(tmp_path / "state")  # as a gateway's first run left it; none runs now
    r = hermit(env, "dashboard")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the gateway is not running: start it with `hermit gateway run` (or `hermit service install` for a " \
           "service), then run `hermit dashboard` again" in r.stderr, r.stderr
    assert "gateway install" not in r.stderr


def test_service_install_without_systemd_and_uninstall_of_nothing_name_hermit_service(tmp_path: Path) -> None:
    env = machine(tmp_path, tmp_path / "state", "offline")
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "service", "install")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "`hermit logs -f` follows it either way; `hermit service install --no-start` writes the unit anyway" \
        in r.stderr, r.stderr
    r = hermit(env, "service", "uninstall")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nothing to uninstall for this state dir (see `hermit service install`)" in r.stderr, r.stderr
    assert "gateway install" not in r.stderr

