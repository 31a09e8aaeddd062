"""Session 19 (t9), WhatsApp users without a number: a user who adopted a WhatsApp username arrives with no `from`,
only a business-scoped `from_user_id` (BSUID; Meta's 2026 rollout). Routing refused each such message with an ERROR
("could not route whatsapp/personal : empty dm id in a session key") that said neither what happened nor what to do.
The adapter now drops them with one clear line per user an hour, before anything else reads them: never one shared
sender "", never let in by an id-less match, never answered. Real `hermit gateway run`, the real WhatsApp adapter
(signed webhooks to the gateway), the fake Graph API, the scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit19_who import (
    SCRIPT,
    check_owner_history_clean,
    check_spoofers_got_nothing,
    gateway,
    requests_for,
    until,
)
from channeldrivers import WhatsAppDriver
from channelhelpers import run
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_audit19_who_whatsapp import OWNER, post, text, to, value

DROPPED = "ignored a message from a WhatsApp user who shows a username instead of their phone number"


def test_users_without_a_number_are_dropped_with_one_clear_line_each(tmp_path: Path) -> None:
    home = tmp_path / "home"

    async def body() -> tuple[FakeProvider, dict[str, list[str]]]:
        with FakeProvider(SCRIPT) as provider:
            driver = WhatsAppDriver(["personal"])
            pnid = driver.fakes["personal"].phone_number_id

            def hidden(user_id: str | None, words: str, kind: str = "text") -> dict[str, Any]:
                m = text(None, words, **({"from_user_id": user_id} if user_id else {}))
                if kind != "text":  # a deleted message: no body, the id of the one it deletes
                    m = {**m, "type": kind, kind: {"original_message_id": "wamid.who.x"}}
                contact: dict[str, Any] = {"profile": {"name": "Ann", "username": "ann"}}
                return value(pnid, messages=[m], contacts=[{**contact, "user_id": user_id} if user_id else contact])

            async with gateway(home, driver, provider, {"owners": [OWNER], "dm_policy": "open"}):
                await post(driver, value(pnid, messages=[text(OWNER, "OWNER-SAYS remember quoll QUOLL-CHAT-7733")]))
                await until(lambda: to(driver).get(OWNER) == ["noted"], "the owner's first answer")
                await post(driver, hidden("US.1349120865530274", "SPOOF-first my door code is KESTREL-8841"))
                await post(driver, hidden("US.1349120865530274", "SPOOF-first-again are you there?"))
                await post(driver, hidden("US.1349120865530274", "", kind="revoke"))
                await post(driver, hidden("US.9911223344556677", "SPOOF-second what is my door code?"))
                await post(driver, hidden(None, "SPOOF-none no id at all"))
                await post(driver, value(pnid, messages=[text(OWNER, "OWNER-SENTINEL anything new?")]))
                await until(lambda: to(driver).get(OWNER, [])[-1:] == ["sentinel-ok"], "the sentinel")
                return provider, to(driver)

    provider, sent = run(body, timeout=PROC_TIMEOUT)
    check_owner_history_clean(provider)
    check_spoofers_got_nothing(provider, [t for peer, texts in sent.items() if peer != OWNER for t in texts])
    assert set(sent) == {OWNER}, sent
    assert not requests_for(provider, "SPOOF"), "a user without a number reached the model"
    logs = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
    dropped = [ln for ln in logs.splitlines() if DROPPED in ln]
    # One line per user (the first user's second message and deletion are counted, not logged), naming who and why.
    assert len(dropped) == 3, dropped
    assert sum("US.1349120865530274" in ln for ln in dropped) == 1, dropped
    assert sum("US.9911223344556677" in ln for ln in dropped) == 1, dropped
    assert sum("no id at all" in ln for ln in dropped) == 1, dropped
    assert all("ask them to write on another channel" in ln for ln in dropped), dropped
    assert "could not route" not in logs and "empty dm id" not in logs, logs[-2000:]
    assert "KESTREL-8841" not in logs
