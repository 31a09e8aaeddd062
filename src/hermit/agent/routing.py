"""Routing: which agent and which session answer a message from (channel, account, peer, guild/team, sender).

Bindings (SPEC §15) are `{match: {channel, account_id?, peer?: {kind, id}, guild_id?, team_id?},
agent_id}`. A binding matches when every field it sets is equal (`account_id: "*"` matches any account
and ranks like a channel-wide binding); among matching bindings the tier decides — exact peer >
guild/team > account > channel — then the number of fields set, then config order. No match: the
default agent. A binding naming an unknown agent is refused when the router is built, so a typo fails
at startup instead of silently routing strangers to the default agent. A peer id is compared in the
form config/allowlist.py gives `owners` entries (`+1 555…` is WhatsApp's `1555…`, a Slack id is upper
case), on the binding's side and the message's: a contact matched by a binding written the way Hermit's
own pairing reply shows their id must never fall through to the default agent and its notes. A Slack
`team_id` (upper case) and a Discord `guild_id` (digits) are compared normalised the same way, for the same
reason: `team_id: t0123` used to send the whole workspace to the default agent.

Session keys (SPEC §15, §18). Only `agent:<id>:main` is the main session (MEMORY.md, no sandbox), and
only the owner reaches it: the web chat (authenticated by the gateway token) and a DM whose sender the
channel account lists under `owners` (`RouteInput.sender_is_owner`, decided by channels.access). The
agent's `session.dm_scope` groups the owners' DMs; a thread or topic inside an owner's DM stays in the
owner's session. Every other DM is a contact's and gets a non-main session whatever `dm_scope` says:
under `main`, the per-account-channel-peer key, so two contacts (or one contact on two bot accounts)
never share one. Groups get a group key. On Slack, whose member and channel ids name someone only within a
workspace, a contact's and a group's key carry the workspace too (`session_peer`: `U0123@T0001`), so two
workspaces' `U0123` never share a session, a room or a memory audience.
`session.dangerously_share_main_session_with_contacts`
restores the original's behaviour (contacts in the main session) for a config that wants it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hermit.config.allowlist import (
    TEAM_HINT,
    AllowlistEntryError,
    normalize_guild_id,
    normalize_peer,
    normalize_team_id,
    team_id_problem,
)
from hermit.config.channels import platforms
from hermit.config.load import LoadedConfig
from hermit.config.schema import BindingConfig, ChannelsConfig, DmScope
from hermit.errors import ConfigError
from hermit.sessions.keys import dm_session_key, group_session_key, is_main_session_key, main_session_key

MatchedBy = Literal["peer", "guild", "team", "account", "channel", "default"]

WEBCHAT = "webchat"
ANY_ACCOUNT = "*"
_TIER_RANK: dict[MatchedBy, int] = {"peer": 4, "guild": 3, "team": 3, "account": 2, "channel": 1, "default": 0}


@dataclass(frozen=True)
class RouteInput:
    """Where a message came from, as far as routing cares (`peer_id` is the sender in a DM, the chat in a group)."""

    channel: str
    account_id: str
    peer_kind: Literal["dm", "group"]
    peer_id: str
    thread_id: str | None = None
    topic_id: str | None = None
    guild_id: str | None = None
    team_id: str | None = None
    # The sender is one of the account's owners (or this is the web chat). False fails closed: a caller
    # that does not know gets a contact's session, never the main one.
    sender_is_owner: bool = False


@dataclass(frozen=True)
class Route:
    agent_id: str
    session_key: str
    main: bool
    matched_by: MatchedBy


def _tier(b: BindingConfig) -> MatchedBy:
    m = b.match
    if m.peer is not None:
        return "peer"
    if m.guild_id is not None:
        return "guild"
    if m.team_id is not None:
        return "team"
    if _account(b) is not None:
        return "account"
    return "channel"


def _account(b: BindingConfig) -> str | None:
    """The account a binding names; `*` (any account) names none."""
    return None if b.match.account_id in (None, ANY_ACCOUNT) else b.match.account_id


def _fields_set(b: BindingConfig) -> int:
    m = b.match
    return 1 + sum(v is not None for v in (_account(b), m.peer, m.guild_id, m.team_id))


def _peer_id(channel: str, kind: str, peer_id: str) -> str:
    """A peer id in the one form bindings and messages are compared in; one that no message of the
    platform can carry stays as written (it never matches, and binding_problems names it)."""
    try:
        return normalize_peer(channel, kind, peer_id)
    except AllowlistEntryError:
        return peer_id


def _scope_id(value: str | None, normalize: Callable[[str], str]) -> str | None:
    """A guild or team id in the one form bindings and messages are compared in (config load normalises a
    binding's already; a message's, or a binding built in code, is normalised here the same way)."""
    if value is None:
        return None
    try:
        return normalize(value)
    except AllowlistEntryError:
        return value.strip()


def _canonical(b: BindingConfig) -> BindingConfig:
    """The binding with its peer id normalised for its channel, and its guild and team ids."""
    m = b.match
    update: dict[str, object] = {"guild_id": _scope_id(m.guild_id, normalize_guild_id),
                                 "team_id": _scope_id(m.team_id, normalize_team_id)}
    if m.peer is not None:
        update["peer"] = m.peer.model_copy(update={"id": _peer_id(m.channel, m.peer.kind, m.peer.id)})
    return b.model_copy(update={"match": m.model_copy(update=update)})


def _matches(b: BindingConfig, inp: RouteInput, peer_id: str) -> bool:
    """`b` (canonical) matches `inp`, whose peer id is `peer_id` normalised the same way."""
    m = b.match
    if m.channel != inp.channel.lower():
        return False
    account = _account(b)
    if account is not None and account != inp.account_id:
        return False
    if m.peer is not None and (m.peer.kind != inp.peer_kind or m.peer.id != peer_id):
        return False
    if m.guild_id is not None and m.guild_id != _scope_id(inp.guild_id, normalize_guild_id):
        return False
    return m.team_id is None or m.team_id == _scope_id(inp.team_id, normalize_team_id)


def session_peer(inp: RouteInput) -> str:
    """The peer id a group's or a contact's session key carries. A Slack member or channel id names someone
    only within one workspace (two workspaces may each have a `U0123` and a `C0123`), and a session key's
    peer is also who shares its transcript, its room and its memory audience (memory/policy/audience.py): on
    such a platform (`team_local_ids`) it carries the workspace the message came from, `U0123@T0001` — the
    form channels/slack.py already gives a member of another workspace, which stays as it is. An Enterprise
    Grid `W…` member id is global and stays bare. Without a team (a caller asking only which agent answers)
    the account stands in for it: never a form another workspace's message can have."""
    peer, settings = inp.peer_id, platforms().get(inp.channel.lower())
    if settings is None or not settings.team_local_ids or "@" in peer or (inp.peer_kind == "dm" and peer[:1] == "W"):
        return peer
    team = (inp.team_id or "").strip().upper()
    return f"{peer}@{team}" if team else f"{peer}@account.{inp.account_id}"


