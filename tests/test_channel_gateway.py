"""End to end, per platform: `hermit gateway run` (a subprocess) with the real adapter, access control, routing
and chunking, a fake platform and the fake model provider on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from channeldrivers import DRIVERS, Driver, TelegramDriver, WhatsAppDriver
from channelhelpers import run
from fakes.fake_whatsapp import sign, text_message, webhook_body
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT

RUNNER = Path(__file__).with_name("gateway_runner.py")
SECRET = "MEMSECRET-7f3a"  # in MEMORY.md: only the main session may see it
FENCE = "```"
LONG = "\n\n".join(
    (f"Part {i}: " + "words " * 60).strip() if i % 3 else f"{FENCE}python\n" + "\n".join(
        f"x_{i}_{j} = {j}  # line {j}" for j in range(12)) + f"\n{FENCE}"
    for i in range(40))
assert len(LONG) >= 10_000

SENDERS = {"telegram": ("1001", "1002", "1003", "1004"), "slack": ("U1001", "U1002", "U1003", "U1004"),
           "discord": ("600000000000001001", "600000000000001002", "600000000000001003", "600000000000001004"),
           "whatsapp": ("15550001001", "15550001002", "15550001003", "15550001004")}


class Gateway:
    """`hermit gateway run --port 0` in a subprocess; `url` once it listens."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""
        self.stderr = home / "gateway.stderr"

    async def start(self) -> Gateway:
        err = self.stderr.open("a")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(RUNNER), "--home", str(self.home), "gateway", "run", "--port", "0",
            stdout=asyncio.subprocess.PIPE, stderr=err, env=self.env)
        err.close()
        assert self.proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), PROC_TIMEOUT)).decode()
            if not line:
                raise AssertionError(f"gateway exited: {self.stderr.read_text()[-3000:]}")
            m = re.search(r"Hermit gateway on (http://\S+?)/?$", line.strip())
            if m:
                self.url = m.group(1)
                return self

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), PROC_TIMEOUT)


