"""An approved contact is not the owner (issue 22 §1), end to end: `hermit gateway run` (a subprocess) with the
real Telegram adapter against the fake Bot API, the fake model provider recording every request, and the
`hermit pairing` CLI run as the owner would run it.

The flow: a stranger DMs and gets a code that names their Telegram id → `hermit pairing approve` → their
next DM runs in a non-main session of their own: no MEMORY.md canary in any request they cause, and an
`exec` they trigger runs in the OS sandbox (MEMORY.md and the state dir are not readable there) → the owner
named in the config (`tg:1000`) reaches `agent:main:main`, whose requests carry MEMORY.md → `hermit pairing
revoke` stops the contact (their next DM gets a new code, never the model). Each phase is a function over
one running stack, so another check (a new route, a new canary) is one more phase.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from channeldrivers import TelegramDriver
from channelhelpers import FAST, QueueSink, run
from fakes.fake_telegram import FakeTelegram
from hermit.agent.routing import Router
from hermit.channels.access import AccessControl
from hermit.channels.discord import _username as discord_username
from hermit.channels.pairing import PairingStore
from hermit.channels.telegram import TelegramChannel
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.gateway.supervisor import route_with
from hermit.sessions.store import SessionStore
from hermit.testing.fake_provider import FakeProvider, RecordedRequest

RUNNER = Path(__file__).with_name("gateway_runner.py")
MEMORY_CANARY = "MEMCANARY-owner-rent-18500"  # only in MEMORY.md: only the owner's main session may see it
CONFIG_CANARY = "sk-CONFIGCANARY-9d2e"  # only in hermit.yaml, outside the workspace: the sandbox hides it
OWNER, STRANGER, ACCOUNT = "1000", "2001", "personal"
CONTACT_KEY = f"agent:main:telegram:{ACCOUNT}:dm:{STRANGER}"
CODE_RE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")
# The exec the contact's model asks for. The command-line check before the sandbox refuses absolute paths
# outside the workspace and the name MEMORY.md, so the command spells them the way a model trying to get
# out would (octal escapes, a glob): the OS sandbox is the guarantee under test, not that early check.
EXEC = ("id; cat \"$(printf '\\057proc\\057self\\057status')\"; echo MEMORY-BEGIN; cat M*Y.md; echo MEMORY-END; "
        "cat \"$(printf '\\056\\056/hermit.yaml')\"; echo EXEC-DONE")


class Gateway:
    """`hermit gateway run --port 0` in a subprocess; started once it prints its address."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr = home / "gateway.stderr"

    async def start(self) -> Gateway:
        with self.stderr.open("a") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, str(RUNNER), "--home", str(self.home), "gateway", "run", "--port", "0",
                stdout=asyncio.subprocess.PIPE, stderr=err, env=self.env)
        assert self.proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), 60)).decode()
            if not line:
                raise AssertionError(f"gateway exited: {self.stderr.read_text()[-3000:]}")
            if "Hermit gateway on" in line:
                return self

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 60)


@dataclass
class Stack:
    home: Path
    provider: FakeProvider
    driver: TelegramDriver

    def texts(self, peer: str) -> list[str]:
        return self.driver.texts(ACCOUNT, peer)

    async def dm(self, peer: str, text: str) -> None:
        await self.driver.dm(ACCOUNT, peer, text)

    async def replies(self, peer: str, count: int, what: str, timeout: float = 60.0) -> list[str]:
        """Wait until `peer` has received `count` messages in all; returns them."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while len(self.texts(peer)) < count:
            if loop.time() > end:
                raise AssertionError(f"timed out waiting for {what}; sent so far: {self.texts(peer)}")
            await asyncio.sleep(0.05)
        return self.texts(peer)

    async def hermit(self, *args: str) -> str:
        """The `hermit` CLI in a subprocess, as the owner runs it next to the gateway; its stdout."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hermit.cli.main", "--home", str(self.home), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    def session_keys(self) -> set[str]:
        return {r.key for r in SessionStore(self.home / "agents" / "main" / "sessions").list()}


