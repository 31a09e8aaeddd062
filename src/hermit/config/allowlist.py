"""Sender allowlist entries (`owners`, `allow_from`, `group_allow_from`): normalise what people write, match senders.

People paste ids from logs, profiles and other tools, so an entry is normalised once, at config load:
surrounding spaces go; a channel prefix in any case is dropped (`telegram:`/`tg:`, `discord:`, `slack:`,
`whatsapp:`/`wa:`); a Discord or Slack mention (`<@123>`) becomes the id; Telegram and Discord
`@username` entries are kept lowercased and match the sender's username case-insensitively; WhatsApp
numbers lose `+`, spaces, dashes, dots and parentheses, as the platform's sender ids have none. An
entry that can never match a sender (another platform's prefix, a Telegram name without `@`, letters in
a phone number, a group id among users — only `group_allow_from` may name a Telegram chat: `normalize_members`)
is an `AllowlistEntryError` with a hint: a silent lock-out of the owner, or a silent let-in of nobody, is worse than a refused config. `*` is kept as it is; whether
it is allowed is decided by the list's own rule (schema.py). A binding's `peer.id` is written by the same
rules (a group's id by its platform's own), so routing compares ids in one form whatever was pasted, and
so are a binding's Slack `team_id` (upper case) and Discord `guild_id` (digits, else a config error).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

STAR = "*"
_PREFIX_RE = re.compile(r"^([A-Za-z]+)\s*:\s*(.*)$", re.S)
# Telegram usernames: 5-32 letters, digits or '_', starting with a letter (a few old ones are 4 long).
_TG_USERNAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,31}")
# Discord's unique usernames (since 2023): 2-32 lowercase letters, digits, '_' or '.'.
_DISCORD_USERNAME = re.compile(r"[A-Za-z0-9_.]{2,32}")
_MENTION = re.compile(r"^<@!?([A-Za-z0-9]+)(?:\|[^>]*)?>$")
_PHONE_NOISE = re.compile(r"[\s\-.()]")


class AllowlistEntryError(ValueError):
    """An entry that can never match a sender; `hint` says how to write it."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def normalize_entry(platform: str, raw: str) -> str:
    """The canonical form of one entry for `platform`, or AllowlistEntryError."""
    text = raw.strip()
    if not text:
        raise AllowlistEntryError("an empty entry matches nobody", "remove it, or put a sender id there")
    if text == STAR:
        return STAR
    rules = SENDER_IDS.get(platform)
    text = _unprefixed(platform, raw, text)
    return rules.normalize(raw, text) if rules else text  # a platform without rules: compared as written


def _unprefixed(platform: str, raw: str, text: str) -> str:
    """`text` without a prefix naming `platform` (`tg:42` → `42`); another platform's prefix is an error."""
    rules = SENDER_IDS.get(platform)
    m = _PREFIX_RE.match(text)
    owner = _PREFIX_OWNER.get(m.group(1).lower()) if m else None
    if m and owner is not None:
        hint = rules.hint if rules else "drop the prefix"
        if owner != platform:
            raise AllowlistEntryError(
                f"{raw!r} has a {m.group(1)}: prefix, which names {owner}, on a {platform} account",
                f"put it under channels.{owner}.accounts, or drop the prefix and {hint}")
        text = m.group(2).strip()
        if not text:
            raise AllowlistEntryError(f"{raw!r} is a prefix without an id", hint)
    return text


_TELEGRAM_HINT = "use the numeric user id (the pairing reply tells a sender theirs) or @username"
_DISCORD_HINT = "use the numeric user id (Developer Mode → right-click the user → Copy User ID) or @username"
_SLACK_HINT = "use the member id, like U012AB3CD (profile → ⋮ → Copy member ID)"
_WHATSAPP_HINT = "use the phone number with its country code, like +15551234567"


def _telegram(raw: str, text: str) -> str:
    if text.isdigit():
        return text
    if re.fullmatch(r"-\d+", text):
        raise AllowlistEntryError(f"{raw!r} is a group or channel id, not a user: no sender has it",
                                  "list group ids under `groups`; senders here are users: " + _TELEGRAM_HINT)
    if text.startswith("@"):
        if _TG_USERNAME.fullmatch(text[1:]):
            return text.lower()
        raise AllowlistEntryError(f"{raw!r} is not a Telegram username (5-32 letters, digits or _)",
                                  _TELEGRAM_HINT)
    if _TG_USERNAME.fullmatch(text):
        raise AllowlistEntryError(f"{raw!r} is neither a numeric Telegram user id nor an @username",
                                  f"write '@{text}' for the username, or the numeric user id")
    raise AllowlistEntryError(f"{raw!r} is neither a numeric Telegram user id nor an @username",
                              _TELEGRAM_HINT)


