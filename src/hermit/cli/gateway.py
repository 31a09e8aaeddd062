"""`hermit gateway run|status` and `hermit dashboard`: the gateway process and how to reach it.

`run` is a composition root: it takes the one-gateway lock before anything slow, reads the token
(created 0600 on first start), sets up logging, builds a runtime per agent and serves until
SIGTERM/SIGINT. It prints the page's URL without the token (stdout goes to the journal under systemd);
`hermit dashboard` is how the owner gets in.

`dashboard` never puts the token in a URL: a browser keeps every URL it visits in its history (and syncs
it), fragment and all. It makes a one-time ticket for the running gateway instead (gateway/tickets.py: good
for one sign-in within 10 minutes, and only with that gateway), and prints and opens `…/#ticket=…`; the page
trades the ticket for the token over the WebSocket handshake. Nor does it put the ticket on a command line:
a browser's argv is readable by every local user (`ps`, /proc/<pid>/cmdline) for as long as it runs. As
Jupyter does, it writes a small owner-only launcher page into the private `<state>/gateway/` and opens
`file://` that page, which forwards the browser to the web app with the ticket in the URL's fragment (never
sent to the server; the page takes it out of the address bar). The launcher is removed by the next
`hermit dashboard`. `dashboard --phone` opens nothing: it prints the link at an address a phone can reach
(gateway/phone.py) as a QR code, or says what to change when the gateway listens on loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import html
import json
import os
import re
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermit.cli.checks import check
from hermit.cli.context import CliContext, configured_secrets
from hermit.cli.terminal import reveal, terminal_safe, unfiltered
from hermit.errors import HermitError
from hermit.gateway.phone import lan_addresses, phone_address, phone_ticket, qr_text
from hermit.gateway.state import (
    GatewayLock,
    HowRun,
    check_token_file,
    ensure_token,
    read_lock_info,
    token_path,
)
from hermit.gateway.tickets import TICKET_TTL, issue_ticket, private_gateway_dir
from hermit.gateway.turn_slots import OVERDUE_SECONDS
from hermit.loopback import url_host

LAUNCHER_PREFIX = "dashboard-"


def configure_gateway(g: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit gateway` (its name and help are in the table of cli/commands.py)."""
    gs = g.add_subparsers(dest="gateway_command", metavar="SUBCOMMAND", required=True)
    p = gs.add_parser("run", help="run the gateway in the foreground until Ctrl-C / SIGTERM")
    p.add_argument("--host", help="address to listen on (default gateway.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default gateway.port, 18789; 0 = any free port)")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="log lines as text (default) or one JSON object per line")
    p.set_defaults(func=cmd_run)
    p = gs.add_parser("status", help="show the running gateway: channels, queues, services")
    p.add_argument("--json", action="store_true", help="print the status as a JSON object")
    p.set_defaults(func=cmd_status)
    from hermit.cli.gateway_restart import register
    from hermit.cli.service import register_service

    register(gs)  # `gateway restart`: in place, SIGUSR1 (its own module)

    register_service(gs, "service")  # `gateway install|uninstall` live in their own module (and `hermit service`)


