"""`hermit doctor` on Slack's workspace-local ids: sessions from before keys named the workspace that were not
renamed (channels/slack_migrate.py), and `peer` bindings that name no account or workspace
(channels/slack_bindings.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.cli.checks import Check, check

if TYPE_CHECKING:
    from hermit.cli.context import CliContext

_SHOWN = 8


def _start_or_restart(ctx: CliContext) -> str:
    """The gateway's restart (the one running, by how it runs), or its start (its installed service, if any)."""
    from hermit.cli.running_gateway import start_or_restart

    return start_or_restart(ctx)


def _lines(lines: list[str]) -> str:
    more = f"; and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
    return "; ".join(lines[:_SHOWN]) + more


@check("slack sessions", needs=("config",))
def slack_sessions_check(ctx: CliContext) -> str | Check:
    loaded = ctx.config()
    if not loaded.config.channels.accounts_of("slack"):
        return "no Slack account"  # asked before the Slack channel's module (and its httpx) is loaded
    from hermit.channels.slack_migrate import journal_path, make_plan

    name = "slack sessions"
    if journal_path(ctx.home).exists():
        return Check(name, "warn", f"a rename of Slack session keys was interrupted ({journal_path(ctx.home)})",
                     f"{_start_or_restart(ctx)}: it finishes the rename first")
    plan = make_plan(loaded, ctx.home)
    pending = sum(len(k) for k in plan.keys.values())
    parts, fixes = [], []
    if pending:
        parts.append(f"{pending} Slack session(s) from before keys named the workspace continue under their new "
                     "key when the gateway next starts")
        fixes.append(_start_or_restart(ctx))
    if plan.waiting:
        parts.append(f"not renamed yet: {_lines(plan.waiting)}")
        fixes.append("let each Slack account connect once (start the gateway with the account enabled); the rest "
                     "is renamed then")
    if plan.left:
        parts.append(f"not renamed, as Hermit cannot tell which workspace they belong to: {_lines(plan.left)}")
        fixes.append("nothing is lost: each keeps its old key and its transcript stays readable (`hermit sessions "
                     "list`), but the chat starts a new session under its new key; a key naming its account is "
                     "renamed whatever other accounts there are")
    if not parts:
        return "no Slack session from before keys named the workspace is left"
    return Check(name, "warn", "; ".join(parts), "; ".join(fixes))


@check("slack bindings", needs=("config",))
def slack_bindings_check(ctx: CliContext) -> str | Check:
    from hermit.channels.slack_bindings import fix_text, unscoped_peer_bindings, warning

    loaded = ctx.config()
    accounts = sorted(loaded.config.channels.accounts_of("slack"))
    text = warning(loaded)
    if text is not None:
        return Check("slack bindings", "warn", text, fix_text(accounts))
    found = unscoped_peer_bindings(loaded)
    if found:
        return (f"{len(found)} Slack peer binding(s) without account_id or team_id: exact with one Slack account; "
                "add account_id before adding a second")
    return "every Slack peer binding names its account or workspace"


DOCTOR_CHECKS = (slack_sessions_check, slack_bindings_check)
