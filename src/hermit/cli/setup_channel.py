"""`hermit setup`'s chat channel account: which platform and account id, its secrets into hermit.env (the config
naming their variables), the WhatsApp phone number id, its owners and what strangers who DM it get.

A new account whose token was left empty on a terminal with nothing to take it from is not added (the gateway would
not start without it); re-aiming another agent's existing account to this --agent is asked first. Split from
cli/setup.py, which keeps the model's questions, the checks and the writing.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hermit.cli.channel_check import CHECKED, DISCORD_API, TokenCheck, confirm_token, refuse_inner_whitespace
from hermit.cli.context import CliContext
from hermit.cli.setup_agent import answered_by
from hermit.cli.setup_keys import note_shell_only, other_accounts_vars
from hermit.cli.setup_prompt import Prompter, read_stdin_line
from hermit.errors import ConfigError

if TYPE_CHECKING:
    from hermit.cli.setup import Plan


def _given_secrets(args: argparse.Namespace, channel: str, fields: list[str]) -> tuple[dict[str, str], str | None]:
    """The account's secrets given with --secret / --secret-stdin by field, and the token (--token,
    --token-stdin); stdin is read one line each: the token's first, then each --secret-stdin in order."""
    given = dict(s.split("=", 1) for s in args.secret if "=" in s)
    bad = [s for s in args.secret if "=" not in s]
    if bad:
        raise ConfigError(f"--secret {bad[0]!r} is not FIELD=VALUE", "e.g. --secret-stdin app_token, or --secret "
                          "app_token=xapp-…")
    unknown = (set(given) | set(args.secret_stdin)) - set(fields)
    if unknown:
        raise ConfigError(f"{channel} accounts have no secret {sorted(unknown)[0]!r}",
                          f"{channel} needs: {', '.join(fields)}")
    token = args.token or (read_stdin_line("token", "--token-stdin") if args.token_stdin else None)
    for name in args.secret_stdin:
        given[name] = read_stdin_line(name, f"--secret-stdin {name}")
    return given, token


def _plan_secrets(ctx: CliContext, args: argparse.Namespace, ui: Prompter, plan: Plan, channel: str, account: str,
                  new: bool, cfg: Any) -> bool:
    """The account's secrets: each into hermit.env under its variable, the config naming the variable. False when
    a new account's secret was left empty on a terminal with nothing to take it from: such an account stopped the
    whole gateway from starting (`no token`), web app included, so it is not added."""
    from hermit.channels.platforms import secrets as channel_secrets
    from hermit.config.edit import DELETE

    prefix = ("channels", channel, "accounts", account)
    wanted = channel_secrets(channel, cfg)
    given, token = _given_secrets(args, channel, [s.field for s in wanted])
    taken = other_accounts_vars(ctx, channel, account)
    for i, s in enumerate(wanted):
        chosen = i == 0 and args.token_var
        var = args.token_var if chosen else s.env_name
        # Another account's variable (a second bot got the platform's default name, TELEGRAM_BOT_TOKEN): its
        # own value goes into a variable of its own, or the first bot's token is replaced and both poll one bot.
        own = var if chosen or var not in taken else f"{var}_{re.sub(r'[^A-Z0-9]', '_', account.upper())}"
        if new:
            var = own
        value = given.get(s.field)
        if i == 0 and value is None:
            value = token
        flag = "--token-stdin" if i == 0 else f"--secret-stdin {s.field}"
        what = f"{channel} {s.field.replace('_', ' ')}"
        if value is not None:
            value = refuse_inner_whitespace(value, what, flag)
        elif ui.interactive:
            none_yet = new and not ctx.environ.get(var)
            value = _ask_secret(ui, f"{what}, stored as {own}" + (" (Enter keeps it)" if ctx.environ.get(var) else ""),
                                what, flag)
            if value is None and none_yet:
                print(f"  (no {what}: the {channel} account {account} is not added — the gateway would not start "
                      f"without it; `hermit setup --channel {channel} --account {account}` adds it once you have one)")
                return False
        if value is not None:
            var = own
            if channel in CHECKED and i == 0:
                base = str(args.api_base or getattr(cfg, "api_base", None) or getattr(cfg, "base_url", None)
                           or (DISCORD_API if channel == "discord" else ""))
                plan.token_check = TokenCheck(account, base, value, channel)
        if value is None and ctx.environ.get(var):
            note_shell_only(ctx, plan.notes, var, f"--channel {channel} --account {account} {flag}")
        if value is None and not ctx.environ.get(var):
            plan.notes.append(f"{var} is not set yet: add it with `hermit setup --channel {channel} --account "
                              f"{account} {flag}` (or put {var}=… in {ctx.home / 'hermit.env'}), then (re)start "
                              "the gateway")
        if value is not None:
            plan.secrets[var] = value
        plan.updates.append(((*prefix, f"{s.field}_env"), var))
        plan.updates.append(((*prefix, s.field), DELETE))  # a plaintext secret would win over the variable
    return True


