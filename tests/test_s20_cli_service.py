"""`hermit service install|uninstall|status|start|stop|restart`: what a user types to keep the gateway running as a
service. Before, the service was only `hermit gateway install|uninstall`, and there was no command to see, start,
stop or restart it: `hermit service …` was "invalid choice". Now `hermit service` is a command group over the same
code (install and uninstall under both spellings, each help naming the other), and status/start/stop/restart act on
the unit `install` wrote for this state dir.

Real `hermit` processes; a fake `systemctl` on PATH answers as a user manager does (or as none does) and logs its
calls; a real `hermit gateway run` for a gateway run by hand, and (root, a writable cgroup) one moved into the
service's cgroup for a gateway the service runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gatewayhelpers import GatewayProcess, write_config
from hermit.cli.service import systemd_unit, unit_name_for
from test_s19_restart_hints import in_user_unit
from test_service import env_for, hermit

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$SYSTEMCTL_LOG"
case "$*" in
  is-system-running) echo "$SYSTEM_STATE"; [ "$SYSTEM_STATE" = running ] ;;
  "--user show-environment") [ "$USER_MANAGER" = yes ] || { echo "Failed to connect to bus" >&2; exit 1; } ;;
  "--user is-enabled "*) echo enabled ;;
  "--user is-active "*) echo "$UNIT_STATE"; [ "$UNIT_STATE" = active ] ;;
esac
exit 0
"""


def machine(tmp_path: Path, home: Path, *, user_manager: bool = True, state: str = "running",
            unit_state: str = "active") -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    return env_for(home, tmp_path / "user", XDG_CONFIG_HOME=str(tmp_path / "xdg"), SYSTEM_STATE=state,
                   USER_MANAGER="yes" if user_manager else "no", UNIT_STATE=unit_state,
                   PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SYSTEMCTL_LOG=str(tmp_path / "systemctl.log"))


def calls(tmp_path: Path) -> list[str]:
    """The fake systemctl's calls since the last look, without the probes (`show-environment`, is-system-running)."""
    log = tmp_path / "systemctl.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [x for x in lines if x not in ("--user show-environment", "is-system-running")]


def installed(tmp_path: Path, home: Path, env: dict[str, str]) -> str:
    """`hermit service install --no-start` for `home`: the unit's name (the calls to systemctl so far forgotten)."""
    assert hermit(env, "service", "install", "--no-start").returncode == 0
    name = unit_name_for(home, tmp_path / "user")
    calls(tmp_path)
    return name


@contextmanager
def by_hand(home: Path) -> Iterator[GatewayProcess]:
    """A gateway on `home` run by hand (not by the service), ready; terminated afterwards."""
    gw = GatewayProcess(home)
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=60)


def state_dir(tmp_path: Path) -> Path:
    home = tmp_path / "state"
    write_config(home, "http://127.0.0.1:9/v1")  # a model the gateway never calls here
    return home


def test_service_is_a_command_group_and_both_spellings_install_the_same_unit(tmp_path: Path) -> None:
    home = state_dir(tmp_path)
    env = machine(tmp_path, home)
    listed = hermit(env, "--help")
    assert "    service             keep the gateway running as a user service" in listed.stdout, listed.stdout
    helped = hermit(env, "service", "--help")
    for verb in ("install", "uninstall", "status", "start", "stop", "restart"):
        assert f"    {verb}" in helped.stdout, helped.stdout
    assert "the same as `hermit gateway install`" in helped.stdout
    assert "the same as `hermit service install`" in hermit(env, "gateway", "--help").stdout

    name = unit_name_for(home, tmp_path / "user")
    unit = tmp_path / "xdg" / "systemd" / "user" / f"{name}.service"
    r = hermit(env, "service", "install")
    assert r.returncode == 0, r.stderr
    assert calls(tmp_path) == ["--user daemon-reload", f"--user stop {name}.service",
                               f"--user enable --now {name}.socket", f"--user enable --now {name}.service"]
    text = unit.read_text()
    assert text == systemd_unit(home, socket=name)  # `hermit gateway install`'s unit, word for word
    r = hermit(env, "gateway", "uninstall")  # the other spelling removes it
    assert r.returncode == 0 and not unit.exists(), r.stderr
    assert calls(tmp_path) == [f"--user disable --now {name}.service {name}.socket", "--user daemon-reload"]
    assert hermit(env, "gateway", "install").returncode == 0
    assert unit.read_text() == text
    r = hermit(env, "service", "uninstall")
    assert r.returncode == 0 and not unit.exists(), r.stderr


