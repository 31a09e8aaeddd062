"""A Telegram edit of a waiting message must reach the poller's journal too, or a crash brings the old text back.

Telegram's adapter journals every message it takes (`state.json`, channels/telegram_state.py) until its turn ends,
so a gateway killed while a message waits hands it over again after the restart. be97c79 made an
`edited_message` update change the waiting message in the bus — but not its journaled copy. A member who pasted
a PIN into the group and at once edited it out still had the PIN on disk in state.json, and a kill -9 (or a
crash, an OOM kill) before that message's turn ended had the restarted gateway replay the first text: the PIN
was answered and kept in the group's transcript after all. (reaudit16: edits racing a kill.)

Real parts: TelegramChannel over HTTP to the fake Bot API on 127.0.0.1, its state.json on disk, the gateway's Bus,
AgentRuntimes; the restart is a second channel, bus and runtime on the same state dir.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from channelhelpers import FAST, run, until
from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import allow_all, last_user_text, route_dm_main_group_own, runtime
from hermit.channels.telegram import TelegramChannel
from hermit.channels.telegram_state import token_dir
from hermit.config.schema import TelegramAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest

TOKEN = "123:TEST"
GROUP, MEMBER, OTHER = -100, 5, 6
PIN = "4711-2290"



def edit(fake: FakeTelegram, mid: int, text: str, *, sender: int = MEMBER) -> None:
    msg = {"message_id": mid, "date": int(time.time()), "edit_date": int(time.time()), "text": text,
           "from": {"id": sender, "is_bot": False, "first_name": "Gus"}, "chat": {"id": GROUP, "type": "supergroup"}}
    fake.updates.append({"update_id": fake._next_update, "edited_message": msg})
    fake._next_update += 1
    fake._new_update.set()


def channel(fake: FakeTelegram, tmp: Path) -> TelegramChannel:
    cfg = TelegramAccountConfig(api_base=fake.base_url, poll_timeout_seconds=1)
    return TelegramChannel("default", cfg, TOKEN, state_dir=tmp / "state", inbox_dir=tmp / "inbox", policy=FAST,
                           reconnect_max_delay=0.05)


def crash_after_edit(tmp: Path, *edits: tuple[str, int]) -> tuple[str, list[str], str]:
    """The member's first message holds the group's turn, their second (the PIN) waits behind it and gets the
    `edits` ((text, sender)); then the gateway dies before either turn ends (nothing marks them done) and a new
    one starts on the same state dir. Returns state.json as the crash left it, what the restarted gateway's model
    was asked, and its transcripts."""
    started, release = threading.Event(), threading.Event()

    def stuck(req: ModelRequest) -> str:
        started.set()
        release.wait(30)
        return "ok"

    asked: list[str] = []

    def model(req: ModelRequest) -> str:
        asked.append(last_user_text(req))
        return "ok"

    rt1, rt2 = runtime(tmp / "home1", stuck), runtime(tmp / "home2", model)
    left = ""

    async def main() -> None:
        nonlocal left
        fake = await FakeTelegram(TOKEN).start()
        ch = channel(fake, tmp)
        bus = Bus(AgentHost({"main": rt1}), route=route_dm_main_group_own, admit=allow_all,
                  channels={(ch.name, ch.account_id): ch}, chunk=split_chunks)
        try:
            await ch.start(bus)
            fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup", text="@hermit_bot first")
            await until(started.is_set)
            mid = fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup",
                                    text=f"@hermit_bot my PIN is {PIN}")
            await until(lambda: bus.counts["queued"] == 2)
            for n, (text, sender) in enumerate(edits, 1):
                edit(fake, mid, text, sender=sender)
                await until(lambda n=n: bus.counts["ignored"] == n)  # taken and journaled before publish returns
            # The crash: whatever state.json holds now is what the next start replays.
            left = (token_dir(tmp / "state", TOKEN) / "state.json").read_text(encoding="utf-8")
        finally:
            await ch.stop()  # the poller's lock back; nothing is marked done (the turns never ended)
            await fake.stop()
        fake2 = await FakeTelegram(TOKEN).start()
        ch2 = channel(fake2, tmp)
        bus2 = Bus(AgentHost({"main": rt2}), route=route_dm_main_group_own, admit=allow_all,
                   channels={(ch2.name, ch2.account_id): ch2}, chunk=split_chunks)
        try:
            await ch2.start(bus2)
            await until(lambda: bus2.counts["queued"] == 2)
            assert await bus2.drain(20)
        finally:
            await ch2.stop()
            await fake2.stop()

    try:
        run(main)
    finally:
        release.set()
        rt1.close()
        rt2.close()
    transcripts = "".join(p.read_text() for p in rt2.agent.sessions_dir.glob("*.jsonl"))
    return left, asked, transcripts


def test_a_crash_after_an_edit_of_a_waiting_message_replays_its_new_text(tmp_path: Path) -> None:
    left, asked, transcripts = crash_after_edit(tmp_path, ("@hermit_bot never mind", MEMBER))
    assert PIN not in left  # the journal on disk holds the text as it is now
    assert "".join(asked).count("never mind") == 1 and PIN not in "".join(asked)
    assert PIN not in transcripts


def test_an_edit_from_someone_else_changes_no_journaled_message(tmp_path: Path) -> None:
    # Telegram lets only a message's sender edit it; an update that says otherwise changes nothing, on disk too.
    left, asked, transcripts = crash_after_edit(tmp_path, ("@hermit_bot send 0000", OTHER))
    assert "0000" not in "".join(asked) and "0000" not in transcripts
    assert PIN in "".join(asked)  # the member's own message, as they sent it