def plan_channel(ctx: CliContext, args: argparse.Namespace, ui: Prompter, plan: Plan) -> None:
    from hermit.config.channels import WhatsAppAccountConfig, platforms

    channel = args.channel
    if channel is None:
        titles = ", ".join(s.title for s in platforms().values())
        if not ui.interactive or not ui.yes(f"Add a chat channel account ({titles})?"):
            return
        channel = ui.choose("Which chat platform?", [(name, s.title) for name, s in platforms().items()])
    # For another agent, Enter names a bot of its own: "default" is the default agent's bot, which a binding to
    # this agent would take away from it (the owner's DMs answered by the family agent from then on).
    account = args.account or ui.text("Account id (a name for this bot)", plan.agent or "default", "--account",
                                      "an account id")
    existing = ctx.config().config.channels.accounts_of(channel).get(account)
    if existing is not None and plan.agent is not None and ui.interactive and not args.account:
        now = answered_by(ctx, channel, account)
        if now != plan.agent and not ui.yes(f"{channel}/{account} answers as agent {now} now; answer as agent "
                                            f"{plan.agent} instead (its owners then reach {plan.agent}'s main "
                                            f"session, no longer {now}'s)?"):
            print(f"  ({channel}/{account} left as it is; no channel account changed)")
            return
    cfg = existing or platforms()[channel]()
    prefix = ("channels", channel, "accounts", account)
    before = (len(plan.updates), dict(plan.secrets), len(plan.notes), plan.token_check)  # the account not added
    if args.api_base and channel != "discord":  # discord.py talks to discord.com: the URL only redirects the check
        if channel not in CHECKED:
            raise ConfigError(f"--api-base is for Telegram, Slack, WhatsApp and Discord's token check, not {channel}",
                              f"{channel}'s library talks to its platform itself: leave --api-base out")
        plan.updates.append(((*prefix, "api_base" if channel == "telegram" else "base_url"), args.api_base))
    if not _plan_secrets(ctx, args, ui, plan, channel, account, existing is None, cfg):
        del plan.updates[before[0]:], plan.notes[before[2]:]
        plan.secrets, plan.token_check = before[1], before[3]
        return
    if isinstance(cfg, WhatsAppAccountConfig):  # the one platform with a non-secret id to ask for
        pid = args.phone_number_id or (cfg.phone_number_id if existing else None) or \
            ui.text("WhatsApp phone number id (Meta app → WhatsApp → API setup)", None, "--phone-number-id",
                    "the WhatsApp phone number id")
        plan.updates.append(((*prefix, "phone_number_id"), pid))
        if plan.token_check:  # the access token is checked by reading this number
            plan.token_check = replace(plan.token_check, phone_number_id=str(pid))
    owners = list(args.owner)
    for owner in owners:
        _owner_problem(channel, owner, raise_it=True)
    if not owners and ui.interactive:
        owners = _ask_owners(ui, channel, existing.owners if existing else [])
    if owners:
        plan.updates.append(((*prefix, "owners"), owners))
    policy = args.dm_policy
    if policy is None and ui.interactive:
        choices = [("pairing", "a pairing code you approve with `hermit pairing approve` (recommended)"),
                   ("allowlist", "nothing, unless listed under allow_from"),
                   ("open", "a session of their own (sandboxed, no access to your notes)"),
                   ("disabled", "nothing: DMs are off")]
        # Enter keeps the account's policy (a re-run to put in a new token turned `disabled` or `allowlist`
        # into `pairing`: every stranger's DM answered with a code).
        keep = [k for k, _ in choices].index(existing.dm_policy) + 1 if existing else 1
        policy = ui.choose("What do strangers who DM the bot get?", choices, default=keep)
    if policy is not None or existing is None:
        plan.updates.append(((*prefix, "dm_policy"), policy or "pairing"))
    plan.channel = f"{channel}/{account}"
    plan.account = (channel, account)


