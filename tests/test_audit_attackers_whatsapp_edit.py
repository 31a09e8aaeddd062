"""A WhatsApp message edited while it waits for its turn runs with its text as it is now.

For numbers shared with the WhatsApp Business app ("coexistence") the Cloud API says when a message is edited
(`type: edit`, naming the original message), as it says when one is deleted (`revoke`, which Hermit honours). The
edit was dropped with reactions and locations, so a PIN someone typed and at once edited out was answered and
kept in their session's transcript. (audit-attackers: edits as text carriers.)

Real parts: WhatsAppChannel behind its signed webhook (HTTP on 127.0.0.1), the fake Graph API, the gateway's Bus
and an AgentRuntime.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from channelhelpers import FAST, run, serve_asgi, until
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, text_message, webhook_body
from gatewayhelpers import allow_all, last_user_text, route_dm_main_group_own, runtime
from hermit.channels.webhook import asgi_app
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.config.schema import WhatsAppAccountConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest

SECRET = "app-secret"
SENDER = "15551234"
PIN = "4711-2290"



def edit(original: str, eid: str, text: str, *, sender: str = SENDER, caption: bool = False) -> dict[str, Any]:
    inner: dict[str, Any] = ({"type": "image", "image": {"caption": text, "mime_type": "image/jpeg", "id": "M9",
                                                           "sha256": "00"}} if caption
                             else {"type": "text", "text": {"body": text}})
    return {"from": sender, "id": eid, "timestamp": str(int(time.time())), "type": "edit",
            "edit": {"original_message_id": original, "message": inner}}


def scenario(tmp: Path, *edits: dict[str, Any]) -> tuple[list[str], str, list[str]]:
    """The sender's first message holds the turn; their second (the PIN) waits behind it and gets the `edits`.
    Returns what the model was asked, the transcripts, and the files in the inbox."""
    started, release = threading.Event(), threading.Event()
    asked: list[str] = []

    def model(req: ModelRequest) -> str:
        asked.append(last_user_text(req))
        started.set()
        release.wait(20)
        return "ok"

    rt = runtime(tmp / "home", model)

    async def main() -> list[str]:
        fake = await FakeWhatsApp().start()
        fake.media["M9"] = (b"\xff\xd8\xff\xe0 an edited photo's bytes", "image/jpeg")  # fetched only if asked
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
                await post(c, url, text_message(SENDER, "first", "wamid.A1"))
                await until(started.is_set)
                await post(c, url, text_message(SENDER, f"my PIN is {PIN}", "wamid.A2"))
                await until(lambda: bus.counts["queued"] == 2)
                for n, e in enumerate(edits, 1):
                    await post(c, url, e)
                    await until(lambda n=n: bus.counts["ignored"] == n)
                release.set()
                assert await bus.drain(20)
            return sorted(p.name for p in (tmp / "inbox").rglob("*") if p.is_file())
        finally:
            release.set()
            await ch.stop()
            await fake.stop()
            rt.close()

    fetched = run(main)
    transcripts = "".join(p.read_text() for p in rt.agent.sessions_dir.glob("*.jsonl"))
    return asked, transcripts, fetched


def test_a_message_edited_while_it_waits_runs_with_its_new_text(tmp_path: Path) -> None:
    asked, transcripts, _ = scenario(tmp_path, edit("wamid.A2", "wamid.E1", "never mind"))
    assert asked == ["first", "never mind"]
    assert PIN not in transcripts


def test_only_its_sender_edits_it_and_an_edited_caption_fetches_nothing(tmp_path: Path) -> None:
    asked, transcripts, fetched = scenario(
        tmp_path, edit("wamid.A2", "wamid.E1", "send 0000 instead", sender="15559999"),
        edit("wamid.A2", "wamid.E2", "never mind", caption=True))
    assert asked == ["first", "never mind"]
    assert "0000" not in transcripts and PIN not in transcripts
    assert fetched == []  # the edit's photo was not downloaded again: no file staged or filed for it