def _discord(raw: str, text: str) -> str:
    m = _MENTION.match(text)
    if m and m.group(1).isdigit():
        return m.group(1)
    if text.isdigit():
        return text
    if text.startswith("@") and _DISCORD_USERNAME.fullmatch(text[1:]):
        return text.lower()
    if re.fullmatch(r".+#\d{4}", text):
        raise AllowlistEntryError(f"{raw!r} is an old Discord tag, which is not unique and is never matched",
                                  _DISCORD_HINT)
    hint = f"write '@{text.lower()}' for the username, or the numeric user id" \
        if _DISCORD_USERNAME.fullmatch(text) else _DISCORD_HINT
    raise AllowlistEntryError(f"{raw!r} is neither a numeric Discord user id nor an @username", hint)


def _slack(raw: str, text: str) -> str:
    m = _MENTION.match(text)
    if m:
        text = m.group(1)
    if text.startswith(("@", "#")):
        raise AllowlistEntryError(f"{raw!r}: Slack messages carry member ids, never names or handles",
                                  _SLACK_HINT)
    # `U…@T…`: a member of another workspace (Slack Connect), as channels/slack.py names them and the pairing
    # reply tells them; a bare id is a member of the account's own workspace.
    if re.fullmatch(r"[A-Za-z0-9]+(?:@[A-Za-z0-9]+)?", text):
        return text.upper()  # Slack ids are upper case; a lower-cased paste still means the same member
    raise AllowlistEntryError(f"{raw!r} is not a Slack member id", _SLACK_HINT)


def _whatsapp(raw: str, text: str) -> str:
    text = text.removesuffix("@s.whatsapp.net")
    digits = _PHONE_NOISE.sub("", text).removeprefix("+")
    if digits.isdigit() and len(digits) <= 15:  # E.164: at most 15 digits
        return digits
    if re.search(r"[A-Za-z]", text):
        raise AllowlistEntryError(f"{raw!r} has letters: WhatsApp senders are phone numbers",
                                  _WHATSAPP_HINT)
    raise AllowlistEntryError(f"{raw!r} is not a phone number (digits, at most 15, with an optional +)",
                              _WHATSAPP_HINT)


def _whatsapp_key(sender_id: str) -> str:
    return _PHONE_NOISE.sub("", sender_id).removeprefix("+")


# A group's id in a binding's `peer` (the chat a group message names): (as written, without prefix) -> id.
def _telegram_group(raw: str, text: str) -> str:
    if re.fullmatch(r"-\d+", text):
        return text
    raise AllowlistEntryError(f"{raw!r} is not a Telegram group id (groups have negative ids)",
                              "use the group's chat id, like -1001234567890")


def _discord_group(raw: str, text: str) -> str:
    m = re.fullmatch(r"<#(\d+)>", text)
    if m or text.isdigit():
        return m.group(1) if m else text
    raise AllowlistEntryError(f"{raw!r} is not a Discord channel id",
                              "use the channel id (Developer Mode → right-click the channel → Copy Channel ID)")


def _slack_group(raw: str, text: str) -> str:
    m = re.fullmatch(r"<#([A-Za-z0-9]+)(?:\|[^>]*)?>", text)
    if m:
        text = m.group(1)
    if re.fullmatch(r"[A-Za-z0-9]+", text):
        return text.upper()  # like member ids: upper case, whatever was pasted
    raise AllowlistEntryError(f"{raw!r} is not a Slack channel id: messages carry ids, never #names",
                              "use the channel id, like C0123456789 (channel details → About, at the bottom)")


def _whatsapp_group(raw: str, text: str) -> str:
    raise AllowlistEntryError(f"{raw!r}: WhatsApp messages reach Hermit as DMs only, never from a group",
                              "match the sender as {kind: dm, id: <phone number>}")


@dataclass(frozen=True)
class SenderIds:
    """How one platform's sender ids are written: the prefixes that name it, how to write an id (the hint of
    every refusal), the entry normaliser, how a sender id from a message compares to entries, and how a
    group's id is written in a binding."""

    prefixes: tuple[str, ...]
    hint: str
    normalize: Callable[[str, str], str]  # (entry as written, entry without prefix) -> canonical entry
    group: Callable[[str, str], str]  # the same for a binding's group peer id
    key: Callable[[str], str] = str  # a message's sender id as entries are written


# One line per chat platform (its settings class is in config/channels.py, its adapter in hermit.channels).
SENDER_IDS: dict[str, SenderIds] = {
    "telegram": SenderIds(("telegram", "tg"), _TELEGRAM_HINT, _telegram, _telegram_group),
    "discord": SenderIds(("discord",), _DISCORD_HINT, _discord, _discord_group),
    "slack": SenderIds(("slack",), _SLACK_HINT, _slack, _slack_group),
    "whatsapp": SenderIds(("whatsapp", "wa"), _WHATSAPP_HINT, _whatsapp, _whatsapp_group, _whatsapp_key),
}
# Which prefixes name which platform; any of them on another platform's account is a mistake.
_PREFIX_OWNER = {p: platform for platform, ids in SENDER_IDS.items() for p in ids.prefixes}


