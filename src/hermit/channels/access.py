"""Access control: may this sender in this DM or group reach the agent, and is the sender an owner? Fails
closed (SPEC §14.12, §15, §18).

DMs, by the channel account's `dm_policy`:
  pairing (default)  owners + allow_from + approved senders; a stranger gets one pairing code an hour (at
                     most 3 pending per account), which also names their platform id, and the agent is
                     never called
  allowlist          owners + allow_from + approved senders; strangers get nothing, never a code
  open               everyone
  disabled           DMs are ignored, the owners' too
An owner (`owners`) is the only kind of DM sender routed like the owner (agent.routing); everyone else let
in is a contact with a session of their own. Groups, by `group_policy` — allowlist (default; only
`groups`; empty = none) | open | disabled — then `group_allow_from` (empty = every member; the owners
always count as members) and `require_mention` (default true; a platform mention, a reply to the bot or
one of the agent's mention patterns counts). Entries are matched as config/allowlist.py normalised them:
by id, or by @username where the platform has them (Telegram, Discord). A username can be freed and taken
by someone else, so the first sender seen presenting a listed @username is pinned to it
(channels/username_pins.py) and from then on the entry means that id only, whatever name it presents later (a
renamed owner is still the owner): another id presenting the name is a stranger, with a warning (once an hour
per name) that says to list the id. A channel or account missing from the config, or off, is refused. The web
chat is authenticated by the gateway token: always allowed, always the owner.

The rules are one pure decision, `decide` (config + the pairing files' state, `Standing` + the peer, and for
a message its sender and mention): no code is issued and no name pinned there. The gateway's `AccessControl`
takes the side effects the decision asks for (pin a first-seen name, then decide again; send a stranger a
pairing code); the scheduler (scheduler/targets.not_let_in) asks the same decision about a job's or heartbeat's
peer, with no message. Until s17 the scheduler kept its own copy of these rules, and the copies disagreed.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from hermit.channels.pairing import CODE_TTL_SECONDS, PairingRequest, PairingStore
from hermit.channels.username_pins import UsernamePins, handle
from hermit.config.allowlist import STAR, is_username, sender_key
from hermit.config.channels import platforms
from hermit.config.schema import ChannelAccessConfig, ChannelsConfig
from hermit.errors import HermitError
from hermit.refusals import RefusalLog

__all__ = ["PARENT_GROUP", "AccessControl", "AccessDecision", "Message", "PairingRequest", "PairingStore", "Rule",
           "Standing", "Verdict", "decide", "pairing_message", "standing"]

WEBCHAT = "webchat"
log = logging.getLogger(__name__)
# A sender presenting a pinned username with another id: one warning an hour per name (anyone can keep
# sending, and the log must keep its history), then a count.
IMPOSTORS = RefusalLog(log, limit=1, window=3600.0, summary="%d more messages from %s in the last %.0f s (only "
                       "the first %d is logged)")

# The one key of `InboundMessage.meta` the gateway reads: set on a group message from a group that is its
# own conversation but whose access and bindings are another group's (a Discord private thread: its own
# session, audience and room, since fewer people see it, while `groups` names its parent channel). The
# gateway checks `groups` against this id, never against the sub-group's own; a channel that cannot name
# the parent leaves it out, and the sub-group's own id, which no `groups` entry is meant to name, is checked.
PARENT_GROUP = "parent_group_id"


@dataclass(frozen=True)
class AccessDecision:
    """`reply`: text to send the sender (a pairing code message) or None; `reason` is for logs and tests."""

    allowed: bool
    reply: str | None
    reason: str


def pairing_message(req: PairingRequest) -> str:
    minutes = int(CODE_TTL_SECONDS // 60)
    settings = platforms().get(req.channel)
    id_name = settings.id_name if settings else f"{req.channel} id"  # how the platform names a sender's id
    shown_id = f"+{req.sender_id.lstrip('+')}" if req.channel == "whatsapp" else req.sender_id
    return (f"Hi! This assistant only talks to people its owner has approved.\n"
            f"Your {id_name}: {shown_id}\n"
            f"Your pairing code: {req.code} (valid {minutes} minutes).\n"
            f"Ask the owner to run: hermit pairing approve {req.channel} {req.code}")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error:
        return None  # validated at config load; a bad pattern from elsewhere simply never matches


def _mentions(text: str, patterns: Sequence[str]) -> bool:
    return any((rx := _compiled(p)) is not None and rx.search(text) for p in patterns)


@dataclass(frozen=True)
class Standing:
    """What the pairing files say now, read once for one decision: the account's approved senders as sender
    keys (None: the file cannot be read, so nobody is let in by an approval) and the channel's username pins,
    `@name` -> sender key (None: the pins cannot be read, so nobody matches by name)."""

    approved: frozenset[str] | None
    pins: Mapping[str, str] | None


def standing(store: PairingStore, pins: UsernamePins, channel: str, account_id: str) -> Standing:
    """The pairing store's state for `channel`/`account_id`, read without writing anything."""
    channel = channel.lower()
    try:
        approved: frozenset[str] | None = frozenset(sender_key(channel, s)
                                                    for s in store.approved_senders(channel, account_id))
    except (HermitError, OSError):
        approved = None
    return Standing(approved, pins_of(pins, channel))


