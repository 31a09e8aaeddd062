"""Telegram's durable poller state: the one-poller-per-token lock, the update offset and the in-flight journal.

Why a journal and not only the offset: the gateway's queue lives in memory, so committing the offset when
`publish` returns would lose a message if the process died before the turn ran. Instead an update is
written here (with the offset past it) *before* it is published, in one atomic write, and leaves the
journal when its turn ends (or the gateway refused it), with the earlier messages of its chat and forum
topic; another topic's stay until their own turns end. A restart republishes what is still in flight:
no update is lost. Delivery is at least once: a process killed after Telegram took the answer but before
its reply to `sendMessage` arrived republishes that update, and it is answered again (the turn runs anew).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hermit.channels.base import Attachment, InboundMessage
from hermit.durable import write_atomic
from hermit.errors import ChannelError
from hermit.locks import LockFile


def token_dir(state_dir: Path, token: str) -> Path:
    """Keyed by a hash of the token, never the token itself (the path shows up in logs and errors)."""
    return state_dir / "channels" / "telegram" / hashlib.sha256(token.encode()).hexdigest()[:16]


class PollerLock:
    """A lock file (hermit.locks) held while a poller runs, released by the kernel when the process dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: LockFile | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = LockFile.try_acquire(self.path)
        if lock is None:
            holder = _holder(self.path)
            raise ChannelError(
                f"another poller already uses this Telegram bot token (process {holder} holds {self.path})",
                "Telegram allows one getUpdates poller per token: stop the other gateway, or give this "
                "account its own bot token")
        lock.publish(str(os.getpid()).encode())
        self._lock = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _holder(path: Path) -> str:
    """The pid the holding poller wrote into its lock file, or "?"."""
    try:
        return path.read_bytes()[:64].decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def _to_json(msg: InboundMessage) -> dict[str, Any]:
    d = asdict(msg)
    d["meta"] = dict(msg.meta)
    return d


def _from_json(d: dict[str, Any]) -> InboundMessage:
    d = dict(d)
    d["attachments"] = tuple(Attachment(**a) for a in d.get("attachments", ()))
    return InboundMessage(**d)


class PollState:
    """`state.json`: {"offset": next update id, "inflight": {update_id: message}}, rewritten atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.inflight: dict[int, InboundMessage] = {}
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                self.offset = int(data.get("offset", 0))
                self.inflight = {int(k): _from_json(v) for k, v in data.get("inflight", {}).items()}
            except (ValueError, TypeError, KeyError) as e:
                raise ChannelError(f"Telegram poller state {path} is corrupt: {e}",
                                   "move the file away to start from Telegram's pending updates "
                                   "(messages in flight when it broke are not replayed)") from e

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"offset": self.offset, "inflight": {str(k): _to_json(v) for k, v in sorted(self.inflight.items())}}
        write_atomic(self.path, json.dumps(data, ensure_ascii=False))

    def receive(self, update_id: int, msg: InboundMessage | None) -> None:
        """Record an update as taken from Telegram (offset past it) and, if it carries a message, in flight."""
        self.offset = max(self.offset, update_id + 1)
        if msg is not None:
            self.inflight[update_id] = msg
        self.save()

    def done(self, update_id: int) -> None:
        if self.inflight.pop(update_id, None) is not None:
            self.save()

    def done_through(self, chat_id: str, message_id: str) -> None:
        """A turn ended for `message_id` in `chat_id`: it and the earlier messages of its own conversation
        are answered (the gateway handles one session's messages in order, and may fold queued ones into one
        turn). A conversation is the chat and, in a forum supergroup, the topic: topics are sessions of
        their own that run concurrently, so another topic's earlier message may still be running or queued
        and must stay journaled, to be replayed after a crash. A message the journal does not hold clears
        nothing (its topic is unknown)."""
        try:
            upto = int(message_id)
        except ValueError:
            return
        finished = next((m for m in self.inflight.values()
                         if m.meta.get("chat_id") == chat_id and m.message_id == message_id), None)
        if finished is None:
            return
        gone = [u for u, m in self.inflight.items()
                if m.meta.get("chat_id") == chat_id and m.topic_id == finished.topic_id
                and m.message_id.isdigit() and int(m.message_id) <= upto]
        for u in gone:
            del self.inflight[u]
        if gone:
            self.save()
