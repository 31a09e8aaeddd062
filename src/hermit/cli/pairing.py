"""`hermit pairing list|approve`: who is waiting to talk to the assistant, and letting them in; doctor checks.

Pairing codes are issued by the gateway to unknown DM senders (dm_policy: pairing); the owner approves
one here. This works while the gateway runs: both sides lock the pairing files.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from hermit.cli.checks import Check, CheckFn, check
from hermit.cli.context import CliContext
from hermit.errors import ConfigError, HermitError

if TYPE_CHECKING:  # the commands load these themselves, so `hermit --help` stays quick
    from hermit.config.schema import ChannelAccessConfig


def register(sub: Any) -> None:
    s = sub.add_parser("pairing", help="list and approve pairing requests from chat senders")
    ss = s.add_subparsers(dest="pairing_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("list", help="pending pairing requests (codes expire after 1 hour)")
    p.add_argument("channel", nargs="?", help="only this channel (telegram, discord, slack, whatsapp)")
    p.add_argument("--json", action="store_true", help="print the pending requests as JSON")
    p.set_defaults(func=cmd_list)
    p = ss.add_parser("approve", help="let the sender of a pairing code talk to the assistant")
    p.add_argument("channel", help="the channel the code was sent on")
    p.add_argument("code", help="the 8-character code the sender received")
    p.set_defaults(func=cmd_approve)


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.access import PairingStore

    store = PairingStore(ctx.home)
    requests = store.pending(args.channel)
    now = time.time()
    if args.json:
        print(json.dumps([{"channel": r.channel, "account_id": r.account_id, "sender_id": r.sender_id,
                           "sender_name": r.sender_name, "code": r.code, "created_at": r.created_at,
                           "expires_at": r.expires_at} for r in requests], ensure_ascii=False, indent=2))
        return 0
    if not requests:
        where = f" on {args.channel}" if args.channel else ""
        print(f"no pending pairing requests{where}")
        return 0
    rows = [(r.channel, r.account_id, r.sender_id + (f" ({r.sender_name})" if r.sender_name else ""), r.code,
             f"{max(0, int((r.expires_at - now) // 60))} min") for r in requests]
    header = ("CHANNEL", "ACCOUNT", "SENDER", "CODE", "EXPIRES IN")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(f"\napprove one with: hermit pairing approve {rows[0][0]} {rows[0][3]}")
    return 0


def cmd_approve(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.access import PairingStore

    req = PairingStore(ctx.home).approve(args.channel, args.code)
    who = req.sender_id + (f" ({req.sender_name})" if req.sender_name else "")
    print(f"approved {who} on {req.channel}/{req.account_id}: their next message reaches the assistant")
    return 0


@check("bindings", fix="fix or remove these bindings (see the README's routing section)", needs=("config",))
def bindings_check(ctx: CliContext) -> str:
    from hermit.agent.routing import binding_problems

    cfg = ctx.config()
    problems = binding_problems(cfg.config.bindings, [a.id for a in cfg.agents], cfg.config.channels)
    if problems:
        raise ConfigError("; ".join(problems), "fix or remove these bindings (see the README's routing section)")
    return f"{len(cfg.config.bindings)} binding(s), default agent {cfg.agent().id}"


@check("access", fix="fix channels.<name>.accounts in the config", needs=("config",))
def access_check(ctx: CliContext) -> str | Check:
    channels = ctx.config().config.channels
    parts: list[str] = []
    wide_open: list[str] = []
    for name in ("telegram", "discord", "slack", "whatsapp"):
        accounts: dict[str, ChannelAccessConfig] = getattr(channels, name).accounts
        for account_id, acc in accounts.items():
            groups = f"groups {acc.group_policy}" + (f" ({len(acc.groups)})" if acc.group_policy == "allowlist" else "")
            parts.append(f"{name}/{account_id}: DMs {acc.dm_policy}, {groups}")
            if acc.dm_policy == "open" or (acc.group_policy == "open" and not acc.require_mention):
                wide_open.append(f"{name}/{account_id}")
    detail = "; ".join(parts) or "no chat accounts configured (web chat only)"
    if wide_open:
        # Allowed on purpose, but worth a second look: anyone can make the agent work (non-main, sandboxed).
        return Check("access", "warn", f"{detail} — open to anyone: {', '.join(wide_open)}",
                     "use dm_policy: pairing (or allowlist) unless strangers should reach the assistant")
    return detail


@check("credentials", fix="chmod 700 the credentials dir and 600 its files")
def credentials_check(ctx: CliContext) -> str:
    from hermit.channels.pairing import credential_permission_problems

    problems = credential_permission_problems(ctx.home)
    if problems:
        base = ctx.home / "credentials"
        raise HermitError("; ".join(problems),
                          f"chmod 700 {base} && chmod 600 {base}/*  (pairing files decide who may talk to you)")
    return f"{ctx.home / 'credentials'}: owner-only"


# `hermit doctor` runs these after the config check ('*' outside open is a config error reported there).
DOCTOR_CHECKS: tuple[CheckFn, ...] = (bindings_check, access_check, credentials_check)