def test_status_start_stop_restart_act_on_this_state_dirs_unit(tmp_path: Path) -> None:
    home = state_dir(tmp_path)
    env = machine(tmp_path, home, unit_state="inactive")
    r = hermit(env, "service", "status")
    assert r.returncode == 1, r.stdout
    assert f"error: no gateway service is installed for the state dir {home}" in r.stderr, r.stderr
    assert "hint: install one: `hermit service install`" in r.stderr
    r = hermit(env, "service", "start")
    assert r.returncode == 1 and "no gateway service is installed" in r.stderr, r.stderr
    assert calls(tmp_path) == []  # nothing asked of systemd without a unit

    name = installed(tmp_path, home, env)
    unit = tmp_path / "xdg" / "systemd" / "user" / f"{name}.service"
    r = hermit(env, "service", "status")
    assert r.returncode == 3, r.stdout + r.stderr  # installed, its gateway not running
    assert f"service  {name} (systemd user unit {unit})" in r.stdout, r.stdout
    assert f"runs     the gateway of {home}" in r.stdout
    assert f"systemd: enabled, inactive (`systemctl --user status {name}.service`" in r.stdout
    assert "gateway  not running (start it: `hermit service start`" in r.stdout
    for verb, done in (("start", "started"), ("restart", "restarted"), ("stop", "stopped")):
        r = hermit(env, "service", verb)
        assert r.returncode == 0, r.stderr
        assert f"$ systemctl --user {verb} {name}.service" in r.stdout, r.stdout
        assert f"{done} {name}" in r.stdout, r.stdout
        assert calls(tmp_path)[-1] == f"--user {verb} {name}.service"


def test_without_a_user_manager_or_systemd_nothing_runs_and_the_command_is_given(tmp_path: Path) -> None:
    home = state_dir(tmp_path)
    env = machine(tmp_path, home)
    name = installed(tmp_path, home, env)
    r = hermit(machine(tmp_path, home, user_manager=False), "service", "restart")
    assert r.returncode == 1, r.stdout
    assert "no user manager of" in r.stderr and "nothing was restarted" in r.stderr, r.stderr
    assert f"run: systemctl --user restart {name}.service" in r.stderr
    r = hermit(machine(tmp_path, home, user_manager=False, state="offline"), "service", "start")
    assert r.returncode == 1 and "this machine does not run systemd" in r.stderr, r.stderr
    assert f"--home {home} gateway run" in r.stderr  # the command to keep running another way
    r = hermit(machine(tmp_path, home, user_manager=False, state="offline"), "service", "status")
    assert r.returncode == 3 and "this machine does not run systemd" in r.stdout, r.stdout
    assert calls(tmp_path) == []
    assert hermit(env, "service", "uninstall").returncode == 0
    r = hermit(machine(tmp_path, home, user_manager=False, state="offline"), "service", "status")
    assert r.returncode == 1, r.stdout
    assert "and this machine does not run systemd (a container, or another init system), so none would start " \
           "here" in r.stderr, r.stderr
    assert f"--home {home} gateway run; or run `hermit gateway run` in a terminal" in r.stderr
    assert "`hermit service install`" not in r.stderr  # it would refuse here


def test_a_gateway_run_by_hand_is_not_doubled_by_the_service(tmp_path: Path) -> None:
    """`service start` beside a gateway run by hand would start one that waits for its lock, restarted by systemd
    every few seconds: refused, with how to stop the one by hand."""
    home = state_dir(tmp_path)
    env = machine(tmp_path, home)
    name = installed(tmp_path, home, env)
    with by_hand(home) as gw:
        for verb in ("start", "restart"):
            r = hermit(env, "service", verb)
            assert r.returncode == 1, r.stdout
            assert f"a gateway already runs on {home} by hand (pid {gw.proc.pid}), not as the service {name}" \
                in r.stderr, r.stderr
            assert f"stop it first (Ctrl-C where it runs, or `kill {gw.proc.pid}`), then `hermit service {verb}`" \
                in r.stderr
        assert calls(tmp_path) == []
        r = hermit(env, "service", "status")
        assert r.returncode == 3, r.stdout
        assert f"gateway  running, pid {gw.proc.pid} on port {gw.port}, but not as this service (by hand): stop " \
               f"it with Ctrl-C where it runs, or `kill {gw.proc.pid}`" in r.stdout, r.stdout
        r = hermit(env, "service", "stop")  # the service is stopped; the one by hand is named, not killed
        assert r.returncode == 0, r.stderr
        assert f"the gateway run by hand (pid {gw.proc.pid}) was not the service's and still runs" in r.stdout
        assert gw.proc.poll() is None
        r = hermit(env, "service", "uninstall")
        assert r.returncode == 0, r.stderr
        r = hermit(env, "service", "stop")
        assert r.returncode == 1, r.stdout
        assert f"the gateway running now (pid {gw.proc.pid}) is not one: it stops with Ctrl-C where it runs, or " \
               f"`kill {gw.proc.pid}`" in r.stderr, r.stderr


def test_status_and_restart_of_a_gateway_the_service_runs(tmp_path: Path) -> None:
    """The gateway in the unit's cgroup (as systemd runs it): status says so (exit 0) and restart is not refused."""
    home = state_dir(tmp_path)
    env = machine(tmp_path, home)
    name = installed(tmp_path, home, env)
    with by_hand(home) as gw, in_user_unit(gw.proc.pid, f"{name}.service"):
        r = hermit(env, "service", "status")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"gateway  running as this service, pid {gw.proc.pid} on port {gw.port}" in r.stdout, r.stdout
        r = hermit(env, "service", "restart")
        assert r.returncode == 0, r.stderr
        assert calls(tmp_path) == [f"--user is-enabled {name}.service", f"--user is-active {name}.service",
                                   f"--user is-active {name}.socket",  # the socket unit holding its port
                                   f"--user restart {name}.service"]
