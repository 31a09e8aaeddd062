"""`hermit channels accept-routes`: show the owner moves the gateway refuses, and accept them after confirmation.

The gateway refuses to start (and a running one to reload) on a hermit.yaml that gives a channel owner id another
agent's main session than the last gateway did, only because routing changed (gateway/owner_routes.py); moves that
widen nothing are let through (gateway/owner_moves.py). To make such a move on purpose, this command lists each one
(account, id, from which agent to which, and what the new one holds), asks, and rewrites
`<state>/channels/owner-routes.json` from hermit.yaml as it is: no file to delete by hand. A record that cannot be
trusted (damaged, a link, another user's) is named and replaced the same way, and so are the two other records a
start trusts (gateway/records_check.py: which bot each account is, which workspace each agent used), damaged or
missing where a gateway has run. It lists and accepts an owner new to an agent whose earlier owners are gone
(gateway/agent_heirs.py) too.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from hermit.cli.context import CliContext

if TYPE_CHECKING:
    from hermit.gateway.owner_routes import Move


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="accept without asking (for scripts)")
    p.set_defaults(func=cmd_accept_routes)


def cmd_accept_routes(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.running_gateway import restart_how, running_gateway
    from hermit.cli.service import start_how
    from hermit.gateway import owner_routes, records_check

    loaded = ctx.config()
    path = owner_routes.path_of(ctx.home)
    damaged = None
    heirs: list[str] = []
    try:
        found = owner_routes.all_moves(ctx.home, loaded)
        heirs = owner_routes.heir_lines(ctx.home, loaded)
    except owner_routes.UntrustedRecord as e:
        found, damaged = [], e
    others = records_check.problems(ctx.home, loaded)  # which bot each account is, which workspace each agent used
    refused = [m for m in found if m.harmless is None]
    for m in found:
        if m.harmless is not None:
            print(f"let through (widens nothing): {_words(m)}: {m.harmless}")
    if damaged is not None:
        print(f"{damaged.message}; accepting writes a new record from hermit.yaml as it is")
    for other in others:
        print(f"{other.message}; accepting records hermit.yaml (and the bots its accounts run with) as it is")
    if damaged is None and not refused and not heirs and not others:
        print(f"nothing to accept: every channel owner reaches the agent the last gateway gave them ({path})"
              if path.exists() else "nothing to accept: there is no record yet (the gateway's first start writes it)")
        return 0
    if refused:
        print("hermit.yaml gives these senders another agent's main session (its MEMORY.md, notes, transcripts and "
              "owner tools) than the last gateway did:")
        for m in refused:
            print(f"  {_words(m)}")
    if heirs:
        print("hermit.yaml gives these owners the main session of an agent whose earlier owners no longer reach it "
              "(what they left there: MEMORY.md, notes, transcripts):")
        for line in heirs:
            print(f"  {line}")
    if not args.yes:
        print("Accept, so the gateway starts with them there? [y/N] ", end="", flush=True)
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            print("nothing changed")
            return 1
    owner_routes.accept(ctx.home, loaded)
    if others:
        records_check.rerecord(ctx.home, loaded, ctx.environ)
    gw = running_gateway(ctx.home)
    print(f"accepted: {path} now records hermit.yaml's routes; " + (
        f"the running gateway (pid {gw.pid}) keeps refusing the edit until it restarts: {restart_how(gw)}"
        if gw is not None else f"start the gateway: {start_how(ctx)}"))
    return 0


def _words(m: Move) -> str:
    from hermit.gateway.owner_routes import parts_of

    channel, account, sender, *team = parts_of(m.key)
    who = "its contacts" if sender == "*" else f"the group {sender[6:]}" if sender.startswith("group:") else \
        f"owner {sender}"
    where = f" (workspace {team[0]})" if team else ""
    how = "; a new or renamed account" if m.renamed else ""
    return f"{channel} account {account}, {who}{where}: agent {'/'.join(m.was)} -> agent {m.now}{how}"
