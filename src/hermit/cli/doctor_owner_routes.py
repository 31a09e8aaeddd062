"""`hermit doctor` on owner moves: whether hermit.yaml gives an owner id (or an account's contacts) another
agent's main session than the last gateway gave them (gateway/owner_routes.py).

The gateway refuses such a config — at start against `<state>/channels/owner-routes.json`, on a live reload
against the config in force — and says so in its log. This check says it where the owner looks first, before a
restart fails or while a running gateway keeps refusing the file: which account and id, from which agent to which,
and how to fix it. A record that cannot be trusted (damaged, a link, another user's) is reported the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.cli.checks import Check, check

if TYPE_CHECKING:
    from hermit.cli.context import CliContext

NAME = "owner routes"


@check(NAME, needs=("config",))
def owner_routes_check(ctx: CliContext) -> str | Check:
    from hermit.errors import ConfigError
    from hermit.gateway import owner_routes

    loaded = ctx.config()
    path = owner_routes.path_of(ctx.home)
    try:
        moved = owner_routes.moves(ctx.home, loaded)
    except ConfigError as e:  # the record is there but cannot be trusted: the gateway refuses to start
        return Check(NAME, "fail", f"{e.message}: the gateway refuses to start", e.hint or "")
    if moved:
        return Check(NAME, "fail",
                     f"hermit.yaml would give {', '.join(moved)} the main session of another agent than the last "
                     "gateway did (its MEMORY.md and owner tools) because routing changed: the gateway refuses it "
                     "(at start, and on a live reload of a running gateway)",
                     "bind the account to its agent again (bindings), turn it off (enabled: false) or take those ids "
                     f"out of its owners; to move them on purpose, stop the gateway, remove {path} and start it")
    if not path.exists():
        return "no record yet: the gateway's next start writes which agent each channel owner reaches"
    return f"each channel owner reaches the agent the last gateway gave them ({path})"


DOCTOR_CHECKS = (owner_routes_check,)
