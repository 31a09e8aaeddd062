"""`hermit channels list|status|accept-routes` (the last in cli/channels_routes.py) and the doctor check for chat channel accounts (secrets, extras)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Callable
from typing import Any

from hermit.cli.checks import Check, check
from hermit.cli.context import CliContext
from hermit.errors import HermitError


def configure(s: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit channels` (its name and help are in the table of cli/commands.py)."""
    ss = s.add_subparsers(dest="channels_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("list", help="configured accounts, their policies and where their secrets come from")
    p.add_argument("--json", action="store_true", help="print the accounts as JSON")
    p.set_defaults(func=cmd_list)
    p = ss.add_parser("status", help="connected, last error, messages in/out (as the gateway last wrote them)")
    p.add_argument("--json", action="store_true", help="print the statuses as JSON")
    p.set_defaults(func=cmd_status)
    from hermit.cli.channels_routes import configure as configure_accept

    configure_accept(ss.add_parser("accept-routes", help="show owner moves the gateway refuses (another agent's main "
                                   "session after a routing change) and accept them after confirmation"))


def _accounts(ctx: CliContext) -> list[dict[str, Any]]:
    from hermit.channels.platforms import accounts, secrets, webhook_path

    out = []
    owners = _owners(ctx)
    for name, account_id, cfg in accounts(ctx.config().config.channels):
        found = []
        for s in secrets(name, cfg):
            if s.plaintext:
                found.append(f"{s.field}: in the config (plaintext)")
            else:
                state = "set" if ctx.environ.get(s.env_name) else "NOT SET"
                found.append(f"{s.field}: ${s.env_name} ({state})")
        out.append({"channel": name, "account": account_id, "enabled": cfg.enabled, "dm_policy": cfg.dm_policy,
                    "group_policy": cfg.group_policy, "mode": getattr(cfg, "mode", None),
                    "webhook": webhook_path(name, account_id, cfg), "secrets": found,
                    "owners": [owners(name, o) for o in cfg.owners]})
    return out


def _owners(ctx: CliContext) -> Callable[[str, str], str]:
    """How an owner entry is shown: an @username with the id it is pinned to (channels/username_pins.py)."""
    from hermit.channels.pairing import PairingStore
    from hermit.channels.username_pins import UsernamePins

    pins = UsernamePins(PairingStore(ctx.home))

    def show(channel: str, entry: str) -> str:
        if not entry.startswith("@"):
            return entry
        try:
            pin = pins.of(channel).get(entry)
        except HermitError:
            return f"{entry} (the pins file cannot be read: `hermit doctor` says more)"
        return f"{entry} (pinned to {pin.sender_id})" if pin else f"{entry} (not pinned yet)"
    return show


def setup_commands() -> list[str]:
    """For each platform, the `hermit setup` command that adds an account with its secrets on stdin."""
    from hermit.channels.platforms import names, secrets
    from hermit.config.channels import ChannelAccessConfig

    kinds = {c.platform: c for c in ChannelAccessConfig.__subclasses__()}
    out = []
    for name in names():
        fields = [s.field for s in secrets(name, kinds[name]())]
        extra = " --phone-number-id ID" if name == "whatsapp" else ""
        out.append(f"hermit setup --channel {name}{extra} --token-stdin"
                   + "".join(f" --secret-stdin {f}" for f in fields[1:]))
    return out


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    rows = _accounts(ctx)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no chat channel accounts configured; `hermit setup` adds one (it asks), or give the secrets on stdin, "
              "one a line (setup checks the token before saving; see docs/channels.md):")
        for line in setup_commands():
            print(f"    {line}")
        return 0
    for r in rows:
        flags = "" if r["enabled"] else " (disabled)"
        extra = f" mode={r['mode']}" if r["mode"] else ""
        hook = f" webhook={r['webhook']}" if r["webhook"] else ""
        print(f"{r['channel']}/{r['account']}{flags}: dm_policy={r['dm_policy']} "
              f"group_policy={r['group_policy']}{extra}{hook}")
        if r["owners"]:
            print(f"    owners: {', '.join(r['owners'])}")
        for s in r["secrets"]:
            print(f"    {s}")
    return 0


