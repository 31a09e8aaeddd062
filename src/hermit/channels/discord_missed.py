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

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.channels import held_messages
from hermit.channels.held_messages import CHANNELS, PER_CHANNEL, HeldChannel

__all__ = ["CHANNELS", "PAGES", "PER_CHANNEL", "Found", "Held", "HeldChannel", "gone", "held_path"]

log = logging.getLogger(__name__)

PAGES = 5  # of 100 messages: at most 500 read per channel at a fresh session


class Held(held_messages.Held):
    """The record (channels/held_messages.py) with Discord's ids: snowflakes, ordered as integers."""

    def __init__(self, path: Path | None) -> None:
        super().__init__(path, order=int, valid_id=str.isdigit, valid_channel=str.isdigit, platform="Discord")


def held_path(state_dir: Path, account_id: str) -> Path:
    safe = re.sub(r"[^\w-]+", "_", account_id) or "_"
    return state_dir / "channels" / "discord" / safe / "held-messages.json"


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
                                             guild_id=int(held.scope) if held.scope else None)
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
