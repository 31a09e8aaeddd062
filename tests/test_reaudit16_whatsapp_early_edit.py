"""A WhatsApp edit that comes before its message is handed on still decides the text that runs.

0a5829c made an edit (`type: edit`) change a message waiting for its turn. But the channel hands a photo on only
once its media is downloaded, and each webhook is a request of its own: an edit of the caption that came while the
photo downloaded (or before a delivery Meta retried) found no message in the gateway and changed nothing, and
the photo then ran with its first caption — a PIN typed and at once edited out was answered and kept in the
transcript. (reaudit16: edits racing the turn's start.)

Real parts: WhatsAppChannel behind its signed webhook (HTTP on 127.0.0.1), the fake Graph API (its media download
held open until the edit is in), the gateway's Bus and an AgentRuntime.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from channelhelpers import FAST, run, serve_asgi, until
from fakes.fake_whatsapp import PHONE_NUMBER_ID, SlowMedia, sign, webhook_body
from gatewayhelpers import allow_all, last_user_text, route_dm_main_group_own, runtime
from hermit.channels.early_edits import EarlyEdits
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest

SECRET = "app-secret"
SENDER, OTHER = "15551234", "15559999"
PIN = "4711-2290"


def photo(mid: str, caption: str) -> dict[str, Any]:
    return {"from": SENDER, "id": mid, "timestamp": str(int(time.time())), "type": "image",
            "image": {"caption": caption, "mime_type": "image/jpeg", "id": "M1", "sha256": "00"}}


def edit(original: str, eid: str, text: str, *, sender: str = SENDER) -> dict[str, Any]:
    return {"from": sender, "id": eid, "timestamp": str(int(time.time())), "type": "edit",
            "edit": {"original_message_id": original,
                     "message": {"type": "image", "image": {"caption": text, "mime_type": "image/jpeg", "id": "M1"}}}}


def scenario(tmp: Path, order: str, *edits: dict[str, Any]) -> tuple[list[str], str]:
    """`during`: the photo's webhook is in, its media downloading, when the `edits` come; `before`: the edits come
    first and then the photo (a delivery retried later). Returns what the model was asked, and the transcripts."""
    asked: list[str] = []

    def model(req: ModelRequest) -> str:
        asked.append(last_user_text(req))
        return "ok"

    rt = runtime(tmp / "home", model)

    async def main() -> None:
        fake = SlowMedia()
        await fake.start()
        fake.media["M1"] = (b"\xff\xd8\xff\xe0 a photo", "image/jpeg")
        cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=fake.base_url)
        ch = WhatsAppChannel("personal", cfg, access_token="EAAG-test", app_secret=SECRET, verify_token="v",
                             inbox_dir=tmp / "inbox", state_dir=tmp / "state", policy=FAST)
        bus = Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
                  channels={(ch.name, ch.account_id): ch}, chunk=split_chunks)

        async def post(c: httpx.AsyncClient, url: str, message: dict[str, Any]) -> None:
            body = json.dumps(webhook_body(message)).encode()
            assert (await c.post(url, content=body, headers=sign(SECRET, body))).status_code == 200

        try:
            await ch.start(bus)
            async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient() as c:
                url = base + "/hooks/whatsapp/personal/"
                if order == "during":
                    sent = asyncio.create_task(post(c, url, photo("wamid.P1", f"my PIN is {PIN}")))
                    await fake.asked.wait()
                for n, e in enumerate(edits, 1):
                    await post(c, url, e)
                    await until(lambda n=n: bus.counts["ignored"] == n)  # nothing in the gateway to change yet
                fake.go.set()
                if order == "during":
                    await sent
                else:
                    await post(c, url, photo("wamid.P1", f"my PIN is {PIN}"))
                await until(lambda: bus.counts["queued"] == 1)
                assert await bus.drain(20)
        finally:
            fake.go.set()
            await ch.stop()
            await fake.stop()
            rt.close()

    run(main)
    return asked, "".join(p.read_text() for p in rt.agent.sessions_dir.glob("*.jsonl"))


def test_an_edit_while_the_photo_downloads_decides_its_caption(tmp_path: Path) -> None:
    asked, transcripts = scenario(tmp_path, "during", edit("wamid.P1", "wamid.E1", "never mind"))
    assert len(asked) == 1 and "never mind" in asked[0] and PIN not in asked[0]
    assert PIN not in transcripts


def test_an_edit_delivered_before_its_message_decides_its_text(tmp_path: Path) -> None:
    asked, transcripts = scenario(tmp_path, "before", edit("wamid.P1", "wamid.E1", "never mind"))
    assert len(asked) == 1 and "never mind" in asked[0] and PIN not in asked[0]
    assert PIN not in transcripts


def test_an_early_edit_from_someone_else_changes_nothing(tmp_path: Path) -> None:
    asked, transcripts = scenario(tmp_path, "during", edit("wamid.P1", "wamid.E1", "send 0000", sender=OTHER))
    assert len(asked) == 1 and PIN in asked[0] and "0000" not in transcripts


def test_early_edits_are_bounded_per_sender_and_in_all() -> None:
    kept = EarlyEdits(max_kept=4, per_sender=2)
    kept.keep("ann", "m1", "ann's edit")
    for n in range(10):  # a flood of made-up ids from one sender evicts only their own
        kept.keep("eve", f"x{n}", "junk")
    assert kept.newest("ann", "m1") == "ann's edit" and kept.newest("ann", "m2") is None
    assert kept.newest("eve", "x9") == "junk" and kept.newest("eve", "x0") is None
    kept.keep("ann", "m1", "ann's second edit")  # the last edit wins
    assert kept.newest("ann", "m1") == "ann's second edit"
    for n in range(10):  # many senders: the oldest go first, at most max_kept in all
        kept.keep(f"s{n}", "m", str(n))
    assert [kept.newest(f"s{n}", "m") for n in range(10)] == [None] * 6 + ["6", "7", "8", "9"]
    assert kept.newest("ann", "m1") is None
