"""Where `hermit setup` keeps keys and tokens: the variable each goes into (one a second provider or bot does not
share with the first — it replaced the first one's value), and a note when a key comes from this shell alone."""

from __future__ import annotations

import re
from typing import Any

from hermit.cli.context import CliContext
from hermit.errors import HermitError

KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def configured_provider(ctx: CliContext, name: str) -> Any:
    """The provider `name` as the config has it now (None: not there, or a config that does not load)."""
    try:
        return ctx.config().config.models.providers.get(name)
    except HermitError:  # a broken config is reported when setup validates what it writes
        return None


def env_var_name(name: str) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", name.upper()) + "_API_KEY"


def key_var(ctx: CliContext, kind: str, name: str) -> str:
    """The variable a provider's key is kept in: the one the config already names for this provider (a second
    setup run keeps it), else the kind's usual one (ANTHROPIC_API_KEY…) unless another provider uses it —
    then <NAME>_API_KEY, so the second provider's key never replaces the first one's."""
    try:
        providers = ctx.config().config.models.providers
    except HermitError:  # a broken config is reported when setup validates what it writes
        providers = {}
    mine = providers.get(name)
    if mine is not None and mine.api_key_env:
        return mine.api_key_env
    usual = KEY_VARS.get(kind)
    if usual and not any(p.api_key_env == usual for other, p in providers.items() if other != name):
        return usual
    return env_var_name(name)


def other_accounts_vars(ctx: CliContext, channel: str, account: str) -> set[str]:
    """The variables every other channel account (of any platform) takes its secrets from."""
    from hermit.channels.platforms import accounts
    from hermit.channels.platforms import secrets as channel_secrets

    try:
        channels = ctx.config().config.channels
    except HermitError:
        return set()
    return {s.env_name for name, acc, cfg in accounts(channels) if (name, acc) != (channel, account)
            for s in channel_secrets(name, cfg, every=True)}


def note_shell_only(ctx: CliContext, notes: list[str], var: str, flags: str) -> None:
    """A key taken from this shell's environment but not in hermit.env: the gateway service, cron and a new shell
    do not have it (the service reads hermit.env only), so say how to store it."""
    from hermit.config.envfile import env_file_path, read_env_file

    if var not in read_env_file(env_file_path(ctx.home)).values:
        notes.append(f"{var} comes from this shell's environment only, not {env_file_path(ctx.home)}: the "
                     f"gateway service and a new shell will not have it; store it with "
                     f"printf '%s\\n' \"${var}\" | hermit setup {flags}")
