"""A Discord edit that comes while its message's file downloads still decides the text that runs.

The adapter hands a message on only once its attachments are saved, and discord.py runs MESSAGE_CREATE and
MESSAGE_UPDATE as tasks of their own: an edit made while the file downloaded (a photo with a PIN in its text, the
PIN at once edited out) reached the gateway first, found no message to change, and the message then ran with its
first text — answered and kept in the channel's transcript. (reaudit16: edits racing the turn's start.)

Real parts: DiscordChannel (discord.py) against the fake Discord gateway and a fake CDN on 127.0.0.1 (its download
held open until the edit is in), the gateway's Bus and an AgentRuntime.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from channelhelpers import FAST, run, until
from fakes.fake_discord import BOT_ID, GUILD_ID, TEXT_CHANNEL, FakeDiscord, _now, patch_discord, unpatch, user
from gatewayhelpers import allow_all, last_user_text, route_dm_main_group_own, runtime
from hermit.channels.discord import DiscordChannel
from hermit.config.schema import DiscordAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest

TOKEN = "discord-test-token"
ANN = "600000000000000001"
PIN = "4711-2290"
MID = "700000000000000777"


class SlowCdn(FakeDiscord):
    """Serves attachments under /cdn/; a download is answered only once `go` is set (`asked`: it has begun)."""

    def __init__(self) -> None:
        super().__init__(TOKEN)
        self.asked, self.go = asyncio.Event(), asyncio.Event()

    def routes(self, app: Any) -> None:
        super().routes(app)
        app.router.add_get("/cdn/{name}", self._cdn)

    async def _cdn(self, request: Any) -> Any:
        from aiohttp import web

        self.asked.set()
        await self.go.wait()
        return web.Response(body=b"\xff\xd8\xff\xe0 a photo", content_type="image/jpeg")


def message(fake: SlowCdn, mid: str, text: str, *, edited: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": mid, "channel_id": TEXT_CHANNEL, "guild_id": GUILD_ID, "author": user(ANN, "ann"), "content": text,
        "timestamp": _now(), "edited_timestamp": _now() if edited else None, "tts": False,
        "mention_everyone": False, "mentions": [user(BOT_ID, "hermit", bot=True)], "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": False, "type": 0}
    if not edited:
        url = f"{fake.base_url}/cdn/photo.jpg"
        out["attachments"] = [{"id": "710000000000000001", "filename": "photo.jpg", "size": 15, "url": url,
                               "proxy_url": url, "content_type": "image/jpeg"}]
    return out



def scenario(tmp: Path, edited: str) -> tuple[list[str], str]:
    """Ann's photo with her PIN (message MID) is downloading when she edits message `edited`; returns what the
    model was asked and the transcripts."""
    asked: list[str] = []

    def model(req: ModelRequest) -> str:
        asked.append(last_user_text(req))
        return "ok"

    rt = runtime(tmp / "home", model)

    async def main() -> None:
        fake = SlowCdn()
        await fake.start()
        old = patch_discord(fake)
        ch = DiscordChannel("default", DiscordAccountConfig(), TOKEN, inbox_dir=tmp / "inbox",
                            state_dir=tmp / "dstate", policy=FAST, reconnect_max_delay=0.1)
        bus = Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
                  channels={(ch.name, ch.account_id): ch}, chunk=split_chunks)
        try:
            await ch.start(bus)
            await fake.wait_for(lambda: ch.status().connected)
            await fake._dispatch("MESSAGE_CREATE", message(fake, MID, f"<@{BOT_ID}> my PIN is {PIN}"))
            await fake.asked.wait()
            await fake._dispatch("MESSAGE_UPDATE", message(fake, edited, f"<@{BOT_ID}> never mind",
                                                           edited=True))
            await until(lambda: bus.counts["ignored"] == 1)  # nothing in the gateway to change yet
            fake.go.set()
            await until(lambda: bus.counts["queued"] == 1)
            assert await bus.drain(20)
        finally:
            fake.go.set()
            await ch.stop()
            unpatch(old)
            await fake.stop()
            rt.close()

    run(main)
    return asked, "".join(p.read_text() for p in rt.agent.sessions_dir.glob("*.jsonl"))


def test_an_edit_while_the_file_downloads_decides_the_text(tmp_path: Path) -> None:
    asked, transcripts = scenario(tmp_path, MID)
    assert len(asked) == 1 and asked[0].startswith("never mind"), asked
    assert PIN not in transcripts


def test_an_early_edit_of_another_message_changes_nothing(tmp_path: Path) -> None:
    # (Only its author edits a Discord message: discord.py names the author of the message it cached.)
    asked, transcripts = scenario(tmp_path, "700000000000000778")
    assert len(asked) == 1 and asked[0].startswith(f"my PIN is {PIN}"), asked
    assert "never mind" not in transcripts
