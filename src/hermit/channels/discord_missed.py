"""Discord deletes the gateway never heard of: sent while its socket was down and the session could not be resumed.

Discord replays the events of a resumed session, but a session it will not resume (op 9 after a long drop, or a
gateway that was not running: a restart, an update) starts afresh, and a MESSAGE_DELETE sent meanwhile is never sent
again: Ann's "my card is 4111-0001", deleted while Hermit was away, stayed in her session and went to the model with
every later turn (s22 t9: "never retracted"). So each account keeps the ids of the messages it handed on, per channel
(`Held`, in the state dir: a restart forgets none), and at each fresh session (discord.py's `on_connect`: READY, not
a resume) reads each such channel's history from its oldest held message on: a held message Discord no longer has in
that stretch was deleted, and is handed to the gateway as a delete (retracted as a live one is); one whose edit time is
not the one last seen was edited meanwhile, and is handed on as that edit. Ids and edit times only, never text.

Bounds: the last PER_CHANNEL messages of the last CHANNELS channels, and PAGES pages of history per channel; a held
message past what was read (a channel busier than that since) is left unjudged, never called deleted. A channel Discord
will not show (the bot removed from it, no Read Message History) is skipped and logged.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermit.durable import write_atomic

log = logging.getLogger(__name__)

PER_CHANNEL = 100
CHANNELS = 50
PAGES = 5  # of 100 messages: at most 500 read per channel at a fresh session


@dataclass(frozen=True)
class HeldChannel:
    channel_id: str
    guild_id: str | None
    messages: dict[str, str]  # message id -> its author's id
    edits: dict[str, str] = field(default_factory=dict)  # message id -> its last edit's time seen (Discord's stamp)


class Held:
    """The messages an account handed on, per channel, oldest channel first (kept in `path` when given)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._channels: dict[str, HeldChannel] = {}
        if path is not None:
            self._channels = _read(path)

    def add(self, channel_id: str, guild_id: str | None, message_id: str, author_id: str) -> None:
        ch = self._channels.pop(channel_id, None) or HeldChannel(channel_id, guild_id, {})
        self._channels[channel_id] = ch  # the channel last written to goes last (kept longest)
        ch.messages[message_id] = author_id
        while len(ch.messages) > PER_CHANNEL:
            del ch.messages[min(ch.messages, key=int)]
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
        """A held message's edit taken (live, or found at a fresh session): not handed on again."""
        ch = self._channels.get(channel_id)
        if ch is not None and message_id in ch.messages and ch.edits.get(message_id) != stamp:
            ch.edits[message_id] = stamp
            self._save()

    def channels(self) -> list[HeldChannel]:
        return [HeldChannel(c.channel_id, c.guild_id, dict(c.messages), dict(c.edits))
                for c in self._channels.values()]

    def _save(self) -> None:
        if self._path is None:
            return
        data = {"version": 1, "channels": [{"id": c.channel_id, "guild": c.guild_id, "messages": c.messages,
                                            "edits": c.edits} for c in self._channels.values()]}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self._path, json.dumps(data, separators=(",", ":")), mode=0o600, fsync=False,
                         keep_mode=False)
        except OSError as e:
            log.warning("could not keep the Discord message ids in %s: %s", self._path, e)


def held_path(state_dir: Path, account_id: str) -> Path:
    safe = re.sub(r"[^\w-]+", "_", account_id) or "_"
    return state_dir / "channels" / "discord" / safe / "held-messages.json"


def _read(path: Path) -> dict[str, HeldChannel]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("could not read %s (deletes missed while away are not looked for): %s", path, e)
        return {}
    out: dict[str, HeldChannel] = {}
    for c in data.get("channels", []) if isinstance(data, dict) else []:
        if not isinstance(c, dict) or not str(c.get("id", "")).isdigit() or not isinstance(c.get("messages"), dict):
            continue
        messages = {str(m): str(a) for m, a in c["messages"].items() if str(m).isdigit()}
        edits = c.get("edits")
        edits = edits if isinstance(edits, dict) else {}
        guild = c.get("guild")
        out[str(c["id"])] = HeldChannel(str(c["id"]), str(guild) if guild else None, messages,
                                        {str(m): str(t) for m, t in edits.items() if str(m) in messages})
    return out


@dataclass(frozen=True)
class Found:
    deleted: list[str]  # held messages Discord no longer has, oldest first
    edited: list[Any]  # held messages (discord.Message) edited since last seen, oldest first


async def gone(client: Any, held: HeldChannel) -> Found | None:
    """What became of the held messages of this channel; None when its history cannot be read."""
    import aiohttp
    import discord

    ids = sorted(held.messages, key=int)
    if not ids:
        return Found([], [])
    newest_held = int(ids[-1])
    present: set[str] = set()
    edited: list[Any] = []
    read = 0
    reached = 0  # the newest message id read: held ones up to it are judged
    channel = client.get_partial_messageable(int(held.channel_id),
                                             guild_id=int(held.guild_id) if held.guild_id else None)
    try:
        async for m in channel.history(limit=PAGES * 100, after=discord.Object(int(ids[0]) - 1), oldest_first=True):
            read += 1
            present.add(str(m.id))
            if str(m.id) in held.messages and m.edited_at is not None and \
                    held.edits.get(str(m.id)) != m.edited_at.isoformat():
                edited.append(m)
            reached = m.id
            if m.id >= newest_held:
                break
    except (discord.HTTPException, aiohttp.ClientError, TimeoutError, OSError) as e:
        log.warning("could not read a Discord channel's history for deletes missed while away: %s", e)
        return None
    if read < PAGES * 100:
        reached = max(reached, newest_held)  # the history ended: nothing held after what was read is left there
    return Found([m for m in ids if int(m) <= reached and m not in present], edited)