def cmd_status(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.status import read_statuses

    rows = read_statuses(ctx.home)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        from hermit.cli.running_gateway import start_or_restart

        print(f"no channel has reported a status yet ({start_or_restart(ctx)})")
        return 0
    now = time.time()
    for r in rows:
        if "channel" not in r:
            print(f"?: {r.get('last_error')}")
            continue
        if not r.get("running"):
            state = "stopped (gateway not running)"
        else:
            state = "connected" if r.get("connected") else "NOT connected"
        age = now - float(r.get("updated_at") or now)
        print(f"{r['channel']}/{r['account_id']}: {state}; in {r.get('messages_in', 0)}, "
              f"out {r.get('messages_out', 0)}; updated {age:.0f}s ago")
        if r.get("last_error"):
            print(f"    last error: {r['last_error']}")
    return 0


@check("channels", fix="see `hermit channels list`", needs=("config",))
def channels_check(ctx: CliContext) -> str | Check:
    """Each enabled account, once: plaintext secrets, missing variables and missing extras warn (the gateway would
    refuse them); a platform API base on this machine whose port another login user holds fails (the channel
    refuses it); and what the gateway last said of an account that is not connected (a token Telegram refused
    stopped the channel while this said the channels were fine): a running gateway's error fails, the last
    run's warns until hermit.yaml or hermit.env changes."""
    from hermit.channels.local_api import STAKES, base_setting, url_holder
    from hermit.channels.platforms import accounts, platform, secrets

    rows = [(n, a, c) for n, a, c in accounts(ctx.config().config.channels) if c.enabled]
    if not rows:
        return ("no chat channel accounts configured (to add one: `hermit setup --channel telegram --token-stdin`; "
                "`hermit channels list` gives every platform's command)")
    problems, fixes, squatted = [], [], []
    for name, account_id, cfg in rows:
        where = f"channels.{name}.accounts.{account_id}"
        base = base_setting(cfg)
        holder = url_holder(base[1]) if base else None
        if base and holder:
            squatted.append(f"{where}.{base[0]} {base[1]}: {holder.describe(STAKES)}")
            fixes.append(f"start the server {where}.{base[0]} names as yourself, as root or as a system account "
                         f"(another user's program holds port {holder.port}: stop it or ask an administrator "
                         "to), or change the setting")
        for i, s in enumerate(secrets(name, cfg)):
            # `hermit setup` keeps it in hermit.env, which the gateway (and its service) reads at start.
            setup = (f"`hermit setup --channel {name} --account {account_id} "
                     f"{'--token-stdin' if i == 0 else f'--secret-stdin {s.field}'}` (the value on stdin)")
            if s.plaintext:
                problems.append(f"{where}.{s.field} is plaintext in the config")
                fixes.append(f"move it to hermit.env with {setup}; or set {s.env_name} in hermit.env and "
                             f"{where}.{s.field}_env yourself")
            elif not ctx.environ.get(s.env_name):
                problems.append(f"{where}: ${s.env_name} is not set")
                fixes.append(f"store it with {setup}; or add {s.env_name}=… to hermit.env — then (re)start the "
                             "gateway")
        module, extra = platform(name).sdk or ("", "")
        if module and importlib.util.find_spec(module) is None:
            problems.append(f"{where} needs {module}, which is not installed")
            fixes.append(f"pip install '{extra}'")
    now, past = _reported_errors(ctx, {(n, a) for n, a, _ in rows}, fixes)
    names = ", ".join(f"{n}/{a}" for n, a, _ in rows)
    parts = ([f"{names}: " + "; ".join(squatted + problems)] if squatted or problems else []) \
        + (["not connected: " + "; ".join(now)] if now else []) \
        + (["when the gateway last ran: " + "; ".join(past)] if past else [])
    if squatted or now:
        return Check("channels", "fail", "; ".join(parts), "; ".join(dict.fromkeys(fixes)))
    if parts:
        return Check("channels", "warn", "; ".join(parts), "; ".join(dict.fromkeys(fixes)))
    return f"{names}: secrets from the environment; no error reported by the gateway"


def _reported_errors(ctx: CliContext, configured: set[tuple[str, str]], fixes: list[str]) -> tuple[list[str], list[str]]:
    """What the gateway last said of each configured account that is not connected: (a running gateway's errors,
    the last run's unless hermit.yaml or hermit.env changed since); each one's fix is added to `fixes`."""
    from hermit.channels.status import read_statuses
    from hermit.config.envfile import env_file_path

    changed = max((p.stat().st_mtime for p in (ctx.paths.config_file(), env_file_path(ctx.home)) if p and p.exists()),
                  default=0.0)
    now, past = [], []
    then = ""
    for r in read_statuses(ctx.home):
        key = (r.get("channel"), r.get("account_id"))
        if key not in configured or r.get("connected") or not r.get("last_error"):
            continue
        name, account = str(key[0]), str(key[1])
        where = f"{name}/{account}: {r['last_error']}"
        if r.get("running"):
            now.append(where)
        elif float(r.get("updated_at") or 0) >= changed:
            past.append(where)
        else:
            continue
        then = then or _then(ctx)
        fixes.append(_channel_fix(name, account, str(r["last_error"]), then))
    return now, past


def _then(ctx: CliContext) -> str:
    """After a fix: the running gateway's restart by how it runs, or its start (its installed service's, if any)."""
    from hermit.cli.running_gateway import restart_how, running_gateway
    from hermit.cli.service import start_how

    gw = running_gateway(ctx.home)
    return f", then restart the gateway: {restart_how(gw)}" if gw is not None else f", then {start_how(ctx)}"


def _channel_fix(name: str, account: str, error: str, restart: str) -> str:
    if " 401 " in f" {error} " or "Unauthorized" in error or "invalid_auth" in error:
        return (f"the token is wrong or revoked: store the right one with `hermit setup --channel {name} --account "
                f"{account} --token-stdin` (it checks it before saving){restart}")
    if "409" in error or "another poller" in error:
        return f"stop the other program that uses this bot's token (or its webhook){restart}"
    return f"see `hermit logs` for {name}/{account}{restart}"
