"""`hermit gateway install|uninstall`: run the gateway as a per-user service that starts at login and is
restarted when it fails — a systemd user unit on Linux, a launchd agent on macOS.

The service runs exactly `hermit gateway run` of this install: this Python (the venv's, pipx's or uv's)
with `-P -m hermit` (`-P`: the working directory is not on the import path, so a `hermit/` folder that
someone else put where the service starts is never run), and `--home` of this state dir, so a service never
picks up another installation or state dir. The unit reads the owner-only env file (`EnvironmentFile=`, for systemd; the gateway loads it
itself too, which is what a launchd agent relies on) and runs with umask 077. `systemctl --user` is
only called when a user manager answers; otherwise, and with `--no-start`, the commands are printed.

On systemd a socket unit (`<name>.socket`) goes beside the service: systemd listens on the gateway's address and
port (and [::1] beside an IPv4 loopback, as gateway/listen.py does) and hands the sockets to the gateway (LISTEN_FDS),
so the port stays taken while the gateway restarts, crashes or is stopped — no other local user's program can serve
its own page at the web app's address meanwhile — and `gateway.remember_devices: auto` turns devices on
(gateway/device_policy.py). `hermit service stop` stops the gateway, not the socket: a browser opening the web app
starts it again; `uninstall` lets the port go. A service on port 0 or a host name gets no socket unit.

One service per state dir: the default state dir (~/.hermit) keeps the plain name `hermit-gateway`, any other
gets `hermit-gateway-<its folder's name>-<8 hex of its path>` (`unit_name_for`), so installing the gateway of a
second state dir never replaces the first one's unit. A unit whose `--home` is another state dir is never
overwritten by `install` nor removed by `uninstall` (a chosen --name can collide); the state dir's own unit
written under the plain name by an earlier version is still found by both. `--host`/`--port` given to
install go into the unit's command line (each state dir's gateway needs a port of its own). A unit file written by
hand or changed since install wrote it is kept, and install stops saying so, unless given `--force`
(cli/service_units.py: each file Hermit writes carries a stamp of its content).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import plistlib
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from hermit.cli.context import CliContext
from hermit.cli.service_units import (  # the units' texts, and the judging of a file already there: their module
    _one_line_path,
    gateway_command,
    write_systemd,
)
from hermit.cli.service_units import listen_addresses as listen_addresses  # noqa: PLC0414 - kept importable here
from hermit.cli.service_units import systemd_unit as systemd_unit  # noqa: PLC0414 - kept importable here
from hermit.errors import ConfigError
from hermit.loopback import url_host

DEFAULT_NAME = "hermit-gateway"
LAUNCHD_LABEL = "com.hermit.gateway"


NAME_HELP = (f"the service's name (default {DEFAULT_NAME} for ~/.hermit, {DEFAULT_NAME}-<folder>-<hash> for "
             "another state dir)")


def register_service(gs: Any, same: str) -> None:
    """Adds `install` and `uninstall` to `hermit service`'s or `hermit gateway`'s subcommands (one code, two
    spellings); `same` is the other group's name, which each help names."""
    p = gs.add_parser("install", help="run the gateway as a user service (systemd on Linux, launchd on macOS); "
                      f"the same as `hermit {same} install`")
    p.add_argument("--no-start", action="store_true", help="write the unit file only; print how to start it")
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--kind", choices=("auto", "systemd", "launchd"), default="auto",
                   help="systemd user unit or launchd agent (default: this system's)")
    p.add_argument("--host", help="address the service's gateway listens on (default gateway.host)")
    p.add_argument("--port", type=int, help="its port (default gateway.port; each state dir's gateway needs its own)")
    p.add_argument("--force", action="store_true", help="replace unit files written by hand or changed since install "
                   "wrote them (by default they are kept, and nothing is written)")
    p.set_defaults(func=cmd_install)
    p = gs.add_parser("uninstall", help=f"stop the gateway service and remove its unit file; the same as `hermit "
                      f"{same} uninstall`")
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--force", action="store_true", help="also remove unit files written by hand or changed since "
                   "install wrote them (by default the service is stopped and disabled, and they are kept)")
    p.add_argument("--kind", choices=("auto", "systemd", "launchd"), default="auto",
                   help="systemd user unit or launchd agent (default: this system's)")
    p.set_defaults(func=cmd_uninstall)


