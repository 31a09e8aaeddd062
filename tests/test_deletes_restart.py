"""A platform delete that came before its message is remembered across a gateway restart (gateway/deletes_store.py).

The bus remembers a delete that found nothing, so its message, coming later (platforms reorder events, Slack and
WhatsApp retry webhooks), is neither answered nor stored. That memory lived in the process only: delete, restart,
the message arrives, and it was answered and its text written to the transcript. Now it is written to
`<state>/channels/deletes.json` before the delete is acknowledged to the platform.
"""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

from channeldrivers import WhatsAppDriver
from channelhelpers import run
from fakes.fake_whatsapp import text_message
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import Gateway, env_for, until, write_config

SENDER = "15550001001"


def revoke(sender: str, original: str) -> dict[str, object]:
    msg = text_message(sender, "", f"wamid.revoke.{original}")
    return {**{k: v for k, v in msg.items() if k != "text"}, "type": "revoke",
            "revoke": {"original_message_id": original}}


def test_whatsapp_a_message_deleted_before_it_came_is_not_answered_after_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            policies = {"wa": {"dm_policy": "allowlist", "allow_from": [SENDER]}}
            driver = WhatsAppDriver(list(policies))
            await driver.start()

            try:
                write_config(tmp_path, provider, driver, policies)
                gw = await Gateway(tmp_path, env_for(driver)).start()
                driver.gateway_url = gw.url
                await driver.deliver("wa", revoke(SENDER, "wamid.late"))  # the delete, before its message: found nothing
                # Killed the moment the platform was told the delete was handled: it is on disk by then.
                assert await gw.stop(signal.SIGKILL) == -signal.SIGKILL
                gw = await Gateway(tmp_path, env_for(driver)).start()
                driver.gateway_url = gw.url
                await driver.deliver("wa", text_message(SENDER, "my card PIN is 4711", "wamid.late"))  # the message, redelivered late
                await driver.deliver("wa", text_message(SENDER, "hello", "wamid.next"))  # queued after it: answered
                await until(lambda: driver.texts("wa", SENDER), "the answer to the next message")
                assert await gw.stop() == 0
            finally:
                await driver.stop()
            assert driver.texts("wa", SENDER) == ["agent says hi"]
            assert len(provider.requests) == 1
            assert "4711" not in json.dumps([r.body for r in provider.requests])
            transcripts = list(tmp_path.rglob("*.jsonl"))
            assert transcripts and all("4711" not in p.read_text() for p in transcripts)
            assert "hello" in "".join(p.read_text() for p in transcripts)
            path = tmp_path / "channels" / "deletes.json"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600

    run(main, timeout=PROC_TIMEOUT)
