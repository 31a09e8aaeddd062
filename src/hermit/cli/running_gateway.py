"""What a change to hermit.yaml or hermit.env means for a gateway already running on this state dir.

The gateway reads hermit.env (keys, bot tokens) once, when it starts, and builds its model providers,
channel accounts and agents from hermit.yaml then. Only who may reach it — owners, contacts, groups,
bindings and the other access fields gateway/live_config.py lists — is re-read at each message. So a
`hermit setup` or `hermit agents add` that finishes while a gateway runs says so, and `hermit doctor`
warns while either file is newer than the running gateway: otherwise the CLI works with the new key and
the web app keeps getting the old one's 401, with nothing saying why.

The running gateway is the holder of `<state>/gateway/gateway.lock` (gateway/state.py), which publishes
its pid and, once it listens, its start time. Its process's own start time (Linux: /proc) is used when it
can be read: the gateway reads the files before it publishes, so the published time could miss an edit
made while it started.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hermit.cli.checks import Check, check
from hermit.cli.context import CliContext
from hermit.config.envfile import env_file_path
from hermit.gateway.state import HowRun, launchd_job, read_lock_info, systemd_service

LIVE = "who may talk to it (owners, contacts, groups, bindings) applies at once"
NOT_LIVE = "the model, providers, API keys, bot tokens, channel accounts and agents"


@dataclass(frozen=True)
class RunningGateway:
    pid: int
    started: float | None  # wall-clock seconds; None while it starts or stops
    service: str | None  # the systemd user unit it runs under, if any
    launchd: str | None = None  # the launchd agent's label it runs as, if any (macOS)


def process_start(pid: int) -> float | None:
    """When process `pid` started, in wall-clock seconds (Linux /proc, to about 10 ms), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command's name
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - ticks / hz)


def running_gateway(home: Path) -> RunningGateway | None:
    """The gateway running on `home`, or None."""
    info = read_lock_info(home)
    if not info or not isinstance(info.get("pid"), int):
        return None
    pid: int = info["pid"]
    started = info.get("started") if isinstance(info.get("started"), (int, float)) else None
    if started is not None:
        own = process_start(pid)
        started = min(started, own) if own is not None else started
    return RunningGateway(pid, None if info.get("stopping") else started, systemd_service(pid),
                          launchd_job(info.get("launchd")))


def restart_how(gw: RunningGateway) -> str:
    """How the user restarts this gateway (gateway/state.HowRun): its service manager's own command when it runs as a
    service (`hermit service restart` runs the same), else Ctrl-C / kill and `hermit gateway run`."""
    return HowRun(gw.pid, gw.service, gw.launchd).restart()


def start_or_restart(ctx: CliContext) -> str:
    """`restart the gateway: …` (the one running, by how it runs), or `start the gateway: …` (its installed service's
    start, if any: cli/service.start_how)."""
    from hermit.cli.service import start_how

    gw = running_gateway(ctx.home)
    return f"restart the gateway: {restart_how(gw)}" if gw is not None else f"start the gateway: {start_how(ctx)}"


def after_change_note(home: Path) -> str | None:
    """What to print after hermit.yaml or hermit.env was written while a gateway runs on `home`."""
    gw = running_gateway(home)
    if gw is None:
        return None
    return (f"the running gateway (pid {gw.pid}) keeps {NOT_LIVE} it started with until it is restarted: "
            f"{restart_how(gw)}; {LIVE}")


def changed_since(home: Path, config: Path | None, started: float) -> list[Path]:
    """hermit.yaml (the config file in use) and hermit.env when changed after `started`."""
    out = []
    for path in (config, env_file_path(home)):
        try:
            if path is not None and path.stat().st_mtime > started:
                out.append(path)
        except OSError:
            continue
    return out


@check("gateway config", needs=("gateway",))
def gateway_config(ctx: CliContext) -> str | Check:
    """For `hermit doctor`: is the running gateway going by the files as they are now?"""
    gw = running_gateway(ctx.home)
    if gw is None:
        return "no gateway running"
    if gw.started is None:
        return f"the gateway (pid {gw.pid}) is starting or stopping"
    changed = changed_since(ctx.home, ctx.paths.config_file(), gw.started)
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(gw.started))
    if not changed:
        return f"the running gateway (pid {gw.pid}, started {since}) goes by hermit.yaml and hermit.env as they are"
    names = " and ".join(p.name for p in changed)
    return Check("gateway config", "warn",
                 f"{names} changed after the running gateway (pid {gw.pid}) started at {since}: it still uses "
                 f"{NOT_LIVE} it started with ({LIVE})",
                 f"restart it: {restart_how(gw)}")
