"""Delivery targets of jobs and heartbeats checked against the config: the channel exists (in any case),
the account exists (or the one account there is, when none is named), and the account is on.

A job that announces to `telegram:42` used to name an account `default` that need not exist: it was
accepted, `doctor` said ok, and every run failed with "no channel account telegram/default". Now the
target is resolved when the job is added or changed (the CLI, the agent's cron tool) and checked by
`hermit doctor` and at gateway start for heartbeats, with the accounts that do exist in the error.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermit.channels.platforms import names
from hermit.config.allowlist import matches
from hermit.config.schema import ChannelsConfig
from hermit.errors import JobError

WEBCHAT = "webchat"
DEFAULT_ACCOUNT = "default"


@dataclass(frozen=True)
class ResolvedTarget:
    channel: str  # lower case, as the gateway keys its channels
    account: str  # an account that exists in the config
    explicit: bool  # the account was named (not inferred)


def known_channels() -> tuple[str, ...]:
    return (*names(), WEBCHAT)


def configured_accounts(channels: ChannelsConfig, channel: str) -> list[str]:
    """The account ids configured for `channel` (web chat has the one built-in account when enabled)."""
    if channel == WEBCHAT:
        return [DEFAULT_ACCOUNT] if channels.webchat.enabled else []
    return sorted(channels.accounts_of(channel))


def _accounts_text(channel: str, accounts: list[str]) -> str:
    return f"{channel} accounts in the config: {', '.join(accounts)}" if accounts else \
        f"no {channel} account is configured"


def resolve_target(channels: ChannelsConfig, channel: str, account: str | None, *, what: str = "the target"
                   ) -> ResolvedTarget:
    """The channel and account a delivery goes to, or a JobError naming what exists and how to fix it."""
    name = (channel or "").strip().lower()
    if name not in known_channels():
        raise JobError(f"{what}: unknown channel {channel!r}",
                       f"use one of {', '.join(known_channels())}, e.g. --announce telegram:12345")
    accounts = configured_accounts(channels, name)
    if not accounts:
        how = ("enable it (channels.webchat.enabled: true)" if name == WEBCHAT else
               f"add one under channels.{name}.accounts (`hermit setup --channel {name}` does it), then restart "
               "the gateway")
        raise JobError(f"{what}: no {name} account is configured, so nothing could be delivered", how)
    if account:
        if account not in accounts:
            raise JobError(f"{what}: there is no {name} account {account!r} ({_accounts_text(name, accounts)})",
                           f"name one of them: {name}:{accounts[0]}:PEER or --account {accounts[0]}")
        chosen, explicit = account, True
    elif DEFAULT_ACCOUNT in accounts:
        chosen, explicit = DEFAULT_ACCOUNT, False
    elif len(accounts) == 1:
        chosen, explicit = accounts[0], True  # the only account there is: written into the job
    else:
        raise JobError(f"{what}: {name} has several accounts and none is named 'default' "
                       f"({_accounts_text(name, accounts)})",
                       f"say which: {name}:{accounts[0]}:PEER or --account {accounts[0]}")
    if name != WEBCHAT and not channels.accounts_of(name)[chosen].enabled:
        raise JobError(f"{what}: the {name} account {chosen!r} is disabled (enabled: false)",
                       f"enable it under channels.{name}.accounts.{chosen}, or deliver elsewhere")
    return ResolvedTarget(name, chosen, explicit)


def reaches_only_an_owner(channels: ChannelsConfig, channel: str, account: str | None, peer_kind: str,
                          to: str) -> bool:
    """Whether a delivery reaches the owner and nobody else: the web chat (its token holder is the owner)
    or a DM to an id listed under that account's `owners` (by id: a username can change hands). A group,
    a contact or an unknown account is not: main-session text quoted there reaches other people."""
    name = (channel or "").strip().lower()
    if name == WEBCHAT:
        return True
    acc = channels.accounts_of(name).get(account or DEFAULT_ACCOUNT) if name in names() else None
    return acc is not None and peer_kind == "dm" and matches(name, acc.owners, to)


def parse_announce(value: str, account: str | None = None) -> tuple[str, str | None, str]:
    """`CHANNEL:PEER` or `CHANNEL:ACCOUNT:PEER` (+ an --account option) → (channel, account, peer)."""
    parts = value.split(":", 2)
    if len(parts) == 2:
        channel, acct, peer = parts[0], None, parts[1]
    elif len(parts) == 3:
        channel, acct, peer = parts
    else:
        raise JobError(f"--announce {value!r} is not CHANNEL:PEER", "e.g. --announce telegram:12345 or "
                       "telegram:work:12345 (CHANNEL:ACCOUNT:PEER)")
    if not channel.strip() or not peer.strip() or (acct is not None and not acct.strip()):
        raise JobError(f"--announce {value!r} has an empty part", "e.g. --announce telegram:12345")
    if acct is not None and account and acct != account:
        raise JobError(f"--announce names account {acct!r} but --account says {account!r}", "give it once")
    return channel.strip(), (acct or account or None), peer.strip()
