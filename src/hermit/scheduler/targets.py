"""Delivery targets of jobs and heartbeats checked against the config: the channel exists (in any case),
the account exists (or the one account there is, when none is named), and the account is on.

A job that announces to `telegram:42` used to name an account `default` that need not exist: it was
accepted, `doctor` said ok, and every run failed with "no channel account telegram/default". Now the
target is resolved when the job is added or changed (the CLI, the agent's cron tool) and checked by
`hermit doctor` and at gateway start for heartbeats, with the accounts that do exist in the error.

Whether a target reaches only the owner of the job's (or heartbeat's) agent is `not_the_owner`: the cron
tool's rule for the targets it may choose, and the owner's rule for main-session text: a main-session job,
or a heartbeat alert, reaches someone else only when the owner opted in (the job's `delivery.shares_main`,
`heartbeat.share_alerts_with_target`). Both are checked when a job is made or changed, again before every
run or delivery (the config can change), and by `hermit doctor`.

Whether a target may talk to the assistant now is `not_let_in` (an owner, a contact the DM policy lets in,
a group under `groups`): a job aimed at someone revoked, never approved or taken off `groups` is skipped at
each run (NotLetIn), kept, and delivers again once they are let in; adding or aiming such a job warns.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermit.agent.routing import RouteInput, Router
from hermit.channels.access import Rule, decide, standing
from hermit.channels.platforms import names
from hermit.config.allowlist import is_username, matches, sender_key
from hermit.config.load import LoadedConfig
from hermit.config.schema import ChannelAccessConfig, ChannelsConfig
from hermit.errors import ConfigError, HermitError, JobError

WEBCHAT = "webchat"
DEFAULT_ACCOUNT = "default"
DM_OFF = "dm_policy is disabled"  # in not_let_in's words for a DM under `dm_policy: disabled`


@dataclass(frozen=True)
class Refused:
    """Why a delivery's target is not let in (`not_let_in`): the words, and the admission rule that refused it
    (channels/access.Rule). What lets them in again (`let_in_again`) goes by the rule, so rewording the text — or a
    peer id or account name that happens to hold such words — cannot change the fix named or what is resumed.
    `str()` is the words (logs, run records, warnings)."""

    text: str
    rule: Rule

    def __str__(self) -> str:
        return self.text

    def reworded(self, text: str) -> Refused:
        """`text` (a sentence built around this one), with the same rule."""
        return Refused(text, self.rule)


# The hint's last words when the caller cannot say how the gateway runs: setup, which saves the account, names the
# running gateway's restart by how it runs (cli/running_gateway.after_change_note).
AS_SETUP_SAYS = ("restart the gateway as setup says (its service's restart when it runs as one; `hermit doctor` says "
                 "it too)")


class NoAccount(JobError):
    """A delivery names a chat channel with no account configured. The fix ends with the gateway's restart (it reads
    channel accounts when it starts), in words for how it runs — which the scheduler, importing no gateway, cannot
    know: a composition root that can (the CLI: cli/running_gateway.start_or_restart) asks `hint_then` for them."""

    def __init__(self, message: str, channel: str) -> None:
        super().__init__(message, no_account_hint(channel))
        self.channel = channel

    def hint_then(self, then: str | None) -> str:
        """The hint with `then` (e.g. "restart the gateway: `systemctl --user restart …`") as its last words."""
        return no_account_hint(self.channel, then)


def no_account_hint(channel: str, then: str | None = None) -> str:
    return f"add one under channels.{channel}.accounts with `hermit setup --channel {channel}`, then {then or AS_SETUP_SAYS}"


def hint_then(e: HermitError, then: str | None) -> str:
    """`e`'s hint, with the gateway's restart in `then`'s words when it is a NoAccount's."""
    return e.hint_then(then) if isinstance(e, NoAccount) else e.hint


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
        message = f"{what}: no {name} account is configured, so nothing could be delivered"
        if name == WEBCHAT:
            raise JobError(message, "enable it (channels.webchat.enabled: true)")
        raise NoAccount(message, name)
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


# The peer the gateway routes the web chat as (gateway/supervisor.py): the token holder, an owner.
WEBCHAT_PEER = "owner"


def _agents_reached(router: Router, channel: str, account: str, peer: str) -> list[str]:
    """Every agent an owner's DM from `peer` on `channel`/`account` (or the web chat) can be routed to. A
    Slack DM carries its workspace's team_id, which a `team_id` binding can route on; the workspace is not
    known here, so each team or guild the channel's bindings name is tried, and none (any other value)."""
    scopes = {(None, None)} | {(b.match.guild_id, b.match.team_id) for b in router.bindings
                               if b.match.channel == channel}
    return sorted({router.resolve(RouteInput(channel, account, "dm", peer, guild_id=guild, team_id=team,
                                             sender_is_owner=True)).agent_id for guild, team in scopes})


