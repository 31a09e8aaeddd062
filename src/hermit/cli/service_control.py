"""`hermit service install|uninstall|status|start|stop|restart`: the gateway as a per-user service, in the words a
user types for one. `install` and `uninstall` are `hermit gateway install|uninstall` (cli/service.py, the same
code under both spellings); `status`, `start`, `stop` and `restart` act on the service `install` wrote for this
state dir — a systemd user unit on Linux, a launchd agent on macOS — with `systemctl --user` or `launchctl`.

A gateway already running by hand (`hermit gateway run`) on the same state dir holds its lock: a service started
beside it would wait for that lock (systemd restarting it every few seconds), so `start` and `restart` refuse and
say how to stop the one by hand (gateway/state.HowRun). Where `systemctl --user` reaches no user manager (su,
sudo, ssh without a session) or no systemd runs at all (a container), nothing is run and the error gives the
exact command for a login shell, as `install` does.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys

from hermit.cli.context import CliContext
from hermit.cli.running_gateway import RunningGateway, running_gateway
from hermit.cli.service import (
    _run,
    _user_name,
    gateway_command,
    installed_unit,
    register_service,
    systemd_offline,
    systemd_usable,
    unit_home,
)
from hermit.errors import ConfigError
from hermit.gateway.state import HowRun, read_lock_info

# Exit status of `hermit service status` when the service is installed but its gateway is not running (as
# `systemctl status` says of an inactive unit); 0 when it runs, 1 (an error) when no service is installed.
NOT_RUNNING = 3
DONE = {"start": "started", "stop": "stopped", "restart": "restarted"}


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit service` (its name and help are in the table of cli/commands.py)."""
    p.description = ("The gateway as a user service that starts at login and is restarted when it fails: a systemd "
                     "user unit on Linux, a launchd agent on macOS. `hermit gateway install|uninstall` are the same "
                     "commands; `hermit gateway run` runs it in the foreground instead.")
    ss = p.add_subparsers(dest="service_command", metavar="SUBCOMMAND", required=True)
    register_service(ss, "gateway")
    q = ss.add_parser("status", help="this state dir's service: its file, whether it is enabled and running")
    q.set_defaults(func=cmd_status)
    for verb, text in (("start", "start the service's gateway (`systemctl --user start`, `launchctl kickstart`)"),
                       ("stop", "stop the service's gateway until the next start or login"),
                       ("restart", "restart the service's gateway (after an edit of hermit.yaml or hermit.env)")):
        q = ss.add_parser(verb, help=text)
        q.set_defaults(func=cmd_control, verb=verb)


def _how(kind: str, name: str) -> HowRun:
    return HowRun(None, launchd=name) if kind == "launchd" else HowRun(None, f"{name}.service")


def _not_installed(ctx: CliContext, gw: RunningGateway | None) -> ConfigError:
    by_hand = ""
    if gw is not None:
        by_hand = (f"; the gateway running now (pid {gw.pid}){HowRun(gw.pid, gw.service, gw.launchd).runs_as()} is "
                   f"not one: it stops with {HowRun(gw.pid, gw.service, gw.launchd).stop()}")
    if sys.platform != "darwin" and systemd_offline(ctx.environ):  # `install` would refuse here
        return ConfigError(f"no gateway service is installed for the state dir {ctx.home}{by_hand}, and this machine "
                           "does not run systemd (a container, or another init system), so none would start here",
                           "keep the gateway running another way: make this the container's command or your "
                           f"supervisor's: {shlex.join(gateway_command(ctx.home))}; or run `hermit gateway run` "
                           "in a terminal")
    return ConfigError(f"no gateway service is installed for the state dir {ctx.home}{by_hand}",
                       "install one: `hermit service install` (it starts at login and is restarted when it fails); or "
                       "run the gateway in the foreground: `hermit gateway run`")


def _query(cmd: list[str], environ: dict[str, str]) -> str:
    """What `cmd` printed (its first line), or "" when it could not be run."""
    if shutil.which(cmd[0], path=environ.get("PATH")) is None:
        return ""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10, env=environ)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (r.stdout.strip().splitlines() or [""])[0]


def _manager_line(ctx: CliContext, kind: str, name: str) -> str:
    """What the service manager says of the service (systemd: enabled/active), or why it cannot be asked."""
    if kind == "launchd":
        target = f"gui/{os.getuid()}/{_how(kind, name).launchd}"
        if shutil.which("launchctl", path=ctx.environ.get("PATH")) is None:
            return "launchctl is not found here"
        r = subprocess.run(["launchctl", "print", target], capture_output=True, text=True, env=ctx.environ, timeout=10)
        return f"launchd: {target} is loaded" if r.returncode == 0 else \
            f"launchd: {target} is not loaded (start it: `hermit service start`)"
    if systemd_usable(ctx.environ):
        unit = f"{name}.service"
        enabled = _query(["systemctl", "--user", "is-enabled", unit], ctx.environ) or "unknown"
        active = _query(["systemctl", "--user", "is-active", unit], ctx.environ) or "unknown"
        return f"systemd: {enabled}, {active} (`systemctl --user status {unit}`, `journalctl --user -u {unit}`)"
    if systemd_offline(ctx.environ):
        return ("systemd: this machine does not run systemd (a container, or another init system), so the service "
                "never starts here")
    return (f"systemd: no user manager of {_user_name()}'s answers in this shell (su, sudo, or a login without a "
            "session?); ask in a login shell of theirs")