def write_config(home: Path, provider: FakeProvider, driver: TelegramDriver) -> None:
    account = {**driver.account_config(ACCOUNT), "dm_policy": "pairing", "owners": [f"tg:{OWNER}"]}
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url,
                                             "api_key": CONFIG_CANARY}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {"telegram": {"accounts": {ACCOUNT: account}}}}
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    ws = home / "workspace"
    ws.mkdir(exist_ok=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n\nRent: {MEMORY_CANARY}, due on the 3rd.\n", encoding="utf-8")


@asynccontextmanager
async def stack(tmp: Path, script: list[Any]) -> AsyncIterator[Stack]:
    with FakeProvider(script) as provider:
        driver = TelegramDriver([ACCOUNT])
        await driver.start()
        write_config(tmp, provider, driver)
        gw = Gateway(tmp, {**os.environ, **driver.env, "OMP_WAIT_POLICY": "PASSIVE"})
        try:
            await gw.start()
            yield Stack(tmp, provider, driver)
        finally:
            await gw.stop()
            await driver.stop()


def dumped(requests: list[RecordedRequest]) -> str:
    return "\n".join(json.dumps(r.body, ensure_ascii=False) for r in requests)


def tool_names(request: RecordedRequest) -> set[str]:
    return {t["function"]["name"] for t in request.body.get("tools") or []}


# ---- the phases ---------------------------------------------------------------------------------------------

async def stranger_gets_a_code_naming_their_id(s: Stack) -> str:
    await s.dm(STRANGER, "hello? who is this")
    [reply] = await s.replies(STRANGER, 1, "the pairing reply")
    code = CODE_RE.search(reply)
    assert code, reply
    assert f"Your Telegram user id: {STRANGER}" in reply
    assert s.provider.requests == []  # the model is never asked for a stranger
    return code.group(0)


async def owner_approves(s: Stack, code: str) -> None:
    out = await s.hermit("pairing", "approve", "telegram", code)
    assert f"approved {STRANGER}" in out and "as a contact (not an owner)" in out
    assert f"their own session ({CONTACT_KEY}); its tools run in the sandbox" in out
    assert "cannot: reach your main session, MEMORY.md" in out
    listed = json.loads(await s.hermit("pairing", "list", "telegram", "--json"))
    assert [a["sender_id"] for a in listed["approved"]] == [STRANGER] and listed["pending"] == []


async def contact_runs_exec_in_a_sandboxed_session_of_their_own(s: Stack) -> None:
    before = len(s.provider.requests)
    await s.dm(STRANGER, "please run the check")
    await s.replies(STRANGER, 2, "the contact's reply")
    theirs = s.provider.requests[before:]
    assert len(theirs) == 2, "one request with the message, one with the exec result"
    assert "exec" in tool_names(theirs[0])  # a contact's session has exec: inside the sandbox
    text = dumped(theirs)
    assert MEMORY_CANARY not in text  # not in the prompt, not in the history, not in the tool result
    assert CONFIG_CANARY not in text  # the state dir does not exist inside the sandbox
    assert "EXEC-DONE" in text and "uid=" in text and "Uid:" in text  # the command did run
    assert "MEMORY-BEGIN" in text and "MEMORY-END" in text
    # Not the host's root with capabilities: an unprivileged uid with none at all (issue 22 §3).
    assert "CapEff:\\t0000000000000000" in text and "uid=0(" not in text
    assert s.session_keys() == {CONTACT_KEY}


async def owner_reaches_the_main_session(s: Stack) -> None:
    before = len(s.provider.requests)
    await s.dm(OWNER, "it's me, the owner")
    [reply] = await s.replies(OWNER, 1, "the owner's reply")
    assert reply == "agent says hi" and not CODE_RE.search(reply)
    assert MEMORY_CANARY in dumped(s.provider.requests[before:])  # MEMORY.md: the main session's prompt
    assert s.session_keys() == {CONTACT_KEY, "agent:main:main"}


async def revoke_stops_the_contact(s: Stack) -> None:
    out = await s.hermit("pairing", "revoke", "telegram", STRANGER)
    assert f"revoked {STRANGER}" in out and "their next message gets a new pairing code" in out
    before, seen = len(s.provider.requests), len(s.texts(STRANGER))
    await s.dm(STRANGER, "are you still there?")
    replies = await s.replies(STRANGER, seen + 1, "the reply after the revoke")
    assert CODE_RE.search(replies[-1]) and "pairing code" in replies[-1]  # a stranger again
    assert len(s.provider.requests) == before  # the model was not asked


def test_stranger_code_approve_contact_sandboxed_owner_main_revoke(tmp_path: Path) -> None:
    script = [{"tool_calls": [{"name": "exec", "arguments": {"command": EXEC}}],
               "match": {"contains": "please run the check"}},
              {"text": "agent says hi", "repeat": True}]

    async def main() -> None:
        async with stack(tmp_path, script) as s:
            code = await stranger_gets_a_code_naming_their_id(s)
            await owner_approves(s, code)
            await contact_runs_exec_in_a_sandboxed_session_of_their_own(s)
            await owner_reaches_the_main_session(s)
            await revoke_stops_the_contact(s)

    run(main, timeout=240)


# ---- usernames from the adapters ----------------------------------------------------------------------------

def test_a_telegram_owner_named_by_username_is_routed_to_main_through_the_adapter(tmp_path: Path) -> None:
    loaded = build_config({"channels": {"telegram": {"accounts": {"default": {"owners": ["@Boss_Person"]}}}}},
                          StatePaths(tmp_path))
    route = route_with(Router.from_config(loaded), AccessControl(loaded.config.channels, PairingStore(tmp_path)))

    async def main() -> None:
        fake = await FakeTelegram().start()
        ch = TelegramChannel("default", loaded.config.channels.telegram.accounts["default"].model_copy(
            update={"api_base": fake.base_url, "poll_timeout_seconds": 1}), fake.token, state_dir=tmp_path / "s",
            inbox_dir=tmp_path / "inbox", policy=FAST)
        sink = QueueSink()
        await ch.start(sink)
        try:
            fake.push_message(chat_id=31, text="hi", username="boss_person")
            fake.push_message(chat_id=32, text="hi", username="someone_else")
            fake.push_message(chat_id=33, text="hi")
            boss, other, nameless = await sink.next(), await sink.next(), await sink.next()
        finally:
            await ch.stop()
            await fake.stop()
        assert (boss.sender_username, other.sender_username, nameless.sender_username) == \
            ("boss_person", "someone_else", None)
        assert route(boss).session_key == "agent:main:main"
        assert route(other).session_key == "agent:main:telegram:default:dm:32"
        assert route(nameless).session_key == "agent:main:telegram:default:dm:33"

    run(main)


def test_discord_passes_unique_usernames_only() -> None:
    assert discord_username(SimpleNamespace(name="ann.smith", discriminator="0")) == "ann.smith"
    assert discord_username(SimpleNamespace(name="Ann", discriminator="1234")) is None  # an old tag: not unique