def pins_of(pins: UsernamePins, channel: str) -> dict[str, str] | None:
    """The channel's pins as `@name` -> sender key; None when they cannot be read."""
    try:
        return {name: sender_key(channel, p.sender_id) for name, p in pins.of(channel).items()}
    except (HermitError, OSError):
        return None


@dataclass(frozen=True)
class Message:
    """What only an inbound message tells: who sent it, the @username they present, and whether it mentions
    the bot. A scheduled delivery has none of it: it asks about the peer (the DM's person, the group) alone."""

    sender_id: str
    sender_username: str | None = None
    text: str = ""
    mentioned: bool = False
    reply_to_bot: bool = False
    mention_patterns: Sequence[str] = ()


class Rule(StrEnum):
    """Which rule of `decide` decided (`Verdict.rule`): what a caller that words the decision its own way, or tells
    what would change it (scheduler/targets.let_in_again), goes by — never the reason's words."""

    WEBCHAT = "webchat"
    UNKNOWN_ACCOUNT = "unknown_account"
    ACCOUNT_DISABLED = "account_disabled"
    UNKNOWN_KIND = "unknown_kind"
    DM_DISABLED = "dm_disabled"
    OWNER = "owner"
    OPEN = "open"
    ALLOW_FROM = "allow_from"
    APPROVALS_UNREADABLE = "approvals_unreadable"
    APPROVED = "approved"
    NOT_ALLOWED = "not_allowed"
    STRANGER = "stranger"
    GROUP_DISABLED = "group_disabled"
    GROUP_NOT_LISTED = "group_not_listed"
    GROUP = "group"
    NOT_A_MEMBER = "not_a_member"
    MENTIONED = "mentioned"
    NOT_MENTIONED = "not_mentioned"


@dataclass(frozen=True)
class Verdict:
    """The one admission decision (`decide`), with no side effect taken. `rule` names the rule that decided
    (for callers that word it their own way: scheduler/targets.not_let_in), `reason` is the gateway's log line.
    `pin`: a listed @username seen first with this sender — the caller pins it and asks again (another process
    may pin it first). `impostor`: (name, pinned key) of a listed name this sender presents but another id holds.
    `may_pair`: a stranger under `dm_policy: pairing`, who may be sent a pairing code."""

    let_in: bool
    rule: Rule
    reason: str
    owner: bool = False
    pin: str | None = None
    impostor: tuple[str, str] | None = None
    pins_unreadable: bool = False
    may_pair: bool = False


@dataclass(frozen=True)
class _Match:
    found: bool = False
    pin: str | None = None
    impostor: tuple[str, str] | None = None
    pins_unreadable: bool = False


def listed_names(cfg: ChannelAccessConfig) -> frozenset[str]:
    """Every @username the account lists, in any of `owners`, `allow_from`, `group_allow_from`."""
    return frozenset(e for e in (*cfg.owners, *cfg.allow_from, *cfg.group_allow_from) if is_username(e))