def cmd_status(ctx: CliContext, args: argparse.Namespace) -> int:
    found = installed_unit(ctx)
    gw = running_gateway(ctx.home)
    if found is None:
        raise _not_installed(ctx, gw)
    kind, name, path = found
    what = "launchd agent" if kind == "launchd" else "systemd user unit"
    print(f"service  {name} ({what} {path})")
    print(f"runs     the gateway of {unit_home(path, kind) or ctx.home}")
    print(f"         {_manager_line(ctx, kind, name)}")
    if kind == "systemd" and os.path.lexists(path.with_suffix(".socket")):
        state = (_query(["systemctl", "--user", "is-active", f"{name}.socket"], ctx.environ) or "unknown"
                 if systemd_usable(ctx.environ) else "not asked")
        print(f"socket   {name}.socket ({state}) holds the gateway's port while it restarts or is stopped, so browsers "
              "stay signed in (gateway.remember_devices: auto)")
    if gw is None:
        print("gateway  not running (start it: `hermit service start`; its log: `hermit logs`)")
        return NOT_RUNNING
    how = HowRun(gw.pid, gw.service, gw.launchd)
    own = how.systemd == f"{name}.service" if kind == "systemd" else how.launchd == _how(kind, name).launchd
    port = (read_lock_info(ctx.home) or {}).get("port")
    where = f"pid {gw.pid}" + (f" on port {port}" if port else " (starting or stopping)")
    if own:
        print(f"gateway  running as this service, {where}; `hermit gateway status` shows its channels and queues")
        return 0
    print(f"gateway  running, {where}, but not as this service{how.runs_as() or ' (by hand)'}: stop it with "
          f"{how.stop()}, then `hermit service start`")
    return NOT_RUNNING


def _steps(kind: str, name: str, verb: str) -> list[str]:
    if kind == "launchd":
        target = f"gui/{os.getuid()}/{_how(kind, name).launchd}"
        return {"start": ["launchctl", "kickstart", target], "restart": ["launchctl", "kickstart", "-k", target],
                "stop": ["launchctl", "kill", "TERM", target]}[verb]
    return ["systemctl", "--user", verb, f"{name}.service"]


def cmd_control(ctx: CliContext, args: argparse.Namespace) -> int:
    verb: str = args.verb
    found = installed_unit(ctx)
    gw = running_gateway(ctx.home)
    if found is None:
        raise _not_installed(ctx, gw)
    kind, name, unit = found
    if verb in ("start", "restart"):  # the gateway it starts would refuse an owner move: said now, nothing done
        from hermit.gateway.owner_routes import check_start

        check_start(ctx.home, ctx.config())
    how = HowRun(gw.pid, gw.service, gw.launchd) if gw is not None else None
    if how is not None and not how.managed and verb != "stop":
        # The service's gateway would wait for this one's lock (systemd restarting it every few seconds).
        raise ConfigError(f"a gateway already runs on {ctx.home} by hand (pid {how.pid}), not as the service {name}; "
                          f"nothing was {DONE[verb]}", f"stop it first ({how.stop()}), then `hermit service {verb}`")
    step = _steps(kind, name, verb)
    if kind == "systemd" and not systemd_usable(ctx.environ):
        if systemd_offline(ctx.environ):
            raise ConfigError("this machine does not run systemd (a container, or another init system), so the "
                              f"service {name} never runs here; nothing was {DONE[verb]}",
                              "run the gateway another way (the container's command, a supervisor, or in the "
                              f"background): {' '.join(gateway_command(ctx.home))}")
        user = _user_name()
        raise ConfigError(f"no user manager of {user}'s answers in this shell (su, sudo, or a login without a "
                          f"session?); nothing was {DONE[verb]}",
                          f"in a login shell of {user}'s (ssh {user}@host, or machinectl shell {user}@) run: "
                          f"{' '.join(step)}")
    if kind == "launchd" and shutil.which("launchctl", path=ctx.environ.get("PATH")) is None:
        raise ConfigError("launchctl is not found here", f"run it on the Mac whose agent it is: {' '.join(step)}")
    _run(step, ctx.environ, name)
    if verb == "stop":
        socket = kind == "systemd" and os.path.lexists(unit.with_suffix(".socket"))
        print(f"stopped {name}: it starts again at the next login or with `hermit service start`" + (
            ", or when a browser opens the web app: its socket unit keeps the port taken (`hermit service uninstall` "
            "lets it go)" if socket else ""))
        if how is not None and not how.managed:
            print(f"the gateway run by hand (pid {how.pid}) was not the service's and still runs: it stops with "
                  f"{how.stop()}")
        return 0
    print(f"{DONE[verb]} {name}; `hermit service status` says whether it runs, `hermit logs -f` follows its log")
    return 0