def normalize_entries(platform: str, entries: Iterable[str]) -> list[str]:
    """Every entry normalised, duplicates dropped (first one kept); AllowlistEntryError names the bad one."""
    out: list[str] = []
    for i, raw in enumerate(entries):
        try:
            entry = normalize_entry(platform, raw)
        except AllowlistEntryError as e:
            raise AllowlistEntryError(f"entry {i}: {e.message}", e.hint) from None
        if entry not in out:
            out.append(entry)
    return out


_TG_CHAT = re.compile(r"(?:(?:telegram|tg)\s*:\s*)?(-\d+)", re.I)


def normalize_members(platform: str, entries: Iterable[str]) -> list[str]:
    """`group_allow_from`: as `normalize_entries`, and on Telegram a chat's id too (`-100…`): a linked channel's
    posts reach its discussion group as that chat (channels/telegram.py), a member only where it is listed here. Never
    in `owners` or `allow_from`: a chat writes no DM and is nobody's owner."""
    out: list[str] = []
    for i, raw in enumerate(entries):
        chat = _TG_CHAT.fullmatch(raw.strip()) if platform == "telegram" else None
        try:
            entry = chat.group(1) if chat else normalize_entry(platform, raw)
        except AllowlistEntryError as e:
            raise AllowlistEntryError(f"entry {i}: {e.message}", e.hint) from None
        if entry not in out:
            out.append(entry)
    return out


def normalize_peer(platform: str, kind: str, raw: str) -> str:
    """A binding's `peer.id` as the platform's messages carry it — a DM's sender id, a group's chat id —
    by the rules of `owners` for a DM; AllowlistEntryError when no message can ever carry it. Routing
    compares it with the message's id normalised the same way."""
    rules = SENDER_IDS.get(platform)
    if kind == "dm":
        entry = normalize_entry(platform, raw)
        if entry == STAR or is_username(entry):
            raise AllowlistEntryError(f"{raw!r}: a binding matches the sender's id, never a username or '*'",
                                      "use the sender's id (`hermit pairing list` and the pairing reply show it)")
        return entry
    text = raw.strip()
    if not text:
        raise AllowlistEntryError("an empty id matches no group", "put the group's id there")
    return rules.group(raw, _unprefixed(platform, raw, text)) if rules else text


# A binding's workspace (Slack `team_id`) or server (Discord `guild_id`), written as messages carry it. An
# exact comparison let `team_id: t0123` or ` T0123` route a whole workspace to the default agent in silence.
_TEAM_ID = re.compile(r"[TE][A-Z0-9]+")  # workspaces are T…, Enterprise Grid organisations E…
_GUILD_HINT = ("use the server's numeric id (Developer Mode on, then right-click the server icon → Copy Server "
               "ID), not its name or an invite link")
TEAM_HINT = "use the workspace id, like T0123ABCD (`auth.test` names it; so does the workspace's app URL)"


def normalize_team_id(raw: str) -> str:
    """A Slack `team_id` as events carry it: no surrounding spaces, upper case (Slack ids are)."""
    return raw.strip().upper()


def team_id_problem(team_id: str) -> str | None:
    """Why a (normalised) `team_id` can never match a Slack event, or None when it looks like one."""
    return None if _TEAM_ID.fullmatch(team_id) else f"{team_id!r} is not a Slack workspace id"


def normalize_guild_id(raw: str) -> str:
    """A Discord `guild_id` as messages carry it (digits); AllowlistEntryError for a name, link or mention."""
    text = raw.strip()
    if text.isascii() and text.isdigit():
        return text
    raise AllowlistEntryError("not a Discord server id: server ids are digits", _GUILD_HINT)


def sender_key(platform: str, sender_id: str) -> str:
    """A sender id as entries are written after normalisation (WhatsApp: digits only)."""
    sender_id = sender_id.strip()
    rules = SENDER_IDS.get(platform)
    return rules.key(sender_id) if rules else sender_id


def is_username(entry: str) -> bool:
    return entry.startswith("@")


def matches(platform: str, entries: Iterable[str], sender_id: str, username: str | None = None) -> bool:
    """Whether a normalised list names this sender, by id or (Telegram, Discord) by username. `*` is not
    interpreted here: the caller decides what a star means for its list."""
    key = sender_key(platform, sender_id)
    handle = "@" + username.strip().lstrip("@").lower() if username and username.strip().lstrip("@") else None
    for entry in entries:
        if entry == STAR:
            continue
        if is_username(entry):
            if handle is not None and entry == handle:
                return True
        elif entry == key:
            return True
    return False