def launchd_plist(home: Path, name: str, host: str | None = None, port: int | None = None) -> bytes:
    _one_line_path(str(home), "the state dir")
    logs = home / "logs"
    return plistlib.dumps({
        "Label": LAUNCHD_LABEL if name == DEFAULT_NAME else f"com.hermit.{name}",
        "ProgramArguments": gateway_command(home, host, port),
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restarted when it fails, not after a clean stop
        "Umask": 0o077,
        "StandardOutPath": str(logs / "gateway.stdout.log"),
        "StandardErrorPath": str(logs / "gateway.stdout.log"),
    })


def _kind(args: argparse.Namespace) -> str:
    if args.kind != "auto":
        return str(args.kind)
    return "launchd" if sys.platform == "darwin" else "systemd"


def _user_home(ctx: CliContext) -> Path:
    raw = ctx.environ.get("HOME")
    return Path(raw) if raw else Path.home()


def _unit_name(kind: str, name: str) -> str:
    if kind == "launchd":
        return f"{LAUNCHD_LABEL if name == DEFAULT_NAME else f'com.hermit.{name}'}.plist"
    return f"{name}.service"


def _unit_base(ctx: CliContext, kind: str) -> tuple[Path, str, tuple[str, ...]]:
    """(the folder the environment names, the variable naming it, the folders below it to the unit's)."""
    if kind == "launchd":
        return _user_home(ctx), "HOME", ("Library", "LaunchAgents")
    xdg = ctx.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg), "XDG_CONFIG_HOME", ("systemd", "user")
    return _user_home(ctx), "HOME", (".config", "systemd", "user")


def unit_path(ctx: CliContext, kind: str, name: str) -> Path:
    """Where the unit file is (or goes), as the environment names it; see `unit_folder` for how it is reached."""
    base, _, parts = _unit_base(ctx, kind)
    return base.joinpath(*parts, _unit_name(kind, name))


def unit_folder(ctx: CliContext, kind: str, *, create: bool) -> Path | None:
    """The folder the unit file goes in (~/.config/systemd/user, ~/Library/LaunchAgents), each folder of it
    made owner-only where missing (`create`; else None when one is missing), as a path with no link left in it.

    $HOME and $XDG_CONFIG_HOME are trusted only when they name a folder of the current user's (the state dir's
    rule, config.paths.unsafe_folder): a root shell opened with `su` (without `-`) keeps the user's HOME, and
    the user's ~/.config/systemd/user, a link to wherever they chose, had root write a unit there. Hermit
    refuses rather than guess another home: the error says how to run it with one's own. Below that folder each
    one is judged too, and a link is followed only when the user (or root) made it (dotfiles kept in a
    repository), its target judged by the same rule; the folders are made without following a link."""
    from hermit.config.paths import NotOwnFolder, ensure_private_dir, judge_own_folder, unsafe_folder

    base, var, parts = _unit_base(ctx, kind)
    here = Path(os.path.realpath(base))
    if (found := unsafe_folder(here)) is not None:
        folder, why = found
        where = why if folder == here else f"is inside {folder}, which {why}"
        raise ConfigError(f"{var}={base} {where}: the service file would be written where another user chooses "
                          "(a shell opened with `su` without `-` keeps the user's HOME)",
                          f"run it with a home of your own: `su -` or `sudo -i` (or set {var} to a folder of "
                          "yours); to install the service for that user, run the command as them")
    try:
        for name in (None, *parts):
            if name is not None:
                here = _followed_once(here / name)
            if not create and not here.exists():
                return None
            if create:
                ensure_private_dir(here, own=True, what="the service file's folder")
            else:
                judge_own_folder(here, "the service file's folder")
    except NotOwnFolder as e:
        where = e.why if e.folder == e.path else f"is inside {e.folder}, which {e.why}"
        raise ConfigError(f"the service file's folder {e.path} {where}: another user could choose or change the "
                          "command your service runs", f"check {e.folder} (it should be yours and written by "
                          f"nobody else), or set {var} to a folder of yours") from None
    return here