def _match(entries: Sequence[str], key: str, presented: str | None, pins: Mapping[str, str] | None,
           listed: Collection[str]) -> _Match:
    """Whether a normalised list names the sender with `key`: by id; by an @username pinned to that id, whatever
    name they present now (the pin makes the entry mean that id: a renamed person still matches); or by the name
    they present when nobody holds it yet (found, and `pin` it). `listed`: every name the account lists, in any
    list (`listed_names`). `*` is the caller's to interpret."""
    names = [e for e in entries if is_username(e)]
    if any(e == key for e in entries if e != STAR and not is_username(e)):
        # Listed by id and presenting a name listed anywhere in the account that nobody holds yet: the name is
        # theirs, pin it now. Left unpinned (they matched by id, never by name — and a name in another list than
        # the one that matched was never read), it went to the next holder of the name once they gave it up.
        unpinned = presented is not None and presented in listed and pins is not None and presented not in pins
        return _Match(True, pin=presented if unpinned else None)
    if pins is not None and any(pins.get(e) == key for e in names):
        return _Match(True)
    if presented is None or presented not in names:
        return _Match()
    if pins is None:
        return _Match(pins_unreadable=True)
    holder = pins.get(presented)
    if holder is None:
        return _Match(True, pin=presented)  # first seen: the name means this id from now on
    return _Match(impostor=(presented, holder))


def decide(channels: ChannelsConfig, channel: str, account_id: str, peer_kind: str, peer_id: str, known: Standing,
           message: Message | None = None) -> Verdict:
    """May this peer talk to the assistant now: the DM's person (`peer_id`, or the message's sender), or the
    group `peer_id` (a sub-group's parent, PARENT_GROUP) — and, for a `message` in a group, its sender and
    mention. Pure: the config and `known` decide, nothing is written; the gateway's check (AccessControl) and the
    scheduler (targets.not_let_in) both ask it."""
    channel = channel.lower()
    if channel == WEBCHAT:
        return Verdict(True, Rule.WEBCHAT, "webchat: authenticated by the gateway token", owner=True)
    cfg = channels.accounts_of(channel).get(account_id)
    if cfg is None:
        return Verdict(False, Rule.UNKNOWN_ACCOUNT, f"unknown channel account {channel}/{account_id}")
    if not cfg.enabled:
        return Verdict(False, Rule.ACCOUNT_DISABLED, f"channel account {channel}/{account_id} is disabled")
    if peer_kind == "dm":
        return _dm(cfg, channel, message.sender_id if message else peer_id, message, known)
    if peer_kind == "group":
        return _group(cfg, channel, peer_id, message, known)
    return Verdict(False, Rule.UNKNOWN_KIND, f"unknown peer kind {peer_kind!r}")


def _dm(cfg: ChannelAccessConfig, channel: str, sender_id: str, message: Message | None, known: Standing) -> Verdict:
    policy = cfg.dm_policy
    if policy == "disabled":
        return Verdict(False, Rule.DM_DISABLED, "dm_policy disabled: DMs are ignored")
    key = sender_key(channel, sender_id)
    presented = handle(message.sender_username) if message else None
    names = listed_names(cfg)
    owner = _match(cfg.owners, key, presented, known.pins, names)
    if owner.found:
        return Verdict(True, Rule.OWNER, f"dm_policy {policy}: sender is an owner", owner=True, pin=owner.pin)
    listed = _match(cfg.allow_from, key, presented, known.pins, names) if policy != "open" else _Match()

    def verdict(let_in: bool, rule: Rule, reason: str, pin: str | None = None) -> Verdict:
        return Verdict(let_in, rule, reason, pin=pin, impostor=owner.impostor or listed.impostor,
                       pins_unreadable=owner.pins_unreadable or listed.pins_unreadable, may_pair=rule == Rule.STRANGER)

    if policy == "open":
        return verdict(True, Rule.OPEN, "dm_policy open: a contact")
    if listed.found:
        return verdict(True, Rule.ALLOW_FROM, f"dm_policy {policy}: sender in allow_from (a contact)", listed.pin)
    if known.approved is None:
        return verdict(False, Rule.APPROVALS_UNREADABLE, f"dm_policy {policy}: the approved senders cannot be read, so "
                       "nobody is let in by an approval")
    if key in known.approved:
        return verdict(True, Rule.APPROVED, f"dm_policy {policy}: sender approved by pairing (a contact)")
    if policy == "allowlist":
        # Silence: a stranger learns nothing, and in particular never gets a code (SPEC §14.12).
        return verdict(False, Rule.NOT_ALLOWED, "dm_policy allowlist: sender not allowed")
    return verdict(False, Rule.STRANGER, "dm_policy pairing: not approved")


