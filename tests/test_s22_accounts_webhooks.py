"""Session 22, t14: a WhatsApp account removed or turned off while the gateway runs fetches nothing, live.

The household's `shop` number was removed from hermit.yaml (or set `enabled: false`) with the gateway running. Its
webhook route stayed mounted until a restart: the messages were refused by access control, but only after the adapter
had looked the media up and downloaded it from Meta with the account's token — for anyone still writing to the
number. Now each webhook answers only while the config in force has its account on (gateway/webhook_gate.py): 404
before anything is parsed or fetched, as a restarted gateway answers; turned on again, it answers at once.

Real `hermit gateway run`, the real WhatsApp adapter, the fake Graph API on 127.0.0.1 (its media lookups counted),
signed webhooks posted as Meta posts them, the fake model provider.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from channeldrivers import WhatsAppDriver
from channelhelpers import run
from fakes.fake_whatsapp import sign, webhook_body
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER, STRANGER = "15550001001", "15550009009"


class Looked(dict[str, tuple[bytes, str]]):
    """The fake's media, counting every lookup of an id (the media info and the download both look)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)


def photo(n: int) -> dict[str, Any]:
    return {"from": STRANGER, "id": f"wamid.PHOTO{n}", "timestamp": str(int(time.time())), "type": "image",
            "image": {"caption": "look", "mime_type": "image/jpeg", "id": "M1", "sha256": "00"}}


def edit(home: Path, change: Any) -> None:
    raw = yaml.safe_load((home / "hermit.yaml").read_text())
    change(raw["channels"]["whatsapp"]["accounts"])
    tmp = home / "hermit.yaml.tmp"
    tmp.write_text(yaml.safe_dump(raw), encoding="utf-8")
    os.replace(tmp, home / "hermit.yaml")


@pytest.mark.parametrize("how", ["removed", "turned off"])
def test_a_whatsapp_account_removed_or_turned_off_live_answers_its_webhooks_without_fetching(
        tmp_path: Path, how: str) -> None:
    policies = {"home": {"owners": [OWNER], "dm_policy": "allowlist"}, "shop": {"dm_policy": "pairing"}}

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            async with stack(tmp_path, "whatsapp", provider, policies) as (d, _gw):
                assert isinstance(d, WhatsAppDriver)
                fake = d.fakes["shop"]
                fake.media = media = Looked()
                media["M1"] = (b"\xff\xd8\xff\xe0 a photo", "image/jpeg")

                async def post(n: int) -> httpx.Response:
                    body = json.dumps(webhook_body(photo(n), phone_number_id=fake.phone_number_id)).encode()
                    return await d.post("shop", body, sign("secret-shop", body))

                assert (await post(1)).status_code == 200  # on: a stranger's photo is looked up (then refused)
                await until(lambda: media.lookups >= 2, "the photo's lookup and download")
                seen["on"] = media.lookups
                if how == "removed":
                    edit(tmp_path, lambda accounts: accounts.pop("shop"))
                else:
                    edit(tmp_path, lambda accounts: accounts["shop"].update(enabled=False))
                media.lookups = 0
                seen["off_post"] = (await post(2)).status_code
                async with httpx.AsyncClient() as c:
                    verify = await c.get(f"{d.gateway_url}/hooks/whatsapp/shop/", params={
                        "hub.mode": "subscribe", "hub.verify_token": "verify-shop", "hub.challenge": "42"})
                seen["off_verify"] = verify.status_code
                await d.dm("home", OWNER, "still here?")  # the other account answers, as before
                await until(lambda: d.texts("home", OWNER), "the home account's reply")
                seen["off_lookups"] = media.lookups
                if how == "turned off":  # on again, same settings: the route answers at once
                    edit(tmp_path, lambda accounts: accounts["shop"].update(enabled=True))
                    seen["again"] = (await post(3)).status_code
                    await until(lambda: media.lookups >= 2, "the photo's lookup once on again")
                seen["asked"] = [json.dumps(r.body) for r in provider.requests]
        return seen

    seen = run(main, timeout=PROC_TIMEOUT * 2)
    assert seen["on"] >= 2
    assert seen["off_lookups"] == 0  # nothing looked up, nothing downloaded with the account's token
    assert seen["off_post"] == 404 and seen["off_verify"] == 404
    assert not any("look" in text and STRANGER in text for text in seen["asked"])
    if how == "turned off":
        assert seen["again"] == 200
    log = (tmp_path / "gateway.stderr").read_text()
    assert "whatsapp shop: webhook answered 404" in log
