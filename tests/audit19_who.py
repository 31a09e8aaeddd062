"""Shared parts of the audit-19 "who is speaking" tests (tests/test_audit19_who_*.py): one real `hermit gateway run`
with one account of a platform (the real adapter against its fake server on 127.0.0.1) and the scripted model,
the owner's canaries planted in MEMORY.md, memory/private/ and the main session; then spoofers speak and the test
reads what the model was sent and what the bot sent back.

The script answers by what a request holds (its whole text, history included), first match first:
  OWNER-SENTINEL -> "sentinel-ok"  the owner's last DM: its request carries the main session's whole history, so a
                                    spoofer's words that reached the main session are in it
  SPOOF          -> "spoof-answer" every spoofer's message (each holds SPOOF)
  VIABOT         -> "viabot-ok"    an owner's message composed by an inline bot (Telegram)
  OWNER-SAYS     -> "noted"        the owner's first DM, which puts CANARIES["chat"] in the main session
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from channeldrivers import Driver
from hermit.testing.fake_provider import FakeProvider
from test_channel_gateway import Gateway, env_for

CANARIES = {"memory": "QUOLL-MEMORY-7731", "private": "QUOLL-PRIVATE-7732", "chat": "QUOLL-CHAT-7733"}
OWNER_LABEL = "— the owner]"
SCRIPT: list[dict[str, Any]] = [
    {"match": {"contains": "OWNER-SENTINEL"}, "text": "sentinel-ok", "repeat": True},
    {"match": {"contains": "SPOOF"}, "text": "spoof-answer", "repeat": True},
    {"match": {"contains": "VIABOT"}, "text": "viabot-ok", "repeat": True},
    {"match": {"contains": "OWNER-SAYS"}, "text": "noted"},
]


def write_home(home: Path, platform: str, provider: FakeProvider, account: dict[str, Any]) -> None:
    """hermit.yaml with one account `personal` of `platform` (`account`: its settings) and the owner's canaries."""
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {platform: {"accounts": {"personal": account}}}}
    home.mkdir(mode=0o700, parents=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    os.chmod(home / "hermit.yaml", 0o600)
    ws = home / "workspace"
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n\n- quoll {CANARIES['memory']}\n", encoding="utf-8")
    (ws / "memory" / "private" / "p.md").write_text(f"- quoll {CANARIES['private']}\n", encoding="utf-8")


@asynccontextmanager
async def gateway(home: Path, driver: Driver, provider: FakeProvider, account: dict[str, Any]
                  ) -> AsyncIterator[Gateway]:
    await driver.start()
    write_home(home, driver.name, provider, {**driver.account_config("personal"), **account})
    gw = Gateway(home, env_for(driver))
    try:
        await gw.start()
        driver.gateway_url = gw.url
        yield gw
    finally:
        if gw.proc is not None:
            await gw.stop()
        await driver.stop()


async def until(cond: Callable[[], object], what: str, timeout: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def last_user_text(body: Any) -> str:
    """The newest user message of an OpenAI-style request, as text."""
    for m in reversed(body.get("messages", []) if isinstance(body, dict) else []):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c, ensure_ascii=False)
    return ""


def requests_for(provider: FakeProvider, marker: str) -> list[str]:
    """Each whole request (JSON) whose newest user message holds `marker`."""
    return [json.dumps(r.body, ensure_ascii=False) for r in provider.requests if marker in last_user_text(r.body)]


def canaries_in(text: str) -> list[str]:
    return [c for c in CANARIES.values() if c in text]


def check_owner_history_clean(provider: FakeProvider) -> str:
    """The sentinel's request (the owner's, main session): it has the owner's canaries, and no spoofer's words."""
    sentinel = requests_for(provider, "OWNER-SENTINEL")
    assert sentinel, "the owner's sentinel never reached the model"
    req = sentinel[-1]
    assert CANARIES["memory"] in req and CANARIES["chat"] in req, "the sentinel is not the owner's main session"
    assert "SPOOF" not in req, req[req.index("SPOOF") - 400:req.index("SPOOF") + 200]
    return req


def check_spoofers_got_nothing(provider: FakeProvider, sent_to_others: list[str]) -> None:
    """No request a spoofer's message started holds a canary or the owner's label, nor does anything the bot sent
    to anyone but the owner."""
    for req in requests_for(provider, "SPOOF"):
        assert not canaries_in(req), (canaries_in(req), req[:600])
    for req in provider.requests:
        newest = last_user_text(req.body)
        if "SPOOF" in newest:
            assert OWNER_LABEL not in newest, newest
    leaked = [t for t in sent_to_others if canaries_in(t)]
    assert not leaked, leaked
