"""The systemd units `hermit service install` writes (cli/service.py): the service, the socket unit that holds its port
(gateway/listen.py, gateway/device_policy.py), and how a unit file already there is judged before it is replaced.

Each unit Hermit writes ends with a stamp, `# hermit-sha256: <hex>`, the SHA-256 of the lines above it. A file whose
stamp matches its content is Hermit's as written, and `install` replaces it (running it again is harmless). A file at
that path without a matching stamp — written by hand, edited since (an `Environment=` added), or by a Hermit before the
stamp — is the user's: `install` leaves it as it is and stops, naming the file, unless given `--force`. A change of
one's own belongs in a drop-in (`systemctl --user edit <name>.service`: `<name>.service.d/override.conf`), which
`install` never touches. A file that is exactly what this Hermit writes, less the stamp, is its own too.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hermit.config.envfile import env_file_path
from hermit.errors import ConfigError

if TYPE_CHECKING:
    from hermit.cli.context import CliContext

STAMP = "# hermit-sha256: "


def stamped(text: str) -> str:
    """`text` (a unit, ending in a newline) with its stamp as its last line."""
    return f"{text}{STAMP}{hashlib.sha256(text.encode()).hexdigest()}\n"


def unstamped(text: str) -> str:
    """`text` without a last stamp line (whether it matches or not)."""
    body, sep, last = text.rstrip("\n").rpartition("\n")
    return body + sep if last.startswith(STAMP) else text


def is_hermits(current: str, new: str) -> bool:
    """Whether a unit file reading `current` is Hermit's as written (its stamp matches), or what `new` is less the
    stamp (written by a Hermit before the stamp, or edited back to it)."""
    body = unstamped(current)
    return current == stamped(body) or current == unstamped(new)


def refuse_theirs(path: Path, new: str, *, force: bool) -> None:
    """ConfigError unless the unit file at `path` may be replaced by `new`: missing, Hermit's (is_hermits), or
    `force`."""
    try:
        current = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError):
        current = None
    if force or (current is not None and is_hermits(current, new)):
        return
    raise ConfigError(f"{path} is not the file `hermit service install` wrote (written by hand, changed since, or by "
                      "an older Hermit): it is left as it is, and nothing was written",
                      f"keep your changes in a drop-in instead (`systemctl --user edit {path.name}`: install never "
                      f"touches those), then replace the file: `hermit service install --force`")


def gateway_command(home: Path, host: str | None = None, port: int | None = None) -> list[str]:
    """The command line of `hermit gateway run` for this install and state dir (and --host/--port, if given)."""
    extra = (["--host", host] if host else []) + (["--port", str(port)] if port is not None else [])
    return [sys.executable, "-P", "-m", "hermit", "--home", str(home), "gateway", "run", *extra]


def _systemd_quote(arg: str) -> str:
    """One ExecStart word: quoted when it has blanks or quotes; % doubled (systemd's specifier sign) and $
    doubled (systemd expands $VAR and ${VAR} in ExecStart's words)."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _systemd_text(value: str) -> str:
    """A setting systemd takes whole and unquoted (Description=, EnvironmentFile=): only specifiers escaped."""
    return value.replace("%", "%%")


def _one_line_path(path: str, what: str) -> str:
    """`path` for a unit or plist line; a control character (a newline would start a line of its own in the
    unit: `ExecStartPre=…`) is refused rather than escaped."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise ConfigError(f"{what} {path!r} holds a control character (a newline?); a service unit cannot name it",
                          "use a state dir (--home / HERMIT_HOME) and a Python whose paths have none")
    return path


def systemd_unit(home: Path, host: str | None = None, port: int | None = None, *, socket: str | None = None) -> str:
    """The service unit; `socket`: the name of its socket unit (systemd_socket_unit), which it needs and starts after
    (systemd hands the gateway that unit's listening sockets)."""
    _one_line_path(str(home), "the state dir")
    _one_line_path(sys.executable, "the Python")
    exec_start = " ".join(_systemd_quote(a) for a in gateway_command(home, host, port))
    needs = f"Requires={socket}.socket\nAfter={socket}.socket\n" if socket else ""
    return stamped(f"""\
# Written by `hermit gateway install`; `hermit gateway uninstall` removes it.
[Unit]
Description=Hermit gateway (web chat, chat channels, scheduler) for {_systemd_text(str(home))}
After=network-online.target
Wants=network-online.target
{needs}
[Service]
Type=simple
ExecStart={exec_start}
EnvironmentFile=-{_systemd_text(str(env_file_path(home)))}
Environment=PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
UMask=0077
Restart=on-failure
RestartSec=5
TimeoutStopSec=60

[Install]
WantedBy=default.target
""")


def listen_addresses(host: str, port: int) -> list[str] | None:
    """The ListenStream= addresses of the service's socket unit: `host` (localhost: 127.0.0.1) at `port`, and [::1]
    beside an IPv4 loopback or any-address where this machine has IPv6 loopback (gateway/listen.py's twin). None when
    no socket unit can hold the port: port 0 (the system picks one at each start) or a host name."""
    import ipaddress

    from hermit.gateway.listen import TWIN, needs_twin

    if port == 0:
        return None
    ip_text = "127.0.0.1" if host == "localhost" else host
    try:
        ip = ipaddress.ip_address(ip_text)
    except ValueError:
        return None
    out = [f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"]
    if needs_twin(host) and _has_ipv6_loopback():
        out.append(f"[{TWIN}]:{port}")
    return out


def _has_ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def systemd_socket_unit(home: Path, addresses: list[str]) -> str:
    """The socket unit that holds the gateway's listening sockets for good (socket activation): while the gateway
    restarts, crashes or is stopped the port stays taken — no other local user's program can listen there and serve
    its own page at the web app's address (gateway/device_policy.py) — and a connection made meanwhile waits for it."""
    _one_line_path(str(home), "the state dir")
    listens = "".join(f"ListenStream={a}\n" for a in addresses)
    return stamped(f"""\
# Written by `hermit gateway install`; `hermit gateway uninstall` removes it. It keeps the gateway's port taken
# while the gateway restarts or is stopped, and starts the gateway when a connection comes.
[Unit]
Description=Hermit gateway's listening sockets for {_systemd_text(str(home))}

[Socket]
{listens}BindIPv6Only=ipv6-only
Backlog=128

[Install]
WantedBy=sockets.target
""")


def write_systemd(ctx: CliContext, folder: Path, name: str, host: str | None, port: int | None, *,
                  force: bool = False) -> tuple[list[list[str]], Path | None]:
    """Writes the service unit and, where one can hold its port, its socket unit (`<name>.socket`); the `systemctl
    --user` steps that start them, and a socket unit an earlier install left that no longer fits (port 0, a host
    name: to disable, then remove). The service is stopped before its socket starts: a gateway of an earlier install
    holding the port itself would make the socket's bind fail."""
    from hermit.durable import write_atomic

    gateway = ctx.config().config.gateway
    addresses = listen_addresses(host or gateway.host, gateway.port if port is None else port)
    socket_path, service_path = folder / f"{name}.socket", folder / f"{name}.service"
    socket_text = systemd_socket_unit(ctx.home, addresses) if addresses is not None else ""
    service_text = systemd_unit(ctx.home, host, port, socket=name if addresses else None)
    refuse_theirs(service_path, service_text, force=force)  # both judged before either is written
    refuse_theirs(socket_path, socket_text, force=force)  # a stale one ("" : none fits now) only when it is Hermit's
    if addresses is not None:
        write_atomic(socket_path, socket_text, mode=0o644, keep_mode=False)
    write_atomic(service_path, service_text, mode=0o644, keep_mode=False)
    stale = socket_path if addresses is None and os.path.lexists(socket_path) else None
    steps = [["systemctl", "--user", "daemon-reload"]]
    if addresses is not None:
        print(f"wrote {socket_path} (it holds {', '.join(addresses)} while the gateway restarts or is stopped)")
        steps += [["systemctl", "--user", "stop", f"{name}.service"],
                  ["systemctl", "--user", "enable", "--now", f"{name}.socket"]]
    else:
        print("no socket unit: the port is chosen at each start (--port 0) or named by a host name, so the port goes "
              "free while the gateway restarts and browsers are not kept signed in (gateway.remember_devices: auto)")
    if stale is not None:
        steps.insert(0, ["systemctl", "--user", "disable", "--now", f"{name}.socket"])
    steps.append(["systemctl", "--user", "enable", "--now", f"{name}.service"])
    return steps, stale