def _followed_once(path: Path) -> Path:
    """`path`, or where it points when it is a link the user or root made (NotOwnFolder for another user's)."""
    from hermit.config.paths import NotOwnFolder

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISLNK(st.st_mode):
        return path
    if st.st_uid not in (os.geteuid(), 0):
        raise NotOwnFolder("the service file's folder", path, path, f"is a symlink another user made (uid {st.st_uid})")
    return Path(os.path.realpath(path))


def systemd_usable(environ: dict[str, str]) -> bool:
    """A user manager answers `systemctl --user` (not so in most containers or over plain ssh)."""
    if shutil.which("systemctl", path=environ.get("PATH")) is None:
        return False
    try:
        r = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, timeout=10,
                           env=environ)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def systemd_offline(environ: dict[str, str]) -> bool:
    """No systemd runs this machine at all (most containers, WSL without it, another init): `systemctl
    is-system-running` says "offline" (or there is no systemctl). A unit written here never starts."""
    if shutil.which("systemctl", path=environ.get("PATH")) is None:
        return True
    try:
        r = subprocess.run(["systemctl", "is-system-running"], capture_output=True, text=True, timeout=10, env=environ)
    except (OSError, subprocess.TimeoutExpired):
        return False  # it did not say: the user manager's advice stands
    return r.stdout.strip() == "offline"


def _no_systemd(ctx: CliContext, host: str | None, port: int | None) -> ConfigError:
    """What to do instead of a service on a machine without systemd: the exact command, kept running another way."""
    cmd = shlex.join(gateway_command(ctx.home, host, port))
    return ConfigError(
        "this machine does not run systemd (a container, or another init system), so a gateway service would "
        "never start here; nothing was written",
        f"keep the gateway running another way: make this the container's command (with a restart policy, e.g. "
        f"`docker run --restart unless-stopped`) or your supervisor's:\n      {cmd}\n"
        f"      or start it in the background of this shell (it stops with the machine):\n"
        f"      nohup {cmd} >/dev/null 2>&1 &\n"
        "      `hermit logs -f` follows it either way; `hermit service install --no-start` writes the unit anyway")


def _run(cmd: list[str], environ: dict[str, str], name: str) -> None:
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=60)
    if r.returncode != 0:
        raise ConfigError(f"`{' '.join(cmd)}` failed: {(r.stderr or r.stdout).strip()}",
                          f"see `journalctl --user -u {name}` or run the command yourself")


def unit_name_for(state_dir: Path, user_home: Path) -> str:
    """The service name of a state dir: the plain one for ~/.hermit, else one of its own (a readable part, the
    folder's name, and 8 hex of its whole real path, which two state dirs never share)."""
    home = Path(os.path.realpath(state_dir))
    if home == Path(os.path.realpath(user_home / ".hermit")):
        return DEFAULT_NAME
    slug = re.sub(r"[^a-z0-9]+", "-", home.name.lower()).strip("-")[:24].strip("-") or "home"
    return f"{DEFAULT_NAME}-{slug}-{hashlib.sha256(os.fsencode(home)).hexdigest()[:8]}"