def session_key_for(agent_id: str, dm_scope: DmScope, inp: RouteInput, *,
                    share_main_with_contacts: bool = False) -> str:
    """The session key of a message routed to `agent_id` (SPEC §15 shapes, §18 owners). An owner's DM keys
    carry their id as `owners` lists it (dm_scope groups the owner's DMs across accounts by design); a
    contact's and a group's carry `session_peer`."""
    channel = inp.channel.lower()
    if inp.peer_kind == "group":
        return group_session_key(agent_id, channel, session_peer(inp), inp.thread_id, topic_id=inp.topic_id)
    if channel == WEBCHAT:
        return main_session_key(agent_id)
    if dm_scope == "main":
        # The owner's DMs are one conversation: a thread inside them stays in the main session rather than
        # becoming a non-main session that would lose MEMORY.md and gain the sandbox.
        if inp.sender_is_owner or share_main_with_contacts:
            return main_session_key(agent_id)
        # A contact: their own session, one per account and sender, whatever they are called elsewhere.
        dm_scope = "per-account-channel-peer"
    if not inp.sender_is_owner:
        inp = dataclasses.replace(inp, peer_id=session_peer(inp))
    if dm_scope == "per-peer" and not inp.sender_is_owner:
        # One session per person across channels is for the owner, whose ids the config names. A contact's
        # id means nothing outside its platform (a Telegram user id can be someone's WhatsApp number), so
        # theirs is kept per channel: a shared key would hand them the owner's DM session and notes.
        dm_scope = "per-channel-peer"
    if dm_scope == "per-peer":
        return dm_session_key(agent_id, None, inp.peer_id, inp.thread_id, topic_id=inp.topic_id)
    if dm_scope == "per-channel-peer":
        return dm_session_key(agent_id, channel, inp.peer_id, inp.thread_id, topic_id=inp.topic_id)
    return dm_session_key(agent_id, channel, inp.peer_id, inp.thread_id, account_id=inp.account_id,
                          topic_id=inp.topic_id)


