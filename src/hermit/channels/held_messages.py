"""The messages an account handed on, per conversation: ids, authors and last edit stamps, never text.

A platform that does not replay the deletes and edits sent while the gateway was away (Discord when it will not
resume a session, Slack past its retries, either across a restart) is asked at the next connection what became of
these messages: channels/discord_missed.py and channels/slack_missed.py compare the record with the platform's
history. Only messages the gateway queued are held (the adapters ask publish's outcome): a refused one (a group's
chatter with no mention, a stranger's) is in no session, and held it pushed the owner's conversations out of the
bounds below — a bot in 50 channels of chatter no longer looked for the owner's DM. Kept in the state dir (0600), so a restart forgets none. Bounds: the last PER_CHANNEL messages of the last
CHANNELS conversations written to; a record that cannot be read counts as nothing held (one warning), and so does
one that is not this user's own regular file of at most config/records.py's MAX_BYTES in a folder of theirs (a
symlink, a FIFO — its read blocked the account's start, and the gateway's, for ever —, another uid's file, a huge
one): read as the trust records are, never followed; the next message handed on writes a fresh record in its place.

Message ids are ordered by the platform's `order` (Discord snowflakes as integers, Slack `ts` as seconds and
micro-part); `valid_id` / `valid_channel` keep a hand-edited or damaged record's junk out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermit.config import records
from hermit.durable import write_atomic

log = logging.getLogger(__name__)

PER_CHANNEL = 100
CHANNELS = 50


@dataclass(frozen=True)
class HeldChannel:
    channel_id: str  # the conversation the platform's history is read by (Slack: a thread is `C… <thread ts>`)
    scope: str | None  # what else the platform needs (Discord: the guild id; Slack: the conversation type and workspace)
    messages: dict[str, str]  # message id -> its author's id
    edits: dict[str, str] = field(default_factory=dict)  # message id -> the stamp of its last edit seen


class Held:
    """The messages an account handed on, per conversation, the one least recently written to first (kept in
    `path` when given)."""

    def __init__(self, path: Path | None, *, order: Callable[[str], Any], valid_id: Callable[[str], bool],
                 valid_channel: Callable[[str], bool], platform: str) -> None:
        self._path = path
        self._order = order
        self._valid_id = valid_id
        self._valid_channel = valid_channel
        self._platform = platform
        self._channels: dict[str, HeldChannel] = {}
        if path is not None:
            self._channels = self._read(path)

    def add(self, channel_id: str, scope: str | None, message_id: str, author_id: str) -> None:
        if not (self._valid_channel(channel_id) and self._valid_id(message_id)):
            return
        ch = self._channels.pop(channel_id, None) or HeldChannel(channel_id, scope, {})
        self._channels[channel_id] = ch  # the channel last written to goes last (kept longest)
        ch.messages[message_id] = author_id
        while len(ch.messages) > PER_CHANNEL:
            oldest = min(ch.messages, key=self._order)
            del ch.messages[oldest]
            ch.edits.pop(oldest, None)
        while len(self._channels) > CHANNELS:
            del self._channels[next(iter(self._channels))]
        self._save()

    def drop(self, channel_id: str, message_ids: list[str]) -> None:
        """Messages deleted live (or found deleted): not looked for again."""
        ch = self._channels.get(channel_id)
        if ch is None or not any(m in ch.messages for m in message_ids):
            return
        for m in message_ids:
            ch.messages.pop(m, None)
            ch.edits.pop(m, None)
        if not ch.messages:
            del self._channels[channel_id]
        self._save()

    def edited(self, channel_id: str, message_id: str, stamp: str) -> None:
        """A held message's edit taken (live, or found at a fresh connection): not handed on again."""
        ch = self._channels.get(channel_id)
        if ch is not None and message_id in ch.messages and ch.edits.get(message_id) != stamp:
            ch.edits[message_id] = stamp
            self._save()

    def channels(self) -> list[HeldChannel]:
        return [HeldChannel(c.channel_id, c.scope, dict(c.messages), dict(c.edits))
                for c in self._channels.values()]

    def _save(self) -> None:
        if self._path is None:
            return
        data = {"version": 1, "channels": [{"id": c.channel_id, "guild": c.scope, "messages": c.messages,
                                            "edits": c.edits} for c in self._channels.values()]}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self._path, json.dumps(data, separators=(",", ":")), mode=0o600, fsync=False,
                         keep_mode=False)
        except OSError as e:
            log.warning("could not keep the %s message ids in %s: %s", self._platform, self._path, e)

    def _read(self, path: Path) -> dict[str, HeldChannel]:
        try:
            raw = records.read(path, f"the {self._platform} message ids record")
            if raw is None:
                return {}
            data = json.loads(raw.decode("utf-8"))
        except (records.UntrustedRecord, ValueError) as e:
            log.warning("could not read %s (%s deletes missed while away are not looked for; the next message "
                        "handed on writes a fresh record): %s", path, self._platform,
                        e.message if isinstance(e, records.UntrustedRecord) else e)
            return {}
        out: dict[str, HeldChannel] = {}
        for c in data.get("channels", []) if isinstance(data, dict) else []:
            if not isinstance(c, dict) or not self._valid_channel(str(c.get("id", ""))) or \
                    not isinstance(c.get("messages"), dict):
                continue
            messages = {str(m): str(a) for m, a in c["messages"].items() if self._valid_id(str(m))}
            edits = c.get("edits")
            edits = edits if isinstance(edits, dict) else {}
            scope = c.get("guild")
            out[str(c["id"])] = HeldChannel(str(c["id"]), str(scope) if scope else None, messages,
                                            {str(m): str(t) for m, t in edits.items() if str(m) in messages})
        return out
