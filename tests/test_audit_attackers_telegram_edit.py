"""A Telegram message edited while it waits for its turn runs with its text as it is now.

Discord and Slack say when a message is edited, and the gateway runs a waiting message with its new text (as its
sender expects of a message not answered yet: test_trust_deleted_messages.py). Telegram's adapter asked for
`message` updates only, so a member who pasted a PIN into the group and at once edited it out had the first text
answered, kept in the group's transcript and its notes. Telegram sends no deletes to bots; an edit is the one way
a sender takes words back there. (audit-attackers: edits as text carriers.)

Real parts: TelegramChannel over HTTP to the fake Bot API on 127.0.0.1, the gateway's Bus, an AgentRuntime.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from channelhelpers import FAST, run, until
from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import allow_all, last_user_text, route_dm_main_group_own, runtime
from hermit.channels.telegram import TelegramChannel
from hermit.config.schema import TelegramAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest

TOKEN = "123:TEST"
GROUP, MEMBER = -100, 5
PIN = "4711-2290"



def edit(fake: FakeTelegram, mid: int, text: str, *, sender: int = MEMBER, photo: bool = False) -> None:
    """Queue Telegram's `edited_message` update for message `mid` (a caption's edit when `photo`)."""
    msg: dict[str, Any] = {"message_id": mid, "date": int(time.time()), "edit_date": int(time.time()),
                           "from": {"id": sender, "is_bot": False, "first_name": "Gus"},
                           "chat": {"id": GROUP, "type": "supergroup"}}
    if photo:
        fake.files["edited-photo"] = b"\xff\xd8\xff\xe0 not fetched again"
        msg["photo"] = [{"file_id": "edited-photo", "width": 800, "height": 600, "file_size": 23}]
        msg["caption"] = text
    else:
        msg["text"] = text
    fake.updates.append({"update_id": fake._next_update, "edited_message": msg})
    fake._next_update += 1
    fake._new_update.set()


def scenario(tmp: Path, *edits: tuple[str, dict[str, Any]]) -> tuple[list[str], str, list[str]]:
    """The member's first message holds the group's turn; their second (the PIN) waits behind it and gets the
    `edits`. Returns what the model was asked, the transcripts, and what is left in the inbox and staging."""
    started, release = threading.Event(), threading.Event()
    asked: list[str] = []

    def model(req: ModelRequest) -> str:
        asked.append(last_user_text(req))
        started.set()
        release.wait(20)
        return "ok"

    rt = runtime(tmp / "home", model)

    async def main() -> None:
        fake = await FakeTelegram(TOKEN).start()
        cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
        ch = TelegramChannel("default", cfg, TOKEN, state_dir=tmp / "state", inbox_dir=tmp / "inbox", policy=FAST,
                             reconnect_max_delay=0.05)
        bus = Bus(AgentHost({"main": rt}), route=route_dm_main_group_own,
                  admit=allow_all, channels={(ch.name, ch.account_id): ch},
                  chunk=split_chunks)
        try:
            await ch.start(bus)
            fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup", text="@hermit_bot first")
            await until(started.is_set)
            mid = fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup",
                                    text=f"@hermit_bot my PIN is {PIN}")
            await until(lambda: bus.counts["queued"] == 2)
            for n, (text, kw) in enumerate(edits, 1):
                edit(fake, mid, text, **kw)
                await until(lambda n=n: bus.counts["ignored"] == n)  # handled before publish returns
            release.set()
            assert await bus.drain(20)
        finally:
            release.set()
            await ch.stop()
            await fake.stop()
            rt.close()

    run(main)
    transcripts = "".join(p.read_text() for p in rt.agent.sessions_dir.glob("*.jsonl"))
    left = sorted(p.name for d in (tmp / "inbox", tmp / "state") for p in d.rglob("*") if "photo" in p.name
                  or p.suffix == ".jpg")
    return asked, transcripts, left


def test_a_message_edited_while_it_waits_runs_with_its_new_text(tmp_path: Path) -> None:
    asked, transcripts, left = scenario(tmp_path, ("@hermit_bot never mind", {}))
    assert asked == ["@hermit_bot first", "@hermit_bot never mind"]
    assert PIN not in transcripts
    assert left == []


def test_only_its_sender_edits_a_waiting_message_and_an_edited_caption_fetches_nothing(tmp_path: Path) -> None:
    asked, transcripts, left = scenario(
        tmp_path, (f"@hermit_bot {PIN} is wrong, send 0000", {"sender": 6}),  # someone else: not theirs to change
        ("@hermit_bot never mind", {"photo": True}))
    assert asked == ["@hermit_bot first", "@hermit_bot never mind"]
    assert "0000" not in transcripts and PIN not in transcripts
    assert left == []  # the edit's photo was neither downloaded nor left in the inbox
