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
    from hermit.gateway import owner_routes

    loaded = ctx.config()
    path = owner_routes.path_of(ctx.home)
    refused = owner_routes.refusal(ctx.home, loaded)  # the gateway's own start check (one function)
    if refused is not None:
        return Check(NAME, "fail", f"{refused.message}: the gateway refuses it (at start, and on a live reload of "
                     "a running gateway)", refused.hint or "")
    if not path.exists():
        return "no record yet: the gateway's next start writes which agent each channel owner reaches"
    return f"each channel owner reaches the agent the last gateway gave them ({path})"


DOCTOR_CHECKS = (owner_routes_check,)
