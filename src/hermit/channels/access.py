"""Access control: may this sender in this DM or group reach the agent? Fails closed (SPEC §14.12, §15).

DMs, by the channel account's `dm_policy`:
  pairing (default)  allow_from + approved senders; a stranger gets one pairing code an hour (at most 3
                     pending per account) and the agent is never called
  allowlist          allow_from + approved senders; strangers get nothing, never a code
  open               everyone
  disabled           DMs are ignored
Groups, by `group_policy` — allowlist (default; only `groups`; empty = none) | open | disabled — then
`group_allow_from` (empty = every member) and `require_mention` (default true; a platform mention, a
reply to the bot or one of the agent's mention patterns counts). A channel or account missing from the
config is refused. The web chat is authenticated by the gateway token, so it is always allowed.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hermit.channels.pairing import CODE_TTL_SECONDS, PairingRequest, PairingStore
from hermit.config.schema import ChannelAccessConfig, ChannelsConfig

__all__ = ["AccessControl", "AccessDecision", "PairingRequest", "PairingStore", "pairing_message"]

WEBCHAT = "webchat"


@dataclass(frozen=True)
class AccessDecision:
    """`reply`: text to send the sender (a pairing code message) or None; `reason` is for logs and tests."""

    allowed: bool
    reply: str | None
    reason: str


def pairing_message(req: PairingRequest) -> str:
    minutes = int(CODE_TTL_SECONDS // 60)
    return (f"Hi! This assistant only talks to people its owner has approved.\n"
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

    def account(self, channel: str, account_id: str) -> ChannelAccessConfig | None:
        platform = getattr(self.channels, channel.lower(), None)
        accounts = getattr(platform, "accounts", None)
        if not isinstance(accounts, dict):
            return None
        cfg = accounts.get(account_id)
        return cfg if isinstance(cfg, ChannelAccessConfig) else None

    def check(self, channel: str, account_id: str, peer_kind: str, peer_id: str, sender_id: str, *,
              text: str = "", mentioned: bool = False, reply_to_bot: bool = False,
              mention_patterns: Sequence[str] = (), sender_name: str | None = None) -> AccessDecision:
        channel = channel.lower()
        if channel == WEBCHAT:
            return AccessDecision(True, None, "webchat: authenticated by the gateway token")
        cfg = self.account(channel, account_id)
        if cfg is None:
            return AccessDecision(False, None, f"unknown channel account {channel}/{account_id}")
        if not cfg.enabled:
            return AccessDecision(False, None, f"channel account {channel}/{account_id} is disabled")
        if peer_kind == "dm":
            return self._dm(cfg, channel, account_id, sender_id, sender_name)
        if peer_kind == "group":
            return self._group(cfg, peer_id, sender_id, text, mentioned, reply_to_bot, mention_patterns)
        return AccessDecision(False, None, f"unknown peer kind {peer_kind!r}")

    def _dm(self, cfg: ChannelAccessConfig, channel: str, account_id: str, sender_id: str,
            sender_name: str | None) -> AccessDecision:
        policy = cfg.dm_policy
        if policy == "disabled":
            return AccessDecision(False, None, "dm_policy disabled: DMs are ignored")
        if policy == "open":
            return AccessDecision(True, None, "dm_policy open")
        if sender_id in cfg.allow_from:
            return AccessDecision(True, None, f"dm_policy {policy}: sender in allow_from")
        if sender_id in self.store.approved_senders(channel, account_id):
            return AccessDecision(True, None, f"dm_policy {policy}: sender approved by pairing")
        if policy == "allowlist":
            # Silence: a stranger learns nothing, and in particular never gets a code (SPEC §14.12).
            return AccessDecision(False, None, "dm_policy allowlist: sender not allowed")
        req = self.store.request(channel, account_id, sender_id, sender_name)
        if req is None:
            return AccessDecision(False, None, "dm_policy pairing: a code was already issued this hour "
                                  "or 3 codes are pending for this account")
        return AccessDecision(False, pairing_message(req), f"dm_policy pairing: code {req.code} issued")

    def _group(self, cfg: ChannelAccessConfig, group_id: str, sender_id: str, text: str, mentioned: bool,
               reply_to_bot: bool, mention_patterns: Sequence[str]) -> AccessDecision:
        policy = cfg.group_policy
        if policy == "disabled":
            return AccessDecision(False, None, "group_policy disabled: groups are ignored")
        if policy == "allowlist" and group_id not in cfg.groups:
            return AccessDecision(False, None, "group_policy allowlist: group not in groups")
        members = cfg.group_allow_from  # empty or '*': every member of an allowed group
        if members and "*" not in members and sender_id not in members:
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
