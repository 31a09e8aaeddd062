"""The web chat channel: browser clients connected to the gateway's WebSocket, as one Channel.

The gateway's WebSocket endpoint (gateway/webchat_api.py) authenticates each connection and attaches
it here under the client id the page keeps across reloads and reconnects; messages the user sends
become InboundMessages (peer = that client id), and outbound items for a client go, as §15 event
frames, to every socket it has open. Whoever holds the gateway token is the owner, so the web chat
needs no access check and may continue any session it picks from the list. A file the page sends
comes in pieces (gateway/webchat_api.py `chat.upload`) and is staged under `<state>/inbox/` as every
channel stages one (`stage`: channels/inbox.py), then goes with the message as an Attachment.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from hermit.channels.base import (
    Attachment,
    ChannelCapabilities,
    ChannelStatus,
    InboundMessage,
    InboundSink,
    Outbound,
    OutboundMessage,
    PublishOutcome,
    StreamDelta,
    ToolActivity,
    TurnEnd,
    Typing,
)
from hermit.channels.inbox import StagedFile, sweep_staged
from hermit.errors import ChannelError

log = logging.getLogger("hermit.channels.webchat")


class WebchatConnection(Protocol):
    """One open browser socket, as the channel needs it."""

    async def send_event(self, event: str, payload: dict[str, Any]) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


def event_of(item: Outbound) -> tuple[str, dict[str, Any]]:
    """The §15 event (name, payload) for one outbound item; `replyTo` is the client's message id."""
    reply_to = item.target.reply_to
    if isinstance(item, StreamDelta):
        return "chat.delta", {"replyTo": reply_to, "turnId": item.turn_id, "text": item.text}
    if isinstance(item, ToolActivity):
        return "chat.tool", {"replyTo": reply_to, "turnId": item.turn_id, "callId": item.call_id,
                             "name": item.name, "status": item.status}
    if isinstance(item, TurnEnd):
        done = {"replyTo": reply_to, "turnId": item.turn_id, "status": item.status}
        return "chat.done", {**done, "hint": item.hint} if item.hint else done
    if isinstance(item, Typing):
        return "chat.typing", {"replyTo": reply_to, "on": item.on}
    assert isinstance(item, OutboundMessage)
    name = "chat.error" if item.kind == "error" else "chat.message"
    return name, {"replyTo": reply_to, "text": item.text, "kind": item.kind}


class WebchatChannel:
    name = "webchat"
    account_id = "default"
    # Replies are streamed, so no chunking is needed; the limit only bounds one non-streamed message.
    capabilities = ChannelCapabilities(max_chars=200_000, streaming=True, typing=True)

    def __init__(self, clock: Callable[[], float] = time.time, inbox_dir: Path | None = None) -> None:
        """`inbox_dir`: where files the page sends are staged (`<state>/inbox/`; None: the page sends none)."""
        self._clock = clock
        self._inbox = inbox_dir
        self._sink: InboundSink | None = None
        self._clients: dict[str, set[WebchatConnection]] = {}
        self._status = ChannelStatus(self.name, self.account_id)

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self._status.connected = True
        self._sweep()

    def _sweep(self) -> None:
        """Delete the files a page was sending when the last gateway stopped (killed mid-upload, or before a
        queued message's turn filed them): a web chat message is not kept across a restart."""
        for name in sweep_staged(self._inbox, self.name, self.account_id):
            log.info("removed %s, a file a page was sending when the gateway stopped", name)

    async def stop(self) -> None:
        self._status.connected = False
        self._sink = None
        for conns in list(self._clients.values()):
            for conn in list(conns):
                with contextlib.suppress(Exception):  # a socket already gone needs no goodbye
                    await conn.close(1001, "gateway stopping")
        self._clients.clear()

    def status(self) -> ChannelStatus:
        return self._status

    def clients(self) -> int:
        return len(self._clients)

    def attach(self, client_id: str, conn: WebchatConnection) -> None:
        self._clients.setdefault(client_id, set()).add(conn)

    def detach(self, client_id: str, conn: WebchatConnection) -> None:
        conns = self._clients.get(client_id)
        if conns is not None:
            conns.discard(conn)
            if not conns:
                del self._clients[client_id]

    def stage(self, client_id: str, upload_id: str, name: str) -> StagedFile:
        """A new file in the state dir's inbox for one file the page sends (created exclusively, 0600)."""
        if self._inbox is None:
            raise ChannelError("this gateway takes no files from the web chat", "send the text alone")
        return StagedFile(self._inbox, (self.name, self.account_id, client_id, upload_id), name)

    async def submit(self, client_id: str, text: str, message_id: str, session_key: str | None,
                     agent_id: str | None = None, attachments: tuple[Attachment, ...] = ()) -> PublishOutcome:
        """Hand one message of the page to the gateway; `session_key` (with `agent_id`, the agent whose
        session it is) when the page chose a session, None for the web chat's own. `attachments`: its staged
        files, the gateway's to file from then on when the outcome is "queued"."""
        if self._sink is None:
            raise ChannelError("the web chat is not running", "wait for the gateway to start, then reconnect")
        self._status.messages_in += 1
        return await self._sink.publish(InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm", peer_id=client_id,
            sender_id=client_id, text=text, message_id=message_id, received_at=self._clock(),
            session_key=session_key, session_agent=agent_id if session_key is not None else None,
            attachments=attachments))

    async def send(self, item: Outbound) -> None:
        name, payload = event_of(item)
        conns = list(self._clients.get(item.target.peer_id, ()))
        if isinstance(item, OutboundMessage):
            self._status.messages_out += 1
        for conn in conns:
            try:
                await conn.send_event(name, payload)
            except Exception as e:  # noqa: BLE001 - a closed tab must not stop delivery to the client's others
                log.debug("web chat socket of %s went away: %s", item.target.peer_id, e)
                self.detach(item.target.peer_id, conn)