def peer_kind_of(channel: str, peer_kind: str, to: str) -> str:
    """The kind of peer a delivery to `to` really reaches: a group when it says so, and also when the id
    can only be a group's — a Telegram chat id below zero (groups, supergroups, channels) or a public one's
    `@username` (sendMessage takes it as chat_id; a bot cannot write to a person by username), a Slack
    conversation id starting with C or G (a channel, a private channel) or a channel's `#name`
    (chat.postMessage takes it). The adapters send to that chat whatever kind a job or heartbeat target names,
    so `dm` there does not make it a DM: judged as one, with `dm_policy: open` a group not under `groups` was
    let in."""
    name, peer = (channel or "").strip().lower(), (to or "").strip()
    if peer_kind == "group" or (name == "telegram" and peer[:1] in ("-", "@")) or \
            (name == "slack" and peer[:1] in ("C", "G", "#")):
        return "group"
    return peer_kind


def not_the_owner(loaded: LoadedConfig, agent_id: str, channel: str, account: str | None, peer_kind: str,
                  to: str) -> str | None:
    """Who a delivery of agent `agent_id`'s main-session text (MEMORY.md, owner-only notes) reaches, in
    words, when that is not only that agent's owner; None when it is.

    The agent's owner is whoever reaches its main session: the web chat when it routes to the agent (its
    token holder), or a DM to an id under an account's `owners` (by id: a username can change hands)
    whose DMs from that id the bindings route to the agent. An owner of an account bound to another agent
    is someone else's owner (a relative's own agent on the family bot): the text is not theirs to read.
    A group (named so, or by an id only a group has: `peer_kind_of`), a contact, an unknown account, or
    bindings that do not load are not the owner either."""
    name = (channel or "").strip().lower()
    account = account or DEFAULT_ACCOUNT
    kind = peer_kind_of(name, peer_kind, to)
    where = f"{name}/{account} {kind} {to}"
    try:
        router = Router.from_config(loaded)
    except ConfigError as e:  # the gateway would not start; nothing can be said to reach the owner
        return f"{where}, which cannot be checked: {e.message}"
    if name == WEBCHAT:
        agents = _agents_reached(router, WEBCHAT, DEFAULT_ACCOUNT, WEBCHAT_PEER)
        return None if agents == [agent_id] else f"the web chat, which the bindings give to agent {agents[0]}, " \
            f"not {agent_id}"
    acc = loaded.config.channels.accounts_of(name).get(account) if name in names() else None
    if acc is None:
        return f"{where}, an account that channels.{name}.accounts does not define"
    if kind != "dm":
        return f"the group {name}/{account} {to}"
    if not matches(name, acc.owners, to):
        return f"{where}, who is not listed under channels.{name}.accounts.{account}.owners{_pinned(loaded, name, acc, to)}"
    agents = _agents_reached(router, name, account, to)
    if agents == [agent_id]:
        return None
    others = ", ".join(a for a in agents if a != agent_id)
    if agent_id in agents:  # a team or guild binding takes some of them elsewhere
        return (f"{where}, an owner of that account whose DMs the bindings route to agent {others} from some "
                f"workspaces or servers, not only to {agent_id}")
    return f"{where}, an owner of that account whose DMs the bindings route to agent {others}, not {agent_id}"


class NotLetIn(JobError):
    """A delivery to someone the channel account does not let talk to the assistant now: the run is skipped
    (logged with this reason, nothing sent), the job kept, so letting them in again resumes it."""