def configure_dashboard(d: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit dashboard` (its name and help are in the table of cli/commands.py)."""
    d.add_argument("--no-open", action="store_true",
                   help="only print the URL (a headless box, SSH: forward the port and open it elsewhere)")
    d.add_argument("--phone", "--qr", action="store_true",
                   help="sign a phone in: print a QR code of a one-time link at an address a phone can reach "
                        "(the first gateway.allowed_origins entry, else the gateway's network address)")
    d.set_defaults(func=cmd_dashboard)


def cmd_run(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.assistant import build_runtime
    from hermit.config import workspaces_check
    from hermit.gateway import owner_routes
    from hermit.gateway.logs import setup_logging
    from hermit.gateway.supervisor import Gateway

    loaded = ctx.config()
    cfg = loaded.config.gateway
    host = args.host or cfg.host
    port = cfg.port if args.port is None else args.port
    # A gateway still stopping (Ctrl-C, a service restart) lets its turns finish first: waited for, not refused.
    lock = GatewayLock.acquire(ctx.home, wait_stopping=cfg.shutdown_grace_seconds + 10, waiting=lambda pid: print(
        f"waiting for the gateway that is stopping (pid {pid}) to exit…", file=sys.stderr, flush=True))
    try:
        token = ensure_token(ctx.home)
        setup_logging(ctx.home / "logs", args.log_format, [token, *configured_secrets(ctx)], debug=ctx.debug,
                      max_bytes=cfg.log_max_bytes, backups=cfg.log_backups)
        from hermit.tools.room_sweep import finish_agents

        # A room's merge a killed Hermit left part-way: finished now, before any turn or owner's tool sees the room.
        finish_agents([a.sessions_dir.parent / "rooms" for a in loaded.agents])
        # An owner id the config would hand another agent's main session than the last gateway did: refused.
        seen = owner_routes.check_start(ctx.home, loaded)  # the record it read: written over only if unchanged
        runtimes = {a.id: build_runtime(ctx, a, long_lived=True) for a in loaded.agents}
        gateway = Gateway(loaded, ctx.home, ctx.environ, runtimes, token, host=host, port=port)
        owner_routes.record(ctx.home, loaded, seen=seen)  # not over routes `channels accept-routes` wrote since
        # Which workspace each agent reached people with (config/workspaces_check.py): recorded by the gateway, which
        # lets others in, at its start and at each reload it applies — not by every command, which would write the
        # state dir on each `hermit memory search`.
        workspaces_check.record(loaded.agents, loaded.paths)

        def applied(new: Any) -> None:  # a LoadedConfig the gateway applied
            owner_routes.record(ctx.home, new, loaded)
            workspaces_check.record(new.agents, new.paths)

        gateway.live.listen(applied)

        def ready(url: str) -> None:
            # No token here: under systemd stdout is the journal, readable by more than the owner.
            print(f"Hermit gateway on {url}\nweb chat: {url} (sign in: run `hermit dashboard`; the token is in "
                  f"{token_path(ctx.home)})", flush=True)

        return asyncio.run(gateway.serve(lock, ready))
    finally:
        lock.release()


def _running(ctx: CliContext) -> dict[str, Any]:
    info = read_lock_info(ctx.home)
    if info and "port" not in info and "pid" in info:
        raise HermitError(f"the gateway (pid {info['pid']}) is starting or stopping: it serves no port now",
                          "try again in a moment")
    if not info or "port" not in info:
        raise HermitError(f"no gateway is running on {ctx.home}", f"start it: {_start_how(ctx)}")
    return info


def _start_how(ctx: CliContext) -> str:
    from hermit.cli.service import start_how  # its installed service's start, else `hermit gateway run`

    return start_how(ctx)


def _start_or_restart(ctx: CliContext) -> str:
    from hermit.cli.running_gateway import start_or_restart

    return start_or_restart(ctx)


def _client_host(host: str) -> str:
    """The literal address a local client reaches the gateway at. Never "localhost": the gateway binds one
    address (IPv4 for "localhost"), and a browser trying ::1 first would reach whatever another local user
    listens on there, with the token in the address."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "localhost") else "::1" if host == "::" else host


def _only_own_gateway(ctx: CliContext, event: str, info: Mapping[str, Any]) -> None:
    """httpcore's trace hook for a CLI request that carries the gateway token: the new connection is closed
    before the request's first byte unless the port is held by the user's own uid (the gateway runs as the
    user whose state dir it is) or root (hermit.loopback.own_or_root). Another user's program that took the
    port between the lock file's read and the connect (the gateway restarting) gets nothing."""
    from hermit.loopback import CONNECTED, Holder, guard_stream, own_or_root

    def refuse(holder: Holder) -> HermitError:
        return HermitError(f"the port {holder.where} the gateway published is held by another user's program (uid "
                           f"{holder.uid}, {holder.user}), not by your gateway: Hermit sent it nothing (the request "
                           "carries the gateway token)", "the gateway may have stopped and its port been taken: "
                           f"see `hermit logs`, {_start_or_restart(ctx)}, and tell an administrator")

    if event == CONNECTED:
        guard_stream(info.get("return_value"), refuse, own_or_root)


def cmd_status(ctx: CliContext, args: argparse.Namespace) -> int:
    info = _running(ctx)
    token = check_token_file(token_path(ctx.home))
    import httpx  # after the checks: "no gateway is running" needs no HTTP client (~0.1-0.2 s of CPU to import)

    host = _client_host(str(info["host"]))
    base = f"http://{url_host(host)}:{info['port']}"
    try:  # no proxy from the environment: the token goes to the gateway's port, and only if it is the gateway's
        with httpx.Client(timeout=5, trust_env=False) as client:
            r = client.get(f"{base}/status", headers={"Authorization": f"Bearer {token}"},
                           extensions={"trace": functools.partial(_only_own_gateway, ctx)})
    except httpx.HTTPError as e:
        raise HermitError(f"gateway pid {info.get('pid')} does not answer on {base}: {e}",
                          "it may be starting or stuck; see <state>/logs/gateway.log") from e
    if r.status_code != 200:
        raise HermitError(f"gateway answered {r.status_code} on /status", "the token file may have changed; "
                          f"{_start_or_restart(ctx)}")
    st = r.json()
    if args.json:
        print(json.dumps(st, ensure_ascii=False, indent=2))
        return 0
    bus = st["bus"]
    life = bus["since_start"]
    print(f"gateway pid {st['pid']} on http://{url_host(str(st['host']))}:{st['port']}/ · up {st['uptime_seconds']:.0f} s · "
          f"agents: {', '.join(st['agents'])}")
    print(f"turns running {bus['turns_running']}, waiting {bus['waiting']}, sessions active {bus['sessions_active']}; "
          f"since start: {life['accepted']} messages, {life['turns']} turns, {life['refused']} refused, "
          f"{life['queue_full']} busy · web chat clients {st['webchat_clients']}")
    for line in slot_lines(bus):
        print(line)
    for ch in st["channels"]:
        state = "connected" if ch["connected"] else "disconnected"
        err = f" — {ch['last_error']}" if ch.get("last_error") else ""
        print(f"  channel {ch['channel']}/{ch['account_id']}: {state}, in {ch['messages_in']}, out "
              f"{ch['messages_out']}{err}")
    for name, s in st["services"].items():
        print("\n".join(service_lines(name, s)))
    return 0


def slot_lines(bus: dict[str, Any]) -> list[str]:
    """The agents whose turn slots are in use (gateway/turn_slots.py), for `hermit gateway status`: turns running
    past the bound said as such (an owner's turn let past others' overdue ones, a turn started before the bound
    was lowered), never as more slots in use than there are."""
    lines = []
    for agent, slots in (bus.get("turn_slots") or {}).items():
        queued, running, limit = slots["waiting"], slots["running"], slots["limit"]
        if running or any(queued.values()):
            overdue, lowered = slots.get("past_overdue", 0), slots.get("past_lowered", 0)
            past = (f", +{overdue} past the overdue rule (the owner's, started while others' turns ran over "
                    f"{OVERDUE_SECONDS:.0f} s)" if overdue else "")
            past += f", +{lowered} started before the bound was lowered to {limit}" if lowered else ""
            lines.append(f"  agent {agent}: {min(running, limit)} of {limit} turn slots in use{past}, waiting: owner "
                         f"{queued['owner']}, scheduled {queued['scheduled']}, contacts {queued['contact']}")
    return lines


def _shown(value: Any) -> str:
    """One status value as a person reads it: an ISO time in local time to the second, a list comma-joined,
    a nested mapping as `key value` pairs."""
    from datetime import datetime

    if isinstance(value, str):
        if not re.match(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", value):
            return value
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return value
        return (when.astimezone() if when.tzinfo else when).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, list):
        return ", ".join(_shown(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(_pair(k, v, " ") for k, v in value.items() if v not in (None, [], {}))
    return str(value)


def _pair(key: str, value: Any, sep: str) -> str:
    """`every 30 minutes` for every_minutes: 30, else `key<sep>value`."""
    base, _, unit = key.rpartition("_")
    if unit in ("minutes", "seconds") and base:
        return f"{base.replace('_', ' ')} {_shown(value)} {unit}"
    return f"{key.replace('_', ' ')}{sep}{_shown(value)}"


def service_lines(name: str, status: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """A service's status (whatever keys it reports) as lines: its flat facts on one line — true flags by
    name, empty values left out — and each nested mapping of mappings (per agent) on lines of its own."""
    facts: list[str] = []
    nested: list[str] = []
    for key, value in status.items():
        label = key.replace("_", " ")
        if value is None or value == [] or value == {} or value is False and key != "running":
            continue
        if value is True:
            facts.append(label)
        elif value is False:
            facts.append(f"not {label}")
        elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            for sub, inner in value.items():
                nested.extend(service_lines(f"{label.removesuffix('s')} {sub}", inner, indent + "    "))
        else:
            facts.append(_pair(key, value, ": "))
    return [f"{indent}{'service ' if indent == '  ' else ''}{name}: {' · '.join(facts) or 'no details'}", *nested]


def lan_urls(bound: str, port: int) -> list[str]:
    """The web app's URLs on this machine's network addresses, when the gateway listens on all of them."""
    if bound not in ("0.0.0.0", "::", ""):
        return []
    return [f"http://{url_host(a)}:{port}/" for a in lan_addresses(bound == "::")]


def _can_open_browser(environ: Mapping[str, str]) -> bool:
    """A browser can be shown here: not a Linux box without a display (where `webbrowser` would start a text
    browser in this terminal), unless $BROWSER names one on purpose."""
    if environ.get("BROWSER"):
        return True
    return not sys.platform.startswith("linux") or bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def _remove_old_launchers(folder: Path) -> None:
    for old in folder.glob(f"{LAUNCHER_PREFIX}*.html"):
        with contextlib.suppress(OSError):
            old.unlink()


def write_launcher(home: Path, target: str) -> Path:
    """An owner-only page in `<state>/gateway/` that forwards the browser to `target` (`…/#ticket=…`): the
    browser is started with this file's path, never with the ticket. Created O_EXCL|O_NOFOLLOW (0600) under a
    random name in the 0700 gateway dir, after removing the ones earlier runs left."""
    folder = private_gateway_dir(home)
    _remove_old_launchers(folder)
    page = ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\n"
            f"<meta http-equiv=\"refresh\" content=\"0;url={html.escape(target)}\">\n<title>Hermit</title></head>\n"
            f"<body><script>location.replace({json.dumps(target)});</script>\n"
            f"<p>Opening Hermit… <a href=\"{html.escape(target)}\">continue</a></p></body></html>\n")
    path = folder / f"{LAUNCHER_PREFIX}{secrets.token_hex(8)}.html"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def cmd_dashboard(ctx: CliContext, args: argparse.Namespace) -> int:
    """Prints the web app's URL with a one-time ticket to the owner's terminal, and when the gateway runs and a
    browser can be shown here, opens it through an owner-only launcher file (the ticket is never in the
    browser's argv). One ticket for both: whichever is opened first signs its tab in, the other is then used."""
    import webbrowser

    check_token_file(token_path(ctx.home))  # what the ticket is traded for: refused if others can read it
    info = read_lock_info(ctx.home)
    if not info or "port" not in info or not isinstance(info.get("pid"), int):
        # No URL then: whatever holds the configured port now (another local user's program, while the
        # gateway is down) would read the ticket from a page opened there.
        start = _start_how(ctx)
        service = " (or `hermit service install` for a service)" if start == "`hermit gateway run`" else ""
        print(f"the gateway is not running: start it with {start}{service}, then run `hermit dashboard` again",
              file=sys.stderr)
        return 1
    port = info["port"]
    if args.phone:
        return _dashboard_phone(ctx, info)
    host = _client_host(str(info["host"]))
    base = f"http://{url_host(host)}:{port}/"
    url = f"{base}#ticket={issue_ticket(ctx.home, info['pid'])}"
    reveal(url)  # the ticket is this line's purpose: not masked like every other
    print(f"(a one-time link: it signs one browser tab in, within {TICKET_TTL / 60:.0f} minutes; run `hermit "
          "dashboard` again for another)", file=sys.stderr)
    lan = lan_urls(str(info["host"]), port)
    if lan:
        # Host and Origin checks (gateway/app.py, webchat_api.py) pass any of the machine's addresses, so these
        # work from a phone on the same network; stdout keeps its one line for scripts.
        print("from a phone or another computer on your network (the same one-time ticket: whichever link is "
              "opened first signs in; plain http, the token is not encrypted on the way):", file=sys.stderr)
        for other in lan:
            reveal(f"  {other}#ticket={url.split('#ticket=', 1)[1]}", sys.stderr)
    if args.no_open:
        return 0
    if not _can_open_browser(ctx.environ):
        print("(no display here: open the URL in a browser on this machine, or from another one through "
              f"`ssh -L {port}:127.0.0.1:{port} <this host>`)", file=sys.stderr)
        return 0
    launcher = write_launcher(ctx.home, url)
    if not webbrowser.open(launcher.as_uri()):
        print("(could not start a browser: open the URL above yourself)", file=sys.stderr)
    return 0


def _dashboard_phone(ctx: CliContext, info: Mapping[str, Any]) -> int:
    """`hermit dashboard --phone`: a one-time link at an address a phone can reach, as a QR code with the link
    under it; no browser here. A gateway reachable on loopback only gets no ticket, only what to change."""
    # The origins in hermit.yaml now: the running gateway passes those it read at its start (a restart
    # applies an edit, which `hermit doctor` points out).
    how = HowRun.of(info["pid"], info.get("launchd"))  # the address it listens on changes by its restart
    address = phone_address(str(info["host"]), int(info["port"]), ctx.config().config.gateway.allowed_origins, how)
    link = f"{address.base}#ticket={phone_ticket(ctx.home, info['pid'], address.base, info)}"  # https: device-only
    print_qr(qr_text(link), ctx.environ)
    reveal(link)  # the ticket is this line's purpose: not masked like every other
    print(f"(scan it with the phone's camera: a one-time link, it signs one browser in within "
          f"{TICKET_TTL / 60:.0f} minutes; run `hermit dashboard --phone` again for another)", file=sys.stderr)
    if address.warning:
        print(f"warning: {address.warning}", file=sys.stderr)
    return 0


def print_qr(text: str, environ: Mapping[str, str]) -> None:
    """A QR code of qr_text's on stdout. On a terminal, in light-on-dark colours of its own (a code drawn
    dark-on-light, as a light theme would, is one many phone cameras do not read), unless NO_COLOR is set."""
    out = unfiltered(sys.stdout)
    colour = out.isatty() and "NO_COLOR" not in environ
    for line in text.splitlines():
        out.write(f"\x1b[97;40m{terminal_safe(line)}\x1b[0m\n" if colour else terminal_safe(line) + "\n")
    out.flush()


@check("gateway", fix="chmod 600 the token file, or delete it for a new one")
def gateway_token(ctx: CliContext) -> str:
    """For `hermit doctor`: the token file exists, is ours and owner-only; whether a gateway runs."""
    path = token_path(ctx.home)
    if not path.exists():
        return "no token yet (created on the first `hermit gateway run`)"
    check_token_file(path)
    info = read_lock_info(ctx.home)
    running = f"running, pid {info.get('pid')} on port {info.get('port')}" if info else "not running"
    return f"token file {path} is owner-only; gateway {running}"
