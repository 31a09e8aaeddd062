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
(channels/username_pins.py) and from then on the entry means that id only: another id presenting the name
is a stranger, with a warning (once an hour per name) that says to list the id. A channel or account
missing from the config is refused. The web chat is authenticated by the gateway token: always allowed,
always the owner.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hermit.channels.pairing import CODE_TTL_SECONDS, PairingRequest, PairingStore
from hermit.channels.username_pins import UsernamePins, handle
from hermit.config.allowlist import STAR, is_username, sender_key
from hermit.config.channels import platforms
from hermit.config.schema import ChannelAccessConfig, ChannelsConfig
from hermit.errors import HermitError
from hermit.refusals import RefusalLog

__all__ = ["PARENT_GROUP", "AccessControl", "AccessDecision", "PairingRequest", "PairingStore", "pairing_message"]

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


class AccessControl:
    def __init__(self, channels: ChannelsConfig, store: PairingStore, clock: Callable[[], float] = time.time) -> None:
        self.channels = channels
        self.store = store
        self.clock = clock
        self.pins = UsernamePins(store)

    def account(self, channel: str, account_id: str) -> ChannelAccessConfig | None:
        return self.channels.accounts_of(channel.lower()).get(account_id)

    def is_owner(self, channel: str, account_id: str, sender_id: str, sender_username: str | None = None) -> bool:
        """Whether this DM sender is an owner of the channel account (the web chat always is)."""
        channel = channel.lower()
        if channel == WEBCHAT:
            return True
        cfg = self.account(channel, account_id)
        if cfg is None or not cfg.enabled:
            return False
        return self._listed(channel, account_id, cfg.owners, sender_id, sender_username)

    def _listed(self, channel: str, account_id: str, entries: Sequence[str], sender_id: str,
                sender_username: str | None) -> bool:
        """Whether a normalised list names this sender: by id, or by the @username they present when it is
        pinned to their id (not pinned yet: they are the first seen with it, and it is pinned to them). `*` is
        the caller's to interpret."""
        key = sender_key(channel, sender_id)
        if any(e == key for e in entries if e != STAR and not is_username(e)):
            return True
        presented = handle(sender_username)
        if presented is None or presented not in entries:
            return False
        try:
            pin = self.pins.of(channel).get(presented)
            if pin is None:  # first seen: the name means this id from now on
                pin = self.pins.pin(channel, presented, sender_id, account_id)
            if sender_key(channel, pin.sender_id) == key:
                return True
            self._impostor(channel, account_id, presented, sender_id, pin.sender_id)
        except (HermitError, OSError) as e:  # pins that cannot be read or written: nobody matches by name
            IMPOSTORS.warning(f"{channel} senders matched by username while the pins cannot be used",
                              "%s/%s: @username entries match nobody until this is fixed: %s (%s)", channel,
                              account_id, e.message if isinstance(e, HermitError) else e,
                              e.hint if isinstance(e, HermitError) else "check the state dir's disk and owner")
        return False

    def _impostor(self, channel: str, account_id: str, name: str, sender_id: str, pinned: str) -> None:
        where = f"channels.{channel}.accounts.{account_id}"
        IMPOSTORS.warning(
            f"{channel} senders presenting {name}, which is pinned to id {pinned}",
            "%s/%s: %s presents the username %s, which is pinned to %s (the first sender seen with it): %s is "
            "treated as a stranger, not as the %s listed in the config. If that username is really theirs now "
            "(a new account), list their id %s under %s.owners (or allow_from) and remove %s there",
            channel, account_id, sender_id, name, pinned, sender_id, name, sender_id, where, name)

    def check(self, channel: str, account_id: str, peer_kind: str, peer_id: str, sender_id: str, *,
              text: str = "", mentioned: bool = False, reply_to_bot: bool = False,
              mention_patterns: Sequence[str] = (), sender_name: str | None = None,
              sender_username: str | None = None) -> AccessDecision:
        channel = channel.lower()
        if channel == WEBCHAT:
            return AccessDecision(True, None, "webchat: authenticated by the gateway token")
        cfg = self.account(channel, account_id)
        if cfg is None:
            return AccessDecision(False, None, f"unknown channel account {channel}/{account_id}")
        if not cfg.enabled:
            return AccessDecision(False, None, f"channel account {channel}/{account_id} is disabled")
        if peer_kind == "dm":
            return self._dm(cfg, channel, account_id, sender_id, sender_name, sender_username)
        if peer_kind == "group":
            return self._group(cfg, channel, account_id, peer_id, sender_id, sender_username, text, mentioned,
                               reply_to_bot, mention_patterns)
        return AccessDecision(False, None, f"unknown peer kind {peer_kind!r}")

    def _approved(self, channel: str, account_id: str, sender_id: str) -> bool:
        key = sender_key(channel, sender_id)
        return any(sender_key(channel, s) == key for s in self.store.approved_senders(channel, account_id))

    def _dm(self, cfg: ChannelAccessConfig, channel: str, account_id: str, sender_id: str,
            sender_name: str | None, sender_username: str | None) -> AccessDecision:
        policy = cfg.dm_policy
        if policy == "disabled":
            return AccessDecision(False, None, "dm_policy disabled: DMs are ignored")
        if self._listed(channel, account_id, cfg.owners, sender_id, sender_username):
            return AccessDecision(True, None, f"dm_policy {policy}: sender is an owner")
        if policy == "open":
            return AccessDecision(True, None, "dm_policy open: a contact")
        if self._listed(channel, account_id, cfg.allow_from, sender_id, sender_username):
            return AccessDecision(True, None, f"dm_policy {policy}: sender in allow_from (a contact)")
        if self._approved(channel, account_id, sender_id):
            return AccessDecision(True, None, f"dm_policy {policy}: sender approved by pairing (a contact)")
        if policy == "allowlist":
            # Silence: a stranger learns nothing, and in particular never gets a code (SPEC §14.12).
            return AccessDecision(False, None, "dm_policy allowlist: sender not allowed")
        req = self.store.request(channel, account_id, sender_id, sender_name, sender_username)
        if req is None:
            return AccessDecision(False, None, "dm_policy pairing: a code was already issued this hour, the "
                                  "sender was denied, or 3 codes are pending for this account")
        return AccessDecision(False, pairing_message(req), f"dm_policy pairing: code {req.code} issued")

    def _group(self, cfg: ChannelAccessConfig, channel: str, account_id: str, group_id: str, sender_id: str,
               sender_username: str | None, text: str, mentioned: bool, reply_to_bot: bool,
               mention_patterns: Sequence[str]) -> AccessDecision:
        policy = cfg.group_policy
        if policy == "disabled":
            return AccessDecision(False, None, "group_policy disabled: groups are ignored")
        if policy == "allowlist" and group_id not in cfg.groups:
            return AccessDecision(False, None, "group_policy allowlist: group not in groups")
        members = cfg.group_allow_from  # empty or '*': every member of an allowed group
        if members and STAR not in members and not self._listed(channel, account_id, [*members, *cfg.owners],
                                                                sender_id, sender_username):
            return AccessDecision(False, None, "group_allow_from: sender not allowed in groups")
        if cfg.require_mention:
            if mentioned:
                return AccessDecision(True, None, f"group_policy {policy}: mentioned")
            if reply_to_bot:
                return AccessDecision(True, None, f"group_policy {policy}: reply to the bot")
            if _mentions(text, mention_patterns):
                return AccessDecision(True, None, f"group_policy {policy}: mention pattern matched")
            return AccessDecision(False, None, "require_mention: the bot was not mentioned")
        return AccessDecision(True, None, f"group_policy {policy}")