def write_config(home: Path, provider: FakeProvider, driver: Driver, policies: dict[str, dict[str, Any]]) -> None:
    accounts = {a: {**driver.account_config(a), **p} for a, p in policies.items()}
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {driver.name: {"accounts": accounts}}}
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    ws = home / "workspace"
    ws.mkdir(exist_ok=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n\nThe vault code is {SECRET}.\n", encoding="utf-8")


def env_for(driver: Driver) -> dict[str, str]:
    env = {**os.environ, **driver.env, "OMP_WAIT_POLICY": "PASSIVE"}
    if driver.name == "discord":
        env["HERMIT_TEST_FAKE_DISCORD"] = driver.fake.base_url  # type: ignore[attr-defined]
    return env


@asynccontextmanager
async def stack(tmp: Path, platform: str, provider: FakeProvider,
                policies: dict[str, dict[str, Any]]) -> AsyncIterator[tuple[Driver, Gateway]]:
    driver = DRIVERS[platform](list(policies))
    await driver.start()
    write_config(tmp, provider, driver, policies)
    gw = Gateway(tmp, env_for(driver))
    try:
        await gw.start()
        driver.gateway_url = gw.url
        yield driver, gw
    finally:
        if gw.proc is not None:
            await gw.stop()
        await driver.stop()


async def until(predicate: Any, what: str, timeout: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


POLICIES: dict[str, dict[str, Any]] = {
    "pair": {"dm_policy": "pairing", "group_policy": "open", "require_mention": True},
    "allow": {"dm_policy": "allowlist", "allow_from": ["42"]},
    "off": {"dm_policy": "disabled"},
}


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord", "whatsapp"])
def test_access_pairing_groups_and_long_replies_end_to_end(tmp_path: Path, platform: str) -> None:
    stranger, friend, nobody, member = SENDERS[platform]
    script = [{"text": LONG, "match": {"contains": "make it long"}},
              {"text": "agent says hi", "repeat": True}]

    async def main() -> None:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, platform, provider, POLICIES) as (d, _gw):
                # pairing: the stranger gets a code, the model is never asked
                await d.dm("pair", stranger, "hello?")
                await until(lambda: d.texts("pair", stranger), "a pairing code")
                [code_msg] = d.texts("pair", stranger)
                code = re.search(r"\b[A-HJ-NP-Z2-9]{8}\b", code_msg)
                assert code, code_msg
                assert provider.requests == []
                approve = [sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "pairing", "approve",
                           platform, code.group(0)]
                done = await asyncio.create_subprocess_exec(*approve, stdout=asyncio.subprocess.DEVNULL)
                assert await done.wait() == 0  # `hermit pairing approve`, as the owner would run it
                await d.dm("pair", stranger, "hello again")
                await until(lambda: len(d.texts("pair", stranger)) == 2, "the agent's reply")
                assert d.texts("pair", stranger)[1] == "agent says hi"
                # an approved sender is a contact, not the owner: their own session, never MEMORY.md
                assert SECRET not in json.dumps(provider.requests[-1].body)

                # allowlist: a stranger gets nothing at all; disabled: DMs are ignored
                await d.dm("allow", nobody, "let me in")
                await d.dm("off", friend, "anyone?")
                await asyncio.sleep(1.0)
                assert d.texts("allow", nobody) == [] and d.texts("off", friend) == []
                assert len(provider.requests) == 1

                if d.groups:
                    group = d.group_id(7)
                    await d.group("pair", group, member, "no mention here", mention=False)
                    await asyncio.sleep(1.0)
                    assert d.texts("pair", group) == [] and len(provider.requests) == 1
                    await d.group("pair", group, member, "what is the vault code?", mention=True)
                    await until(lambda: d.texts("pair", group), "the group reply")
                    assert d.texts("pair", group) == ["agent says hi"]
                    assert SECRET not in json.dumps(provider.requests[-1].body)  # groups never see MEMORY.md

                # a 10,000-character reply arrives in chunks within the limit, no fence split
                before = len(d.texts("pair", stranger))
                await d.dm("pair", stranger, "make it long please")
                await until(lambda: "".join(d.texts("pair", stranger)[before:]).count(FENCE) >= LONG.count(FENCE)
                            and re.sub(r"\s", "", "".join(d.texts("pair", stranger)[before:]))
                            == re.sub(r"\s", "", LONG), "every chunk of the long reply")
                chunks = d.texts("pair", stranger)[before:]
                max_chars, max_lines = d.limit
                assert len(chunks) >= 3
                for c in chunks:
                    assert len(c) <= max_chars and (max_lines is None or c.count("\n") + 1 <= max_lines)
                    assert c.count(FENCE) % 2 == 0, f"a chunk splits a code fence:\n{c[:200]}"

    run(main, timeout=PROC_TIMEOUT)


def test_whatsapp_forged_signature_through_the_gateway_is_401_and_nothing_runs(tmp_path: Path) -> None:
    async def main() -> None:
        with FakeProvider([{"text": "never", "repeat": True}]) as provider:
            policies = {"pair": {"dm_policy": "open", "allow_from": ["*"]}}
            async with stack(tmp_path, "whatsapp", provider, policies) as (d, _gw):
                assert isinstance(d, WhatsAppDriver)
                body = json.dumps(webhook_body(text_message("15550009999", "forged", "wamid.F1"))).encode()
                r = await d.post("pair", body, sign("not-the-app-secret", body))
                assert r.status_code == 401
                r = await d.post("pair", body, {"Content-Type": "application/json"})
                assert r.status_code == 401
                await asyncio.sleep(0.5)
                assert provider.requests == [] and d.fakes["pair"].sent() == []
    run(main, timeout=PROC_TIMEOUT)


def test_telegram_gateway_killed_mid_turn_answers_exactly_once_after_restart(tmp_path: Path) -> None:
    script = [{"text": "too late", "match": {"contains": "slow question"}, "delay": 30},
              {"text": "the answer", "repeat": True}]

    async def main() -> None:
        with FakeProvider(script) as provider:
            policies = {"pair": {"dm_policy": "allowlist", "allow_from": ["1001"]}}
            driver = TelegramDriver(list(policies))
            await driver.start()
            try:
                write_config(tmp_path, provider, driver, policies)
                gw = await Gateway(tmp_path, env_for(driver)).start()
                await driver.dm("pair", "1001", "slow question")
                await until(lambda: len(provider.requests) == 1, "the model request")
                assert await gw.stop(signal.SIGKILL) == -signal.SIGKILL  # between receiving and answering
                assert driver.texts("pair", "1001") == []

                gw = await Gateway(tmp_path, env_for(driver)).start()
                await until(lambda: driver.texts("pair", "1001"), "the answer after the restart")
                await asyncio.sleep(2.0)  # a duplicate would arrive by now
                assert driver.texts("pair", "1001") == ["the answer"]
                await driver.dm("pair", "1001", "and then?")
                await until(lambda: len(driver.texts("pair", "1001")) == 2, "the next answer")
                assert await gw.stop() == 0
                gw = await Gateway(tmp_path, env_for(driver)).start()  # a clean restart replays nothing
                await asyncio.sleep(2.0)
                await gw.stop()
                assert driver.texts("pair", "1001") == ["the answer", "the answer"]
                logs = gw.stderr.read_text() + "".join(p.read_text(errors="replace")
                                                       for p in (tmp_path / "logs").glob("*") if p.is_file())
                assert "getUpdates" in logs or "gateway" in logs
                assert driver.fakes["pair"].token not in logs  # the bot token never reaches a log
            finally:
                await driver.stop()
    run(main, timeout=PROC_TIMEOUT)