def unit_home(path: Path, kind: str) -> Path | None:
    """The state dir (`--home`) of the gateway the unit file at `path` runs; None when it names none (a file
    Hermit did not write, or one it cannot read)."""
    try:
        if kind == "launchd":
            with path.open("rb") as f:
                argv = plistlib.load(f).get("ProgramArguments")
        else:
            line = next((x for x in path.read_text(encoding="utf-8").splitlines() if x.startswith("ExecStart=")), "")
            argv = [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line.removeprefix("ExecStart="))]
    except (OSError, ValueError, UnicodeDecodeError, plistlib.InvalidFileException):
        return None
    if not isinstance(argv, list) or "--home" not in argv[:-1]:
        return None
    home = argv[argv.index("--home") + 1]
    return Path(os.path.realpath(home)) if isinstance(home, str) else None


def installed_for(ctx: CliContext) -> tuple[str, str] | None:
    """(kind, name) of the gateway service `hermit gateway install` wrote for this state dir (a systemd user unit,
    a launchd agent; any --name), else None — also when its folder is not one to trust (unit_folder)."""
    found = installed_unit(ctx)
    return None if found is None else (found[0], found[1])


def installed_unit(ctx: CliContext) -> tuple[str, str, Path] | None:
    """(kind, name, its file) of this state dir's installed gateway service; see installed_for."""
    kind = "launchd" if sys.platform == "darwin" else "systemd"
    try:
        folder = unit_folder(ctx, kind, create=False)
    except ConfigError:
        return None
    if folder is None:
        return None
    home = Path(os.path.realpath(ctx.home))
    pattern = "com.hermit.*.plist" if kind == "launchd" else f"{DEFAULT_NAME}*.service"
    for path in sorted(folder.glob(pattern)):
        if path.is_file() and unit_home(path, kind) == home:
            return kind, path.name.removesuffix(".plist").removesuffix(".service"), path
    return None


def start_how(ctx: CliContext) -> str:
    """How this state dir's gateway is started when none runs: its installed service's command (so the service,
    not a second gateway beside it, runs), else `hermit gateway run`."""
    found = installed_for(ctx)
    if found is None:
        return "`hermit gateway run`"
    from hermit.gateway.state import HowRun

    kind, name = found
    return (HowRun(None, launchd=name) if kind == "launchd" else HowRun(None, f"{name}.service")).start()


def _chosen_name(ctx: CliContext, args: argparse.Namespace, kind: str, folder: Path | None) -> str:
    """--name, else this state dir's name — or the plain one, when the unit there is this state dir's (written
    by a version of Hermit that gave every state dir the plain name) and none has this state dir's own name."""
    if args.name:
        return str(args.name)
    name = unit_name_for(ctx.home, _user_home(ctx))
    if name != DEFAULT_NAME and folder is not None and not os.path.lexists(folder / _unit_name(kind, name)):
        plain = folder / _unit_name(kind, DEFAULT_NAME)
        if os.path.lexists(plain) and unit_home(plain, kind) == Path(os.path.realpath(ctx.home)):
            return DEFAULT_NAME
    return name


def _not_this_home(ctx: CliContext, path: Path, kind: str, doing: str) -> ConfigError | None:
    """An error when the unit file at `path` (which exists) runs another state dir's gateway, or names none."""
    theirs = unit_home(path, kind)
    if theirs == Path(os.path.realpath(ctx.home)):
        return None
    if theirs is None:
        return ConfigError(f"{path} was not written by `hermit gateway install` (it names no state dir); not "
                           f"{doing} it", "give the service another --name, or remove that file yourself")
    return ConfigError(f"{path} runs the gateway of another state dir, {theirs} (this one is {ctx.home}); not "
                       f"{doing} it", f"for that state dir run `HERMIT_HOME={theirs} hermit service uninstall`; "
                       f"this state dir's service is {unit_name_for(ctx.home, _user_home(ctx))} (or give --name)")


