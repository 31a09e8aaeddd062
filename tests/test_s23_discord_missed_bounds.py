"""The bounds of looking for Discord deletes missed while away (channels/discord_missed.py): a held message past the
history read is left unjudged (never called deleted), the newest held ones are judged when the history ends, and the
record keeps the newest messages of the most recent channels. discord.py's REST client against the fake Discord."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channelhelpers import run
from fakes.fake_discord import FakeDiscord, _now, patch_discord, unpatch, user
from hermit.channels import discord_missed
from hermit.channels.discord_missed import PAGES, PER_CHANNEL, Held, HeldChannel, gone

CHANNEL = "800000000000000010"


def message(mid: int) -> dict[str, Any]:
    return {"id": str(mid), "channel_id": CHANNEL, "author": user("600000000000000001", "ann"), "content": f"m{mid}",
            "timestamp": _now(), "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [],
            "mention_roles": [], "attachments": [], "embeds": [], "pinned": False, "type": 0}


def test_only_what_the_history_read_covers_is_judged() -> None:
    base = 700000000000001000
    total = PAGES * 100 + 200  # more than one look reads

    async def main() -> tuple[list[str], list[str]]:
        import discord

        fake = await FakeDiscord().start()
        old = patch_discord(fake)
        client = discord.Client(intents=discord.Intents.default())
        try:
            await client.login(fake.token)
            fake.messages[CHANNEL] = {str(base + i): message(base + i) for i in range(total)}
            held = {str(base): "a", str(base + 10): "a", str(base + total - 50): "a"}
            for mid in (str(base), str(base + total - 50)):
                del fake.messages[CHANNEL][mid]  # the first and a late one deleted
            far = await gone(client, HeldChannel(CHANNEL, None, held))
            # The history ends before the newest held message: it was deleted, as were those after it.
            near = {str(base + total - 2): "a", str(base + total + 5): "a"}
            ended = await gone(client, HeldChannel(CHANNEL, None, near))
            assert far is not None and ended is not None
            return far.deleted, ended.deleted
        finally:
            await client.close()
            unpatch(old)
            await fake.stop()

    far, ended = run(main)
    assert far == [str(base)]  # the late deleted one lies past the 500 messages read: not judged
    assert ended == [str(base + total + 5)]


def test_the_record_keeps_the_newest_of_the_recent_channels_and_survives_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "held.json"
    held = Held(path)
    for i in range(PER_CHANNEL + 20):
        held.add(CHANNEL, None, str(1000 + i), "a")
    for c in range(discord_missed.CHANNELS + 3):
        held.add(str(2000 + c), "9", "1", "b")
    again = Held(path).channels()
    assert len(again) == discord_missed.CHANNELS and CHANNEL not in {c.channel_id for c in again}
    held.add(CHANNEL, None, "5000", "a")  # written to again: kept, the channel least recently written to goes
    kept = {c.channel_id: c for c in Held(path).channels()}
    assert CHANNEL in kept and "2000" not in kept and path.stat().st_mode & 0o777 == 0o600
    path.write_text("{not json", encoding="utf-8")
    assert Held(path).channels() == []  # read as nothing held (logged), never a crash at start
