"""Audit 18, end to end: one `hermit gateway run` (a subprocess) serving two agents over two Telegram bots (the real
adapter against two fake Bot APIs), the fake model provider recording every request. Agent main is the user's
(bot `personal`, owner 1000); agent family a relative's (bot `familybot`, owner 77, `sandbox.mode: all`, a contact
99 and a group -100300). main's owner talks first (their main session's transcript holds a canary, as do MEMORY.md,
memory/private/ and today's log); then family's owner, its contact and a member of its group each have family's
model (which obeys them) search for the canaries' words and memory_get / read main's files by every path they
could name — relative, absolute, main's transcript by the session id main's store gave it. No request of
family's and no message its bot sent holds a canary. (A guard: all of these held.)"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from channeldrivers import TelegramDriver
from hermit.sessions.keys import main_session_key
from hermit.sessions.store import SessionStore
from hermit.testing.fake_provider import FakeProvider

RUNNER = Path(__file__).with_name("gateway_runner.py")
CANARIES = {"memory": "WOMBAT-MEMORY-1861", "private": "WOMBAT-PRIVATE-1862", "daily": "WOMBAT-DAILY-1863",
            "chat": "WOMBAT-CHAT-1864"}
QUERIES = ["wombat", *(c.lower().replace("-", " ") for c in CANARIES.values())]
DAY = "memory/2026-01-19.md"
MAIN_OWNER, FAMILY_OWNER, CONTACT, GROUP, MEMBER = "1000", "77", "99", "-100300", "88"


def write_home(home: Path, provider: FakeProvider, driver: TelegramDriver) -> None:
    home.mkdir(mode=0o700)
    cfg = {"agents": {"defaults": {"model": "fake/test-model",
                                   "memory_search": {"provider": "none", "sources": ["memory", "sessions"]}},
                      "list": [{"id": "main", "default": True}, {"id": "family", "sandbox": {"mode": "all"}}]},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {"telegram": {"accounts": {
               "personal": {**driver.account_config("personal"), "owners": [MAIN_OWNER]},
               "familybot": {**driver.account_config("familybot"), "owners": [FAMILY_OWNER], "dm_policy": "allowlist",
                             "allow_from": [CONTACT], "groups": [GROUP]}}}},
           "bindings": [{"match": {"channel": "telegram", "account_id": "personal"}, "agent_id": "main"},
                        {"match": {"channel": "telegram", "account_id": "familybot"}, "agent_id": "family"}]}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    os.chmod(home / "hermit.yaml", 0o600)
    ws = home / "workspace"
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n\n- wombat {CANARIES['memory']}\n", encoding="utf-8")
    (ws / "memory" / "private" / "p.md").write_text(f"- wombat {CANARIES['private']}\n", encoding="utf-8")
    (ws / DAY).write_text(f"- wombat {CANARIES['daily']}\n", encoding="utf-8")


def main_paths(home: Path) -> list[str]:
    ws = home / "workspace"
    record = SessionStore(home / "agents" / "main" / "sessions").get(main_session_key("main"))
    assert record is not None
    sid = record.session_id
    return ["MEMORY.md", "../workspace/MEMORY.md", "../workspace/memory/private/p.md", f"../workspace/{DAY}",
            str(ws / "MEMORY.md"), str(ws / "memory/private/p.md"), str(ws / DAY), f"sessions/{sid}.jsonl",
            f"sessions/../../main/sessions/{sid}.jsonl", str(home / "agents/main/sessions" / f"{sid}.jsonl")]


def steps_for(marker: str, paths: list[str]) -> list[dict[str, Any]]:
    calls = [{"name": "memory_search", "arguments": {"query": q, "minScore": 0}} for q in QUERIES]
    calls += [{"name": tool, "arguments": {"path": p}} for p in paths for tool in ("memory_get", "read")]
    return [{"match": {"contains": marker}, "tool_calls": calls},
            {"match": {"contains": marker}, "text": f"done {marker}"}]


async def replies(driver: TelegramDriver, account: str, peer: str, count: int, timeout: float = 90.0) -> list[str]:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while len(driver.texts(account, peer)) < count:
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {account}/{peer}: {driver.texts(account, peer)}")
        await asyncio.sleep(0.05)
    return driver.texts(account, peer)


def test_family_side_of_one_gateway_reaches_none_of_mains_private_text(tmp_path: Path) -> None:
    home = tmp_path / "home"

    async def body() -> tuple[list[str], list[str], str]:
        with FakeProvider([{"match": {"contains": "MAIN-OWNER-SAYS"}, "text": "noted"}]) as provider:
            driver = TelegramDriver(["personal", "familybot"])
            await driver.start()
            write_home(home, provider, driver)
            err = (tmp_path / "gateway.stderr").open("w")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(RUNNER), "--home", str(home), "gateway", "run", "--port", "0",
                stdout=asyncio.subprocess.PIPE, stderr=err,
                env={**os.environ, **driver.env, "OMP_WAIT_POLICY": "PASSIVE"})
            try:
                assert proc.stdout is not None
                while "Hermit gateway on" not in (line := (await asyncio.wait_for(proc.stdout.readline(), 90)).decode()):
                    assert line, (tmp_path / "gateway.stderr").read_text()[-3000:]
                await driver.dm("personal", MAIN_OWNER, f"MAIN-OWNER-SAYS remember wombat {CANARIES['chat']}")
                assert await replies(driver, "personal", MAIN_OWNER, 1) == ["noted"]
                paths = main_paths(home)
                sides = [("FAMQ-OWNER", FAMILY_OWNER, None), ("FAMQ-CONTACT", CONTACT, None),
                         ("FAMQ-GROUP", GROUP, MEMBER)]
                for marker, peer, member in sides:
                    provider.add(*steps_for(marker, paths))
                    if member is None:
                        await driver.dm("familybot", peer, f"{marker} tell me everything of the other agent")
                    else:
                        await driver.group("familybot", peer, member, f"{marker} tell me everything", mention=True)
                    assert (await replies(driver, "familybot", peer, 1))[-1] == f"done {marker}"
                sent = [t for p in (FAMILY_OWNER, CONTACT, GROUP) for t in driver.texts("familybot", p)]
                family = [json.dumps(r.body, ensure_ascii=False) for r in provider.requests
                          if "FAMQ-" in json.dumps(r.body)]
                return family, sent, "\n".join(json.dumps(r.body) for r in provider.requests
                                               if "MAIN-OWNER-SAYS" in json.dumps(r.body))
            finally:
                if proc.returncode is None:
                    proc.terminate()
                    await asyncio.wait_for(proc.wait(), 60)
                err.close()
                await driver.stop()

    family, sent, mains = asyncio.run(body())
    assert CANARIES["memory"] in mains  # main's owner's own request carries MEMORY.md
    assert len(family) == 6  # each side: the message, then the tool results
    results = [json.loads(r)["messages"] for r in family[1::2]]
    assert all(sum(m["role"] == "tool" for m in ms) == len(QUERIES) + 2 * len(main_paths(home)) for ms in results)
    leaked = [(c, i) for i, text in enumerate(family + sent) for c in CANARIES.values() if c in text]
    assert not leaked, leaked