def _web_app_note(ctx: CliContext, host: str | None, port: int | None) -> str:
    """Where the service's web app will answer and how a browser signs in: a gateway on loopback (the default)
    is out of a phone's reach, which the owner learnt only when the phone found nothing there."""
    import ipaddress

    gateway = ctx.config().config.gateway
    host = host or gateway.host
    port = gateway.port if port is None else port
    shown = url_host(host)
    where = f"http://{shown}:{port}/" if port else f"http://{shown}:<a free port>/ (`hermit gateway status` says which)"
    try:
        local = host == "localhost" or ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        local = False
    if local:
        return (f"web app: {where}, on this computer only — sign in with `hermit dashboard`; to use it from a phone "
                f"on your network, install with --host 0.0.0.0 (then `hermit dashboard --phone`)")
    return f"web app: {where} — sign in with `hermit dashboard`; a phone: `hermit dashboard --phone` (a QR code)"


def cmd_install(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.config.paths import ensure_private_dir
    from hermit.durable import write_atomic

    if ctx.paths.config_file() is None:
        raise ConfigError(f"no config in {ctx.home}", "run `hermit setup` (or `hermit init`) first")
    ctx.config()  # a config the gateway could not load is reported now, not in a restart loop
    host, port = args.host, args.port
    if host is not None and (not host or any(c.isspace() or ord(c) < 0x20 for c in host)):
        raise ConfigError(f"--host {host!r} is not an address", "give an address such as 127.0.0.1")
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--port {port} is not a port", "give a port from 1 to 65535 (0: any free one)")
    kind = _kind(args)
    usable = kind == "systemd" and not args.no_start and systemd_usable(ctx.environ)
    if usable:  # an owner move the gateway refuses at start is said now, not in a restart loop (gateway/owner_routes)
        from hermit.gateway.owner_routes import check_start

        check_start(ctx.home, ctx.config())
    if kind == "systemd" and not args.no_start and not usable and systemd_offline(ctx.environ):
        raise _no_systemd(ctx, host, port)  # it printed `systemctl --user …` steps that fail the same way
    folder = unit_folder(ctx, kind, create=True)
    assert folder is not None
    name = _chosen_name(ctx, args, kind, folder)
    path = folder / _unit_name(kind, name)
    if os.path.lexists(path) and (refused := _not_this_home(ctx, path, kind, "replacing")):
        raise refused
    ensure_private_dir(ctx.home / "logs")
    stale: Path | None = None
    if kind == "launchd":
        write_atomic(path, launchd_plist(ctx.home, name, host, port), mode=0o644, keep_mode=False)
        steps = [["launchctl", "bootstrap", f"gui/{os.getuid()}", str(path)]]
    else:
        steps, stale = write_systemd(ctx, folder, name, host, port, force=getattr(args, "force", False))
    print(f"wrote {path}")
    print(f"it runs: {' '.join(gateway_command(ctx.home, host, port))}")
    from hermit.cli.service_env import warn_missing

    warn_missing(ctx)  # a bot token in this shell only: the service's gateway would not have it
    print(_web_app_note(ctx, host, port))
    if usable:
        for step in steps:
            _run(step, ctx.environ, name)
        if stale is not None:
            stale.unlink()  # disabled and stopped above
            _run(["systemctl", "--user", "daemon-reload"], ctx.environ, name)
        print(f"started {name}; `hermit gateway status` shows it, `hermit logs -f` follows its log, "
              f"`journalctl --user -u {name}` has its starts, stops and crashes (the log's entries, which name who wrote, "
              f"stay out of the journal)")
        return 0
    user = _user_name()
    if args.no_start or kind != "systemd":
        why = "as asked (--no-start)" if args.no_start else "launchd is started by you"
        print(f"not started ({why}); to start it now and at every login run:")
    else:  # systemd runs the machine, but this shell reaches no user manager of this user's
        print(f"not started: systemd runs here, but no user manager of {user}'s answers in this shell (su, sudo, or "
              f"a login without a session?); let it run without a login, as root: loginctl enable-linger {user}\n"
              f"then, in a login shell of {user}'s (ssh {user}@host, or machinectl shell {user}@), run:")
    for step in steps:
        print("    " + " ".join(step))
    if stale is not None:
        print(f"    rm {shlex.quote(str(stale))} && systemctl --user daemon-reload")
    if kind == "systemd" and args.no_start:
        print(f"  (to keep it running after you log out: loginctl enable-linger {user})")
    return 0


def _unlink_socket(sock: Path | None) -> None:
    if sock is not None:
        sock.unlink()
        print(f"removed {sock}")


def _as_written(path: Path) -> bool:
    """Whether a unit file is as `hermit service install` wrote it: its stamp matches its content (cli/service_units.py)."""
    from hermit.cli.service_units import stamped, unstamped

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return text == stamped(unstamped(text)) and text != unstamped(text)


def _stop_keeping(ctx: CliContext, name: str, units: list[str], kept: list[Path], ours: list[Path]) -> int:
    """Uninstall with unit files the owner wrote or edited (`kept`): the service stopped and disabled, Hermit's own
    files (`ours`) removed, the others left as they are and named."""
    if systemd_usable(ctx.environ):
        _run(["systemctl", "--user", "disable", "--now", *units], ctx.environ, name)
    for p in ours:
        p.unlink()
        print(f"removed {p}")
    if systemd_usable(ctx.environ):
        _run(["systemctl", "--user", "daemon-reload"], ctx.environ, name)
    elif not systemd_offline(ctx.environ):
        print(f"if it is running, stop it with: systemctl --user disable --now {' '.join(units)}")
    for p in kept:
        print(f"kept {p}: it is not the file `hermit service install` wrote (written by hand, changed since, or by an "
              f"older Hermit); remove it yourself if you no longer need it (rm {p}), or run `hermit service "
              "uninstall --force`")
    return 0


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def cmd_uninstall(ctx: CliContext, args: argparse.Namespace) -> int:
    kind = _kind(args)
    folder = unit_folder(ctx, kind, create=False)
    name = _chosen_name(ctx, args, kind, folder)
    path = folder / _unit_name(kind, name) if folder is not None else unit_path(ctx, kind, name)
    if folder is None or not os.path.lexists(path):
        raise ConfigError(f"no service file at {path} (for the state dir {ctx.home})", "nothing to uninstall for "
                          "this state dir (see `hermit service install`); another state dir's service is "
                          "uninstalled with that HERMIT_HOME (or --home)")
    if refused := _not_this_home(ctx, path, kind, "removing"):
        raise refused
    sock = path.with_suffix(".socket") if kind == "systemd" and os.path.lexists(path.with_suffix(".socket")) else None
    units = [f"{name}.service", *([f"{name}.socket"] if sock is not None else [])]  # the port is let go with it
    if kind == "systemd" and not getattr(args, "force", False):
        kept = [p for p in (path, sock) if p is not None and not _as_written(p)]
        if kept:
            return _stop_keeping(ctx, name, units, kept, [p for p in (path, sock) if p is not None and p not in kept])
    if kind == "systemd" and systemd_usable(ctx.environ):
        _run(["systemctl", "--user", "disable", "--now", *units], ctx.environ, name)
        path.unlink()
        _unlink_socket(sock)
        _run(["systemctl", "--user", "daemon-reload"], ctx.environ, name)
    elif kind == "systemd" and systemd_offline(ctx.environ):
        path.unlink()  # no systemd runs here: the unit never ran, and `systemctl` steps fail ("Failed to connect")
        _unlink_socket(sock)
        print(f"removed {path}")
        print("this machine does not run systemd (a container, or another init system), so that service never ran "
              "here: there is nothing to disable. A gateway started another way (the container's command, nohup …) "
              "is stopped the way it was started (Ctrl-C, `docker stop`, or `kill` with the pid `hermit gateway "
              "status` shows)")
        return 0
    else:
        path.unlink()
        _unlink_socket(sock)
        stop = (["launchctl", "bootout", f"gui/{os.getuid()}", str(path)] if kind == "launchd" else
                ["systemctl", "--user", "disable", "--now", *units])
        print(f"if it is running, stop it with: {' '.join(stop)}")
    print(f"removed {path}")
    return 0
