"""A real `gateway run` killed after acknowledging a flood of deletes, before their batch ran, scrubs them all when it
starts again (gateway/scrub_batch.py `resume`, gateway/deletes_store.py `scrubs`).

A delete is acknowledged once its message is hidden and its session written to deletes.json as one to scrub; the
copies go in a batch after. Killed in between, the platform never sends those deletes again: the state dir is what
remembers them. Real parts: `hermit gateway run`, the fake WhatsApp Cloud API and its signed webhooks.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from channeldrivers import WhatsAppDriver
from channelhelpers import run
from fakes.fake_whatsapp import text_message
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import Gateway, env_for, until, write_config
from test_deletes_restart import revoke

SENDER = "15550001001"
N = 12


def code(n: int) -> str:
    return f"ZQ{n:04d}K{n * 7919 % 10000:04d}"


def test_whatsapp_deletes_acked_before_a_kill_are_scrubbed_when_the_gateway_starts_again(tmp_path: Path) -> None:
    def transcripts() -> str:
        return "".join(p.read_text() for p in tmp_path.rglob("sessions/*.jsonl"))

    async def main() -> None:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            policies = {"wa": {"dm_policy": "allowlist", "allow_from": [SENDER]}}
            driver = WhatsAppDriver(list(policies))
            await driver.start()

            try:
                write_config(tmp_path, provider, driver, policies)
                gw = await Gateway(tmp_path, env_for(driver)).start()
                driver.gateway_url = gw.url
                for n in range(N):
                    await driver.deliver("wa", text_message(SENDER, f"my locker code is {code(n)}", f"wamid.m{n}"))
                await until(lambda: len(driver.texts("wa", SENDER)) == N, "the answers")
                for n in range(N):
                    await driver.deliver("wa", revoke(SENDER, f"wamid.m{n}"))  # each acknowledged: hidden, and on disk as to scrub
                assert await gw.stop(signal.SIGKILL) == -signal.SIGKILL
                before = transcripts()
                assert before.count('"customType":"retracted"') == N
                assert any(code(n) in before for n in range(N))  # killed before their batch: texts still there
                assert json.loads((tmp_path / "channels" / "deletes.json").read_text())["scrubs"]
                gw = await Gateway(tmp_path, env_for(driver)).start()
                await until(lambda: not any(code(n) in transcripts() for n in range(N)), "the scrub after the start")
                assert await gw.stop() == 0
            finally:
                await driver.stop()
            assert "scrubs" not in json.loads((tmp_path / "channels" / "deletes.json").read_text())
            assert len(provider.requests) == N

    run(main, timeout=PROC_TIMEOUT)