class Router:
    def __init__(self, bindings: Sequence[BindingConfig], dm_scopes: Mapping[str, DmScope],
                 default_agent: str, shared_main: Collection[str] = ()) -> None:
        ids = list(dm_scopes)
        for i, b in enumerate(bindings):
            if b.agent_id not in dm_scopes:
                close = difflib.get_close_matches(b.agent_id, ids, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise ConfigError(
                    f"bindings[{i}] routes to unknown agent {b.agent_id!r} (agents: {', '.join(ids)})",
                    f"{hint}add the agent under agents.list or fix the binding's agent_id")
        if default_agent not in dm_scopes:
            raise ConfigError(f"default agent {default_agent!r} is not configured", "check agents.list")
        self.bindings = tuple(_canonical(b) for b in bindings)
        self.dm_scopes = dict(dm_scopes)
        self.default_agent = default_agent
        # Agents whose config keeps the original's "contacts share the main session" on purpose.
        self.shared_main = frozenset(shared_main)

    @classmethod
    def from_config(cls, loaded: LoadedConfig) -> Router:
        return cls(loaded.config.bindings, {a.id: a.settings.session.dm_scope for a in loaded.agents},
                   loaded.agent().id,
                   [a.id for a in loaded.agents if a.settings.session.dangerously_share_main_session_with_contacts])

    def binding_for(self, inp: RouteInput) -> BindingConfig | None:
        """The winning binding, or None when the default agent answers."""
        best: BindingConfig | None = None
        peer_id = _peer_id(inp.channel.lower(), inp.peer_kind, inp.peer_id)
        for b in self.bindings:
            if not _matches(b, inp, peer_id):
                continue
            if best is None or (_TIER_RANK[_tier(b)], _fields_set(b)) > (_TIER_RANK[_tier(best)], _fields_set(best)):
                best = b
        return best

    def resolve(self, inp: RouteInput) -> Route:
        best = self.binding_for(inp)
        agent_id = best.agent_id if best is not None else self.default_agent
        matched_by: MatchedBy = _tier(best) if best is not None else "default"
        key = session_key_for(agent_id, self.dm_scopes[agent_id], inp,
                              share_main_with_contacts=agent_id in self.shared_main)
        return Route(agent_id=agent_id, session_key=key, main=is_main_session_key(key), matched_by=matched_by)


def _with_scope(scope: str) -> list[str]:
    """The platforms whose groups belong to a guild (Discord) or a team (Slack): where a binding's
    guild_id or team_id can ever match."""
    return [name for name, settings in platforms().items() if settings.group_scope == scope]


def _scope_id_problems(where: str, b: BindingConfig) -> list[str]:
    """A team_id or guild_id no message carries (config load normalises both and refuses a guild_id that is
    not digits; a team_id is only upper-cased there, so a name or a URL reaches this check)."""
    m = b.match
    out: list[str] = []
    if m.team_id is not None:
        why = team_id_problem(normalize_team_id(m.team_id))
        if why:
            out.append(f"{where} matches team_id {m.team_id!r}, which no Slack event carries: {why}; {TEAM_HINT}")
    if m.guild_id is not None:
        try:
            normalize_guild_id(m.guild_id)
        except AllowlistEntryError as e:
            out.append(f"{where} matches guild_id {m.guild_id!r}, which no Discord message carries: {e.message}; "
                       f"{e.hint}")
    return out


def binding_problems(bindings: Sequence[BindingConfig], agent_ids: Sequence[str],
                     channels: ChannelsConfig) -> list[str]:
    """Bindings that can never take effect: unknown agent or channel, impossible or shadowed matches, a
    peer id no message of the channel can carry."""
    known_channels = list(ChannelsConfig.model_fields)
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, b in enumerate(bindings):
        m = b.match
        where = f"bindings[{i}]"
        if b.agent_id not in agent_ids:
            close = difflib.get_close_matches(b.agent_id, list(agent_ids), n=1)
            problems.append(f"{where} routes to unknown agent {b.agent_id!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
        if m.channel not in known_channels:
            close = difflib.get_close_matches(m.channel, known_channels, n=1)
            problems.append(f"{where} matches unknown channel {m.channel!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; channels: {', '.join(known_channels)}")
            continue
        if m.guild_id is not None and m.team_id is not None:
            problems.append(f"{where} sets both guild_id (Discord) and team_id (Slack): it can never match")
        elif m.guild_id is not None and m.channel not in _with_scope("guild"):
            problems.append(f"{where} sets guild_id on channel {m.channel!r}: only "
                            f"{' and '.join(_with_scope('guild'))} has guilds")
        elif m.team_id is not None and m.channel not in _with_scope("team"):
            problems.append(f"{where} sets team_id on channel {m.channel!r}: only "
                            f"{' and '.join(_with_scope('team'))} has teams")
        problems += _scope_id_problems(where, b)
        accounts = channels.accounts_of(m.channel) if m.channel in platforms() else None
        if _account(b) is not None and accounts is not None and m.account_id not in accounts:
            problems.append(f"{where} matches account {m.account_id!r}, which channels.{m.channel}.accounts "
                            f"does not define ({', '.join(accounts) or 'none defined'})")
        if m.channel == WEBCHAT and m.peer is not None and m.peer.kind == "group":
            problems.append(f"{where} matches a webchat group, but the web chat has no groups")
        if m.peer is not None and m.channel in platforms():
            try:
                normalize_peer(m.channel, m.peer.kind, m.peer.id)
            except AllowlistEntryError as e:
                problems.append(f"{where} matches {m.channel} {m.peer.kind} {m.peer.id!r}, which no message "
                                f"carries: {e.message}; {e.hint}")
        # `account_id: "*"` and no account_id match the same messages; so do two ways of writing one peer id.
        sig = _canonical(b).match.model_copy(update={"account_id": _account(b)}).model_dump_json()
        if sig in seen:
            problems.append(f"{where} has the same match as bindings[{seen[sig]}], which wins: it never applies")
        else:
            seen[sig] = i
    return problems
