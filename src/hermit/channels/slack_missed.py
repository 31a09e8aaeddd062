"""Slack deletes and edits the gateway never heard of: made while it was away longer than Slack retries an event.

Socket Mode redelivers an unacked envelope and the Events API retries a failed delivery, but only for about an hour
and only while Slack is trying: a message deleted while the gateway was stopped (an update, a restart) or its socket
down past the retries is never told again, and Ann's deleted "my card is 4111-0001" stayed in her session and went
to the model with every later turn. So each account keeps the `ts` of the messages it handed on, per conversation
(channels/held_messages.py: ids, authors and edit stamps, never text; a thread is its own conversation, `C… <thread
ts>`), and at each new Socket Mode connection (`hello`: a start, or a reconnect) reads `conversations.history` (a
thread: `conversations.replies`) over the span of the held ones: a held message Slack no longer has (or shows as a
tombstone) was deleted, and is handed to the gateway as its `message_deleted` would have been; one whose `edited.ts`
is not the one last seen was edited, and is handed on as its `message_changed`.

Bounds: the held span only (oldest to newest held `ts`), PAGES pages of PAGE messages per conversation; a held
message past what was read is left unjudged, never called deleted. A conversation Slack will not show (the bot
removed, a missing `*:history` scope) is skipped and logged. A 429 is waited out as Slack's Retry-After says
(channels/retry.py); a look still failing skips that conversation until the next connection.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.channels import held_messages
from hermit.channels.base import InboundMessage, PublishOutcome
from hermit.channels.held_messages import HeldChannel
from hermit.errors import ChannelError

log = logging.getLogger(__name__)

PAGES = 5
PAGE = 200  # Slack's advice for conversations.history / replies

_TS = re.compile(r"\d{1,12}\.\d{1,9}")
_KEY = re.compile(r"[A-Z0-9]{1,40}( \d{1,12}\.\d{1,9})?")

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]
HandOn = Callable[[dict[str, Any]], Awaitable[None]]


def order(ts: str) -> tuple[int, int]:
    whole, _, part = ts.partition(".")
    return int(whole), int(part.ljust(6, "0")[:9])


class Held(held_messages.Held):
    """The record with Slack's ids: message `ts`, conversations `C…` or `C… <thread ts>`."""

    def __init__(self, path: Path | None) -> None:
        super().__init__(path, order=order, valid_id=lambda ts: bool(_TS.fullmatch(ts)),
                         valid_channel=lambda k: bool(_KEY.fullmatch(k)), platform="Slack")


def held_path(state_dir: Path, account_id: str) -> Path:
    safe = re.sub(r"[^\w-]+", "_", account_id) or "_"
    return state_dir / "channels" / "slack" / safe / "held-messages.json"


def conversation(channel: str, thread: str | None) -> str:
    return f"{channel} {thread}" if thread else channel


def remember(held: Held, msg: InboundMessage, event: Mapping[str, Any], outcome: PublishOutcome = "queued") -> None:
    """A message the gateway queued is held — one it refused (chatter with no mention, a stranger) is in no session,
    and held it pushed the owner's conversations out of the record's bounds; a change handed on (live, or found
    here) is not handed on again."""
    key = conversation(str(msg.meta.get("channel_id", "")), msg.thread_id)
    if msg.change is None:
        if outcome != "queued":
            return
        kind = str(event.get("channel_type") or "channel")  # and the workspace: an org-wide install has many
        held.add(key, f"{kind} {msg.team_id}" if msg.team_id else kind, msg.message_id, msg.sender_id)
    elif msg.change == "deleted":
        held.drop(key, [msg.message_id])
    else:
        now = event.get("message")
        edited = now.get("edited") if isinstance(now, Mapping) else None
        if isinstance(edited, Mapping) and edited.get("ts"):
            held.edited(key, msg.message_id, str(edited["ts"]))


@dataclass(frozen=True)
class Found:
    deleted: list[str]  # held `ts` Slack no longer has, oldest first
    edited: list[dict[str, Any]]  # held messages (as Slack lists them) edited since last seen, oldest first


async def gone(call: Call, held: HeldChannel) -> Found | None:
    """What became of the held messages of this conversation; None when Slack will not say."""
    ids = sorted(held.messages, key=order)
    if not ids:
        return Found([], [])
    channel, _, thread = held.channel_id.partition(" ")
    method = "conversations.replies" if thread else "conversations.history"
    args: dict[str, Any] = {"channel": channel, "oldest": ids[0], "latest": ids[-1], "inclusive": "true",
                            "limit": str(PAGE)}
    if thread:
        args["ts"] = thread
    present: set[str] = set()
    read: list[str] = []
    edited: dict[str, dict[str, Any]] = {}
    more = False
    for _ in range(PAGES):
        try:
            data = await call(method, args)
        except ChannelError as e:
            log.warning("could not read a Slack conversation's history for changes missed while away: %s", e.message)
            return None
        for m in data.get("messages") or []:
            ts = str(m.get("ts", "")) if isinstance(m, dict) else ""
            if not _TS.fullmatch(ts):
                continue
            read.append(ts)
            if m.get("subtype") == "tombstone":
                continue  # a thread's parent deleted: its replies keep its place
            present.add(ts)
            stamp = m.get("edited", {}).get("ts") if isinstance(m.get("edited"), dict) else None
            if ts in held.messages and stamp and held.edits.get(ts) != str(stamp):
                edited[ts] = m
        cursor = str((data.get("response_metadata") or {}).get("next_cursor") or "")
        more = bool(data.get("has_more")) and bool(cursor)
        if not more:
            break
        args["cursor"] = cursor
    lo, hi = order(ids[0]), order(ids[-1])
    if more:  # not all read: judge only the stretch read (history reads newest first, replies oldest first)
        if not read:
            return Found([], [edited[t] for t in sorted(edited, key=order)])
        if thread:
            hi = max(order(t) for t in read)
        else:
            lo = min(order(t) for t in read)
    deleted = [t for t in ids if lo <= order(t) <= hi and t not in present]
    return Found(deleted, [edited[t] for t in sorted(edited, key=order)])


async def sweep(held: Held, call: Call, hand_on: HandOn, account_id: str) -> None:
    """Each held conversation looked at; what was deleted or edited meanwhile handed on as the event it missed."""
    for c in held.channels():
        found = await gone(call, c)
        if found is None or not (found.deleted or found.edited):
            continue
        log.info("slack %s: %d message(s) deleted and %d edited while the gateway was away: taking them",
                 account_id, len(found.deleted), len(found.edited))
        channel, _, thread = c.channel_id.partition(" ")
        kind, _, team = (c.scope or "channel").partition(" ")
        base = {"type": "message", "channel": channel, "channel_type": kind, **({"team": team} if team else {})}
        for m in found.edited:
            now = {**m, "thread_ts": m.get("thread_ts") or thread or None}
            await hand_on({**base, "subtype": "message_changed", "message": now, "event_ts": m["edited"]["ts"]})
            held.edited(c.channel_id, str(m["ts"]), str(m["edited"]["ts"]))
        for ts in found.deleted:
            user, _, team = c.messages[ts].partition("@")
            before = {"user": user, "ts": ts, "thread_ts": thread or None, **({"user_team": team} if team else {})}
            await hand_on({**base, "subtype": "message_deleted", "deleted_ts": ts, "previous_message": before})
        held.drop(c.channel_id, found.deleted)