def not_let_in(loaded: LoadedConfig, channel: str, account: str | None, peer_kind: str, to: str) -> Refused | None:
    """Why a scheduled delivery to `to` would reach someone the channel account does not let talk to the
    assistant now, in words; None when it does: the gateway's own admission decision (channels/access.decide)
    asked about the peer alone — an owner, a contact its DM policy lets in (`open`, `allow_from`, approved by
    pairing), a group its group policy lets in (`open`, or listed under `groups`), or the web chat; nobody in
    DMs under `dm_policy: disabled` (the owners neither), nobody on an account that is off.

    A job aimed at a contact kept sending after `hermit pairing revoke` (and to a group after it left `groups`,
    or to someone never approved): its replies went on reaching a person the owner had cut off. Asked against
    the config in force and the pairing files as they are now, with no side effect (no pairing code is issued,
    no username pinned). Usernames in `owners`/`allow_from` count only where they are pinned to this id (no
    username is presented here). The scheduler kept its own copy of these rules until s17, and it let owners in
    under `dm_policy: disabled` and on a disabled account, where the gateway refuses them."""
    from hermit.channels.pairing import PairingStore
    from hermit.channels.username_pins import UsernamePins

    name = (channel or "").strip().lower()
    if name == WEBCHAT:
        return None
    account = account or DEFAULT_ACCOUNT
    acc = loaded.config.channels.accounts_of(name).get(account) if name in names() else None
    where = f"{name}/{account}"
    if acc is None:
        return Refused(f"{where}, an account that channels.{name}.accounts does not define", Rule.UNKNOWN_ACCOUNT)
    peer = (to or "").strip()
    kind = peer_kind_of(name, peer_kind, peer)
    store = PairingStore(loaded.paths.home)
    v = decide(loaded.config.channels, name, account, kind, peer, standing(store, UsernamePins(store), name, account))
    if v.let_in:
        return None
    return Refused({
        Rule.ACCOUNT_DISABLED: f"{name} {peer} ({where} is disabled: enabled is false)",
        Rule.GROUP_DISABLED: f"the {name} group {peer} (group_policy is disabled on {where})",
        Rule.GROUP_NOT_LISTED: f"the {name} group {peer} (not listed under channels.{name}.accounts.{account}.groups)",
        Rule.DM_DISABLED: f"{name} {peer} ({DM_OFF} on {where}: no DMs there, the owners' neither)",
        Rule.APPROVALS_UNREADABLE: f"{name} {peer} (on {where}: not an owner, not in allow_from, and the approved "
                                   "senders cannot be read)",
    }.get(v.rule, f"{name} {peer} (on {where}: not an owner, not in allow_from, not approved by pairing)"), v.rule)


def let_in_again(channel: str, account: str | None, kind: str, who: Refused) -> str:
    """What lets in again the target `not_let_in` said (`who`) is not let in: by the rule that refused it (until
    s18 by the words of the reason, which a peer id or account name could hold too)."""
    if kind == "group":
        return "list the group under groups"
    if who.rule == Rule.DM_DISABLED:
        return f"set channels.{channel}.accounts.{account or DEFAULT_ACCOUNT}.dm_policy to pairing or allowlist"
    if who.rule == Rule.ACCOUNT_DISABLED:
        return f"set channels.{channel}.accounts.{account or DEFAULT_ACCOUNT}.enabled to true"
    return "`hermit pairing approve` them (or list them under allow_from)"


def not_let_in_fix(job_id: str, kind: str, who: Refused, channel: str = "", account: str | None = None) -> str:
    """What to do about a job aimed at someone not let in (`who`, as not_let_in said it), for a JobError's hint
    and the warnings: under `dm_policy: disabled` approving them would change nothing."""
    again = let_in_again(channel, account, kind, who)
    return (f"{again} and the job delivers again; or re-aim it (`hermit cron edit {job_id} --announce "
            f"CHANNEL:ACCOUNT:PEER`), or remove it (`hermit cron remove {job_id}`)")


def _pinned(loaded: LoadedConfig, channel: str, acc: ChannelAccessConfig, to: str) -> str:
    """When `to` is the id an owner's @username is pinned to (channels/username_pins.py), how to deliver there:
    the name alone is never taken for the id here, as it can change hands."""
    from hermit.channels.pairing import PairingStore
    from hermit.channels.username_pins import UsernamePins

    names = [e for e in acc.owners if is_username(e)]
    if not names:
        return ""
    try:
        pins = UsernamePins(PairingStore(loaded.paths.home)).of(channel)
    except HermitError:
        return ""
    named = [n for n in names if n in pins and sender_key(channel, pins[n].sender_id) == sender_key(channel, to)]
    return (f" (it is the id the owner {named[0]} is pinned to: write {to} into those owners to deliver there)"
            if named else "")


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
