"""`hermit channels list|status` and the doctor check for chat channel accounts (secrets, extras)."""

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


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    rows = _accounts(ctx)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        from hermit.channels.platforms import names

        print(f"no chat channel accounts configured (add one under channels.<{'|'.join(names())}>"
              ".accounts.<id> in hermit.yaml; see docs/channels.md)")
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
        print("no channel has reported a status yet (start the gateway: `hermit gateway run`)")
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
    """Plaintext secrets warn, missing variables and missing extras warn (the gateway would refuse them); a
    platform API base on this machine whose port another login user holds fails (the channel refuses it)."""
    from hermit.channels.local_api import STAKES, base_setting, url_holder
    from hermit.channels.platforms import accounts, platform, secrets

    rows = [(n, a, c) for n, a, c in accounts(ctx.config().config.channels) if c.enabled]
    if not rows:
        return "no chat channel accounts configured"
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
    names = ", ".join(f"{n}/{a}" for n, a, _ in rows)
    if squatted:
        return Check("channels", "fail", f"{names}: " + "; ".join(squatted + problems),
                     "; ".join(dict.fromkeys(fixes)))
    if problems:
        return Check("channels", "warn", f"{names}: " + "; ".join(problems), "; ".join(dict.fromkeys(fixes)))
    return f"{names}: secrets from the environment"