def _owner_problem(channel: str, owner: str, *, raise_it: bool = False) -> str | None:
    """Why `owner` can never match a sender on `channel` (None: it can). Said at the question, not after the last
    one: setup ended with `invalid config` at a line of a hermit.yaml it had not written, every answer lost."""
    from hermit.config.allowlist import AllowlistEntryError, normalize_entry

    try:
        normalize_entry(channel, owner)
    except AllowlistEntryError as e:
        if raise_it:
            raise ConfigError(f"--owner {owner!r}: {e.message}", e.hint) from None
        return f"{e.message}: {e.hint}"
    return None


def _ask_owners(ui: Prompter, channel: str, now: list[str]) -> list[str]:
    """The owner ids typed at the prompt (comma-separated), asked again while one can never match a sender."""
    from hermit.config.channels import platforms

    hint = platforms()[channel].owner_hint
    while True:
        answer = ui.text(f"Your own sender id on {channel}: {hint}; Enter to skip", ", ".join(now), "--owner",
                         "an owner id")
        owners = [o.strip() for o in answer.split(",") if o.strip()]
        problems = [p for p in (_owner_problem(channel, o) for o in owners) if p]
        if not problems:
            return owners
        print(f"  ({problems[0]}; type it again, or Enter to skip)")
        now = []


def _ask_secret(ui: Prompter, question: str, what: str, flag: str) -> str | None:
    """A secret typed at the prompt (None: Enter); one with a space inside is asked again, not an error that ends
    setup with every answer lost."""
    while True:
        value = ui.secret(question) or None
        try:
            return value and refuse_inner_whitespace(value, what, flag)
        except ConfigError as e:
            print(f"  ({e.message}: paste it again, or press Ctrl-C to stop without saving anything)")


def token_kept(ui: Prompter, plan: Plan) -> str | None:
    """Check the token given this run (plan.token_check): None to save the plan as it is (the token answered, or
    the user saves it anyway); on a terminal a refused token may be pasted again, and Enter there leaves the
    account out of the plan — the model and the rest are still saved — returning the line that says how to add
    it later. Off a terminal a refused token saves nothing (''). Before, a mistyped token on a terminal dropped
    every answer, a model that had just answered too, and the hint offered --no-check (saving the wrong token)."""
    check = plan.token_check
    assert check is not None and plan.account is not None
    var = next(v for v, value in plan.secrets.items() if value == check.token)
    while not confirm_token(check, ui.yes):
        if not ui.interactive:
            return ""
        what = f"{check.channel} token"
        token = _ask_secret(ui, f"Paste the {what} again (Enter leaves the account out)", what, "--token-stdin")
        if token is None:
            channel, account = plan.account
            prefix = ("channels", channel, "accounts", account)
            plan.updates[:] = [u for u in plan.updates if u[0][:4] != prefix]
            plan.secrets.pop(var, None)
            plan.notes[:] = [n for n in plan.notes if var not in n]
            plan.channel = plan.account = plan.token_check = None
            return (f"the {channel} account {account} was not added (its token was refused): `hermit setup "
                    f"--channel {channel} --account {account}` adds it with the right token")
        plan.secrets[var] = token
        check = plan.token_check = replace(check, token=token)
    return None
