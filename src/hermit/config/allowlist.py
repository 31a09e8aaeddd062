"""Sender allowlist entries (`owners`, `allow_from`, `group_allow_from`): normalise what people write, match senders.

People paste ids from logs, profiles and other tools, so an entry is normalised once, at config load:
surrounding spaces go; a channel prefix in any case is dropped (`telegram:`/`tg:`, `discord:`, `slack:`,
`whatsapp:`/`wa:`); a Discord or Slack mention (`<@123>`) becomes the id; Telegram and Discord
`@username` entries are kept lowercased and match the sender's username case-insensitively; WhatsApp
numbers lose `+`, spaces, dashes, dots and parentheses, as the platform's sender ids have none. An
entry that can never match a sender (another platform's prefix, a Telegram name without `@`, letters in
a phone number, a group id among users) is an `AllowlistEntryError` with a hint: a silent lock-out of
the owner, or a silent let-in of nobody, is worse than a refused config. `*` is kept as it is; whether
it is allowed is decided by the list's own rule (schema.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

STAR = "*"
# Which prefixes name which platform; any of them on another platform's account is a mistake.
_PREFIXES: dict[str, tuple[str, ...]] = {
    "telegram": ("telegram", "tg"),
    "discord": ("discord",),
    "slack": ("slack",),
    "whatsapp": ("whatsapp", "wa"),
}
_PREFIX_OWNER = {p: platform for platform, ps in _PREFIXES.items() for p in ps}
_PREFIX_RE = re.compile(r"^([A-Za-z]+)\s*:\s*(.*)$", re.S)
# Telegram usernames: 5-32 letters, digits or '_', starting with a letter (a few old ones are 4 long).
_TG_USERNAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,31}")
# Discord's unique usernames (since 2023): 2-32 lowercase letters, digits, '_' or '.'.
_DISCORD_USERNAME = re.compile(r"[A-Za-z0-9_.]{2,32}")
_MENTION = re.compile(r"^<@!?([A-Za-z0-9]+)(?:\|[^>]*)?>$")
_PHONE_NOISE = re.compile(r"[\s\-.()]")
_ID_HINTS = {
    "telegram": "use the numeric user id (the pairing reply tells a sender theirs) or @username",
    "discord": "use the numeric user id (Developer Mode → right-click the user → Copy User ID) or @username",
    "slack": "use the member id, like U012AB3CD (profile → ⋮ → Copy member ID)",
    "whatsapp": "use the phone number with its country code, like +15551234567",
}


class AllowlistEntryError(ValueError):
    """An entry that can never match a sender; `hint` says how to write it."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def platforms() -> tuple[str, ...]:
    return tuple(_PREFIXES)


def normalize_entry(platform: str, raw: str) -> str:
    """The canonical form of one entry for `platform`, or AllowlistEntryError."""
    text = raw.strip()
    if not text:
        raise AllowlistEntryError("an empty entry matches nobody", "remove it, or put a sender id there")
    if text == STAR:
        return STAR
    m = _PREFIX_RE.match(text)
    if m and m.group(1).lower() in _PREFIX_OWNER:
        owner = _PREFIX_OWNER[m.group(1).lower()]
        if owner != platform:
            raise AllowlistEntryError(
                f"{raw!r} has a {m.group(1)}: prefix, which names {owner}, on a {platform} account",
                f"put it under channels.{owner}.accounts, or drop the prefix and {_ID_HINTS[platform]}")
        text = m.group(2).strip()
        if not text:
            raise AllowlistEntryError(f"{raw!r} is a prefix without an id", _ID_HINTS[platform])
    if platform == "telegram":
        return _telegram(raw, text)
    if platform == "discord":
        return _discord(raw, text)
    if platform == "slack":
        return _slack(raw, text)
    if platform == "whatsapp":
        return _whatsapp(raw, text)
    return text  # a platform without rules of its own: compared as written


def _telegram(raw: str, text: str) -> str:
    if text.isdigit():
        return text
    if re.fullmatch(r"-\d+", text):
        raise AllowlistEntryError(f"{raw!r} is a group or channel id, not a user: no sender has it",
                                  "list group ids under `groups`; senders here are users: " + _ID_HINTS["telegram"])
    if text.startswith("@"):
        if _TG_USERNAME.fullmatch(text[1:]):
            return text.lower()
        raise AllowlistEntryError(f"{raw!r} is not a Telegram username (5-32 letters, digits or _)",
                                  _ID_HINTS["telegram"])
    if _TG_USERNAME.fullmatch(text):
        raise AllowlistEntryError(f"{raw!r} is neither a numeric Telegram user id nor an @username",
                                  f"write '@{text}' for the username, or the numeric user id")
    raise AllowlistEntryError(f"{raw!r} is neither a numeric Telegram user id nor an @username",
                              _ID_HINTS["telegram"])


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
                                  _ID_HINTS["discord"])
    hint = f"write '@{text.lower()}' for the username, or the numeric user id" \
        if _DISCORD_USERNAME.fullmatch(text) else _ID_HINTS["discord"]
    raise AllowlistEntryError(f"{raw!r} is neither a numeric Discord user id nor an @username", hint)


def _slack(raw: str, text: str) -> str:
    m = _MENTION.match(text)
    if m:
        text = m.group(1)
    if text.startswith(("@", "#")):
        raise AllowlistEntryError(f"{raw!r}: Slack messages carry member ids, never names or handles",
                                  _ID_HINTS["slack"])
    if re.fullmatch(r"[A-Za-z0-9]+", text):
        return text.upper()  # Slack ids are upper case; a lower-cased paste still means the same member
    raise AllowlistEntryError(f"{raw!r} is not a Slack member id", _ID_HINTS["slack"])


def _whatsapp(raw: str, text: str) -> str:
    text = text.removesuffix("@s.whatsapp.net")
    digits = _PHONE_NOISE.sub("", text).removeprefix("+")
    if digits.isdigit() and len(digits) <= 15:  # E.164: at most 15 digits
        return digits
    if re.search(r"[A-Za-z]", text):
        raise AllowlistEntryError(f"{raw!r} has letters: WhatsApp senders are phone numbers",
                                  _ID_HINTS["whatsapp"])
    raise AllowlistEntryError(f"{raw!r} is not a phone number (digits, at most 15, with an optional +)",
                              _ID_HINTS["whatsapp"])


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


def sender_key(platform: str, sender_id: str) -> str:
    """A sender id as entries are written after normalisation (WhatsApp: digits only)."""
    sender_id = sender_id.strip()
    if platform == "whatsapp":
        return _PHONE_NOISE.sub("", sender_id).removeprefix("+")
    return sender_id


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