def _group(cfg: ChannelAccessConfig, channel: str, group_id: str, message: Message | None, known: Standing
           ) -> Verdict:
    policy = cfg.group_policy
    if policy == "disabled":
        return Verdict(False, Rule.GROUP_DISABLED, "group_policy disabled: groups are ignored")
    if policy == "allowlist" and group_id not in cfg.groups:
        return Verdict(False, Rule.GROUP_NOT_LISTED, "group_policy allowlist: group not in groups")
    if message is None:  # the group as a whole (a delivery to it): its members are not asked
        return Verdict(True, Rule.GROUP, f"group_policy {policy}")
    members = cfg.group_allow_from  # empty or '*': every member of an allowed group
    presented, names = handle(message.sender_username), listed_names(cfg)
    # A name listed anywhere in the account (a contact's `@name` in allow_from) that nobody holds yet is pinned to
    # the member presenting it here, as in a DM, whether or not this group lets them talk: left unpinned (s20: a
    # group with an empty group_allow_from asked nobody's name), it went to whoever took the name after they gave
    # it up, and that newcomer's first DM matched it.
    sighted = presented if presented in names and known.pins is not None and presented not in known.pins else None
    member = _Match(True, pin=sighted)
    if members and STAR not in members:
        member = _match([*members, *cfg.owners], sender_key(channel, message.sender_id), presented, known.pins, names)
        if not member.found:
            return Verdict(False, Rule.NOT_A_MEMBER, "group_allow_from: sender not allowed in groups", pin=sighted,
                           impostor=member.impostor, pins_unreadable=member.pins_unreadable)
    if cfg.require_mention:
        if message.mentioned:
            return Verdict(True, Rule.MENTIONED, f"group_policy {policy}: mentioned", pin=member.pin)
        if message.reply_to_bot:
            return Verdict(True, Rule.MENTIONED, f"group_policy {policy}: reply to the bot", pin=member.pin)
        if _mentions(message.text, message.mention_patterns):
            return Verdict(True, Rule.MENTIONED, f"group_policy {policy}: mention pattern matched", pin=member.pin)
        return Verdict(False, Rule.NOT_MENTIONED, "require_mention: the bot was not mentioned", pin=member.pin)
    return Verdict(True, Rule.GROUP, f"group_policy {policy}", pin=member.pin)


