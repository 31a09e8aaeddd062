"""A Telegram channel in its own process, for the SIGKILL test: `telegram_runner.py API STATE hold|answer LOG`.

"hold" publishes and never answers (the test kills it); "answer" echoes each message and ends the turn.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import replace
from pathlib import Path

from hermit.channels.base import InboundMessage, OutboundMessage, PublishOutcome, Target, TurnEnd
from hermit.channels.retry import DEFAULT_POLICY
from hermit.channels.telegram import TelegramChannel
from hermit.config.schema import TelegramAccountConfig


async def main(api: str, state: Path, mode: str, log: Path) -> None:
    todo: asyncio.Queue[InboundMessage] = asyncio.Queue()

    class Sink:
        async def publish(self, msg: InboundMessage) -> PublishOutcome:
            with log.open("a") as f:
                f.write(json.dumps({"text": msg.text, "id": msg.message_id}) + "\n")
            await todo.put(msg)
            return "queued"

    cfg = TelegramAccountConfig(api_base=api, poll_timeout_seconds=1)
    ch = TelegramChannel("default", cfg, "123:TEST", state_dir=state, inbox_dir=state / "inbox",
                         policy=replace(DEFAULT_POLICY, max_retries=2, base_delay=0.01))
    await ch.start(Sink())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def answer() -> None:
        while True:
            msg = await todo.get()
            if mode == "answer":
                await ch.send(OutboundMessage(Target.of(msg), f"echo: {msg.text}"))
                await ch.send(TurnEnd(Target.of(msg), "t", "done"))

    worker = asyncio.create_task(answer())
    await stop.wait()
    worker.cancel()
    await ch.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])))
