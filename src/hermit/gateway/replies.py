"""Reply shaping: one turn's events and result turned into what a channel is sent (SPEC §15).

Streaming channels (web chat) get StreamDelta / ToolActivity as the turn runs; the others get the
whole reply at the end, chunked at the channel's limit. A silent NO_REPLY turn sends nothing; a failed
turn sends a short apology (the detail goes to the log, never to the chat); Typing is on while the
turn runs; TurnEnd closes every turn. A channel that fails to deliver is logged, never fatal to the
turn or the session queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hermit.agent.loop import AgentEvent, TextChunk, ToolFinished, ToolStarted, TurnCancelled
from hermit.agent.turn import TurnResult
from hermit.channels.base import (
    Channel,
    Outbound,
    OutboundMessage,
    StreamDelta,
    Target,
    ToolActivity,
    TurnEnd,
    Typing,
)
from hermit.errors import HermitError
from hermit.redaction import mask

log = logging.getLogger("hermit.gateway")

APOLOGY = "Sorry — something went wrong while I was answering. Please try again in a moment."
BUSY = "⏳ I'm still working through your earlier messages — please try again in a moment."
NOT_PROCESSED = "Hermit is restarting and did not get to this message — please send it again."
Chunker = Callable[[str, int, "int | None"], list[str]]
RunTurn = Callable[[Callable[[AgentEvent], None]], Awaitable[TurnResult]]


async def send_safely(channel: Channel, item: Outbound) -> bool:
    """Deliver one item; a channel failure is logged with context and reported as False."""
    try:
        await channel.send(item)
        return True
    except Exception:  # noqa: BLE001 - supervision boundary: one channel's failure must not stop the bus
        log.exception("channel %s/%s could not deliver %s", channel.name, channel.account_id, type(item).__name__)
        return False


async def deliver_text(channel: Channel, target: Target, text: str, chunk: Chunker,
                       kind: str = "reply") -> int:
    """Send `text` as one or more messages within the channel's limits; returns how many were sent."""
    caps = channel.capabilities
    sent = 0
    for piece in chunk(text, caps.max_chars, caps.max_lines):
        if await send_safely(channel, OutboundMessage(target, piece, kind)):  # type: ignore[arg-type]
            sent += 1
    return sent


def _forward_events(streaming: bool, target: Target, turn_id: str, outbox: asyncio.Queue[Outbound | None],
                    streamed: list[bool]) -> Callable[[AgentEvent], None]:
    """The turn's event sink: reply text and tool activity go to a streaming channel as they happen
    (`streamed[0]` says whether any text went), nothing to the others."""
    def on_event(event: AgentEvent) -> None:
        if not streaming:
            return
        if isinstance(event, TextChunk) and event.text:
            streamed[0] = True
            outbox.put_nowait(StreamDelta(target, turn_id, event.text))
        elif isinstance(event, ToolStarted):
            outbox.put_nowait(ToolActivity(target, turn_id, event.call_id, event.name, "running"))
        elif isinstance(event, ToolFinished):
            outbox.put_nowait(ToolActivity(target, turn_id, event.run.call.id, event.run.call.name,
                                           "failed" if event.run.result.is_error else "done"))
    return on_event


async def run_and_reply(channel: Channel, target: Target, turn_id: str, run: RunTurn,
                        chunk: Chunker, may_send: Callable[[], Awaitable[bool]] | None = None,
                        hint_for: Callable[[HermitError], str | None] | None = None) -> TurnResult | None:
    """Run one turn for a channel conversation and deliver what it produced. `may_send`, asked once the turn has
    ended and before its reply goes: whether the sender may still have it (hermit.yaml or the pairing approvals
    may have changed while the turn ran); when not, the reply stays in the transcript only. `hint_for`: a better
    hint than a failed turn's own, if it has one (the fake provider's start command, models/fake_start.py)."""
    caps = channel.capabilities
    outbox: asyncio.Queue[Outbound | None] = asyncio.Queue()

    async def pump() -> None:  # one consumer keeps the channel's items in the order they were made
        while (item := await outbox.get()) is not None:
            await send_safely(channel, item)

    streamed = [False]
    on_event = _forward_events(caps.streaming, target, turn_id, outbox, streamed)
    pumping = asyncio.create_task(pump())
    if caps.typing:
        outbox.put_nowait(Typing(target, True))
    result: TurnResult | None = None
    status = "done"
    hint: str | None = None
    try:
        result = await run(on_event)
    except TurnCancelled:
        status = "interrupted"
    except Exception as e:  # noqa: BLE001 - supervision boundary: the user gets an apology, the log the detail
        log.error("turn %s for %s/%s failed: %s", turn_id, target.channel, target.peer_id, e,
                  exc_info=not hasattr(e, "hint"))
        status = "error"
        better = hint_for(e) if hint_for is not None and isinstance(e, HermitError) else None
        hint = mask(better or str(e.hint)) if isinstance(e, HermitError) and (better or e.hint) else None
    if status == "error":
        for piece in chunk(APOLOGY, caps.max_chars, caps.max_lines):
            outbox.put_nowait(OutboundMessage(target, piece, "error"))
    elif result is not None and not result.delivered:
        status = "silent"
    elif result is not None and not streamed[0] and may_send is not None and not await may_send():
        status = "silent"  # revoked while the turn ran: no reply made for who they were at its start
    elif result is not None and not streamed[0]:  # not streamed: a reply from /new, or a plain channel
        for piece in chunk(result.reply, caps.max_chars, caps.max_lines):
            outbox.put_nowait(OutboundMessage(target, piece, "reply"))
    if caps.typing:
        outbox.put_nowait(Typing(target, False))
    outbox.put_nowait(TurnEnd(target, turn_id, status, hint))  # type: ignore[arg-type]
    outbox.put_nowait(None)
    await pumping
    return result