class AccessControl:
    """The gateway's admission: `decide`, then its side effects — a listed @username seen first is pinned to its
    sender, a sender presenting a name pinned to another id is logged, and a stranger under `dm_policy: pairing`
    is issued a pairing code."""

    def __init__(self, channels: ChannelsConfig, store: PairingStore, clock: Callable[[], float] = time.time) -> None:
        self.channels = channels
        self.store = store
        self.clock = clock
        self.pins = UsernamePins(store)

    def account(self, channel: str, account_id: str) -> ChannelAccessConfig | None:
        return self.channels.accounts_of(channel.lower()).get(account_id)

    def is_owner(self, channel: str, account_id: str, sender_id: str, sender_username: str | None = None) -> bool:
        """Whether this DM sender is an owner of the channel account (the web chat always is), whatever the DM
        policy: routing asks it; admission (`check`) refuses everyone under `dm_policy: disabled`."""
        channel = channel.lower()
        if channel == WEBCHAT:
            return True
        cfg = self.account(channel, account_id)
        if cfg is None or not cfg.enabled:
            return False
        key, presented = sender_key(channel, sender_id), handle(sender_username)
        names = listed_names(cfg)
        m = _match(cfg.owners, key, presented, pins_of(self.pins, channel), names)
        if m.pin is not None and self._pinned(channel, account_id, m.pin, sender_id):
            m = _match(cfg.owners, key, presented, pins_of(self.pins, channel), names)
        elif m.pin is not None:
            m = _Match()
        self._said(channel, account_id, sender_id, m.impostor, m.pins_unreadable)
        return m.found

    def check(self, channel: str, account_id: str, peer_kind: str, peer_id: str, sender_id: str, *,
              text: str = "", mentioned: bool = False, reply_to_bot: bool = False,
              mention_patterns: Sequence[str] = (), sender_name: str | None = None,
              sender_username: str | None = None) -> AccessDecision:
        channel = channel.lower()
        msg = Message(sender_id, sender_username, text, mentioned, reply_to_bot, tuple(mention_patterns))
        v = self._decided(self.channels, channel, account_id, peer_kind, peer_id, msg)
        if not v.may_pair:
            return AccessDecision(v.let_in, None, v.reason)
        req = self.store.request(channel, account_id, sender_id, sender_name, sender_username)
        if req is None:
            return AccessDecision(False, None, "dm_policy pairing: a code was already issued this hour, the "
                                  "sender was denied, or 3 codes are pending for this account")
        return AccessDecision(False, pairing_message(req), f"dm_policy pairing: code {req.code} issued")

    def _decided(self, channels: ChannelsConfig, channel: str, account_id: str, peer_kind: str, peer_id: str,
                 msg: Message) -> Verdict:
        """`decide` with its pin taken: a first sighting pins the name, then the decision is asked again against
        the pin in force (another process may have pinned the name to someone else first). Pins that cannot be
        written match nobody by name, as pins that cannot be read."""
        if channel == WEBCHAT:
            return decide(channels, channel, account_id, peer_kind, peer_id, Standing(frozenset(), {}), msg)
        known = self._standing(channel, account_id)
        v = decide(channels, channel, account_id, peer_kind, peer_id, known, msg)
        if v.pin is not None:
            known = self._standing(channel, account_id) if self._pinned(channel, account_id, v.pin, msg.sender_id) \
                else Standing(known.approved, None)
            v = decide(channels, channel, account_id, peer_kind, peer_id, known, msg)
        self._said(channel, account_id, msg.sender_id, v.impostor, v.pins_unreadable)
        return v

    def _pinned(self, channel: str, account_id: str, name: str, sender_id: str) -> bool:
        """Pin `name` to `sender_id` (a no-op when someone holds it already); False when the pins cannot be written."""
        try:
            self.pins.pin(channel, name, sender_id, account_id)
        except (HermitError, OSError) as e:
            self._unreadable(channel, account_id, e)
            return False
        return True

    def _said(self, channel: str, account_id: str, sender_id: str, impostor: tuple[str, str] | None,
              unreadable: bool) -> None:
        if impostor is not None:
            self._impostor(channel, account_id, impostor[0], sender_id, impostor[1])
        if unreadable:
            self._unreadable(channel, account_id, None)

    def _standing(self, channel: str, account_id: str) -> Standing:
        return standing(self.store, self.pins, channel, account_id)

    def _unreadable(self, channel: str, account_id: str, e: BaseException | None) -> None:
        what = (e.message if isinstance(e, HermitError) else str(e)) if e is not None else \
            f"{self.pins.path} cannot be read"
        hint = e.hint if isinstance(e, HermitError) else "check the state dir's disk and owner"
        IMPOSTORS.warning(f"{channel} senders matched by username while the pins cannot be used",
                          "%s/%s: @username entries match nobody until this is fixed: %s (%s)", channel,
                          account_id, what, hint)

    def _impostor(self, channel: str, account_id: str, name: str, sender_id: str, pinned: str) -> None:
        where = f"channels.{channel}.accounts.{account_id}"
        IMPOSTORS.warning(
            f"{channel} senders presenting {name}, which is pinned to id {pinned}",
            "%s/%s: %s presents the username %s, which is pinned to %s (the first sender seen with it): %s is "
            "treated as a stranger, not as the %s listed in the config. If that username is really theirs now "
            "(a new account), list their id %s under %s.owners (or allow_from) and remove %s there",
            channel, account_id, sender_id, name, pinned, sender_id, name, sender_id, where, name)
