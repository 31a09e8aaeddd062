"""`hermit gateway run|status` and `hermit dashboard`: the gateway process and how to reach it.

`run` is a composition root: it takes the one-gateway lock before anything slow, reads the token
(created 0600 on first start), sets up logging, builds a runtime per agent and serves until
SIGTERM/SIGINT. The page URL with the token goes to stdout only, never to the log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any

from hermit.cli.checks import check
from hermit.cli.context import CliContext, configured_secrets
from hermit.errors import HermitError
from hermit.gateway.state import GatewayLock, check_token_file, ensure_token, read_lock_info, token_path


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
    from hermit.cli.service import register_service

    register_service(gs)  # `gateway install|uninstall` live in their own module


def configure_dashboard(d: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit dashboard` (its name and help are in the table of cli/commands.py)."""
    d.add_argument("--no-open", action="store_true",
                   help="only print the URL (a headless box, SSH: forward the port and open it elsewhere)")
    d.set_defaults(func=cmd_dashboard)


def cmd_run(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.assistant import build_runtime
    from hermit.gateway.logs import setup_logging
    from hermit.gateway.supervisor import Gateway

    loaded = ctx.config()
    cfg = loaded.config.gateway
    host = args.host or cfg.host
    port = cfg.port if args.port is None else args.port
    lock = GatewayLock.acquire(ctx.home)
    try:
        token = ensure_token(ctx.home)
        setup_logging(ctx.home / "logs", args.log_format, [token, *configured_secrets(ctx)], debug=ctx.debug,
                      max_bytes=cfg.log_max_bytes, backups=cfg.log_backups)
        runtimes = {a.id: build_runtime(ctx, a, long_lived=True) for a in loaded.agents}
        gateway = Gateway(loaded, ctx.home, ctx.environ, runtimes, token, host=host, port=port)

        def ready(url: str) -> None:
            print(f"Hermit gateway on {url}\nweb chat: {url}?token={token}", flush=True)

        return asyncio.run(gateway.serve(lock, ready))
    finally:
        lock.release()


def _running(ctx: CliContext) -> dict[str, Any]:
    info = read_lock_info(ctx.home)
    if not info or "port" not in info:
        raise HermitError(f"no gateway is running on {ctx.home}", "start one with `hermit gateway run`")
    return info


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host


def cmd_status(ctx: CliContext, args: argparse.Namespace) -> int:
    import httpx

    info = _running(ctx)
    token = check_token_file(token_path(ctx.home))
    host = _client_host(str(info["host"]))
    base = f"http://[{host}]:{info['port']}" if ":" in host else f"http://{host}:{info['port']}"
    try:
        r = httpx.get(f"{base}/status", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    except httpx.HTTPError as e:
        raise HermitError(f"gateway pid {info.get('pid')} does not answer on {base}: {e}",
                          "it may be starting or stuck; see <state>/logs/gateway.log") from e
    if r.status_code != 200:
        raise HermitError(f"gateway answered {r.status_code} on /status", "the token file may have changed; "
                          "restart the gateway")
    st = r.json()
    if args.json:
        print(json.dumps(st, ensure_ascii=False, indent=2))
        return 0
    bus = st["bus"]
    life = bus["since_start"]
    print(f"gateway pid {st['pid']} on http://{st['host']}:{st['port']}/ · up {st['uptime_seconds']:.0f} s · "
          f"agents: {', '.join(st['agents'])}")
    print(f"turns running {bus['turns_running']}, waiting {bus['waiting']}, sessions active {bus['sessions_active']}; "
          f"since start: {life['accepted']} messages, {life['turns']} turns, {life['refused']} refused, "
          f"{life['queue_full']} busy · web chat clients {st['webchat_clients']}")
    for ch in st["channels"]:
        state = "connected" if ch["connected"] else "disconnected"
        err = f" — {ch['last_error']}" if ch.get("last_error") else ""
        print(f"  channel {ch['channel']}/{ch['account_id']}: {state}, in {ch['messages_in']}, out "
              f"{ch['messages_out']}{err}")
    for name, s in st["services"].items():
        print(f"  service {name}: {json.dumps(s, ensure_ascii=False)}")
    return 0


def _can_open_browser(environ: Mapping[str, str]) -> bool:
    """A browser can be shown here: not a Linux box without a display (where `webbrowser` would start a text
    browser in this terminal), unless $BROWSER names one on purpose."""
    if environ.get("BROWSER"):
        return True
    return not sys.platform.startswith("linux") or bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def cmd_dashboard(ctx: CliContext, args: argparse.Namespace) -> int:
    """The web app's URL with the token (the page takes the token out of the address bar once read), opened in
    the default browser when the gateway runs and a browser can be shown here."""
    import webbrowser

    token = check_token_file(token_path(ctx.home))
    info = read_lock_info(ctx.home)
    running = bool(info and "port" in info)
    port = info["port"] if info and running else None
    if info and running:
        host = _client_host(str(info["host"]))
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}/?token={token}"
    else:
        cfg = ctx.config().config.gateway
        url = f"http://{cfg.host}:{cfg.port}/?token={token}"
    print(url, flush=True)
    if not running:
        print("(the gateway is not running: start it with `hermit gateway run`, then run `hermit dashboard` again)",
              file=sys.stderr)
        return 0
    if args.no_open:
        return 0
    if not _can_open_browser(ctx.environ):
        print("(no display here: open the URL in a browser on this machine, or from another one through "
              f"`ssh -L {port}:127.0.0.1:{port} <this host>`)", file=sys.stderr)
        return 0
    if not webbrowser.open(url):
        print("(could not start a browser: open the URL above yourself)", file=sys.stderr)
    return 0


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
