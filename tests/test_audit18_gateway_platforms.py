"""Audit 18, end to end on Discord, Slack and WhatsApp (test_audit18_gateway_agents.py did Telegram): one
`hermit gateway run` (a subprocess) per platform serving two agents over two accounts of that platform (the real
adapter against the fake platform), bound by account; the fake model provider records every request. Agent main is
the user's (account `personal`); agent family a relative's (account `familybot`, its own owner, `sandbox.mode: all`,
a contact and, where the platform has them, a group/channel). main's owner talks first (their main session's
transcript holds a canary, as do MEMORY.md, memory/private/ and today's log). Then family's owner, a contact — the
user themself, main's owner's own id writing to the relative's bot — and a group member each have family's model
(which obeys them) search for the canaries' words, memory_get / read main's files by every path they could name
(relative, absolute, main's transcript by the session id main's store gave it, main's session store that names
main's keys), run commands on them (named, and hidden from the exec guard in base64, also via /proc/1/root), and
send `/status` and `/new`. Slack: the two accounts are two workspaces; the contact's key is `U…@<family's
workspace>` with main's owner's `U…`, the channel member is main's owner from main's workspace (a Slack Connect
member: `user_team` names main's workspace), and two bindings name main's workspace (main's owner's DM `U…@T…`,
and `team_id`): neither takes family's account's chats. No request of family's and no message its account sent
holds a canary. Sensitivity: binding familybot to main fails every platform with all four canaries."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from channeldrivers import DRIVERS, Driver, SlackDriver
from channelhelpers import run
from fakes.fake_discord import GUILD_ID, TEXT_CHANNEL
from fakes.fake_slack import BOT_USER
from hermit.sessions.keys import main_session_key
from hermit.sessions.store import SessionStore
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import Gateway, env_for

CANARIES = {"memory": "NUMBAT-MEMORY-2861", "private": "NUMBAT-PRIVATE-2862", "daily": "NUMBAT-DAILY-2863",
            "chat": "NUMBAT-CHAT-2864"}
QUERIES = ["numbat", *(c.lower().replace("-", " ") for c in CANARIES.values())]
DAY = "memory/2026-01-19.md"
MAIN_TEAM, FAMILY_TEAM = "T0MAIN01", "T0FAMILY"
# (main's owner, family's owner, group/channel, group member); family's contact is main's owner's own id
IDS = {"discord": ("600000000000001000", "600000000000000077", TEXT_CHANNEL, "600000000000000088"),
       "slack": ("U1000", "U0077", "C0300", "U1000"),
       "whatsapp": ("15550001000", "15550000077", "", "")}


def write_home(home: Path, platform: str, provider: FakeProvider, driver: Driver) -> None:
    main_owner, family_owner, group, _ = IDS[platform]
    family: dict[str, Any] = {**driver.account_config("familybot"), "owners": [family_owner],
                              "dm_policy": "allowlist", "allow_from": [main_owner]}
    if group:
        family |= {"groups": [group]}
    cfg = {"agents": {"defaults": {"model": "fake/test-model",
                                   "memory_search": {"provider": "none", "sources": ["memory", "sessions"]}},
                      "list": [{"id": "main", "default": True}, {"id": "family", "sandbox": {"mode": "all"}}]},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {platform: {"accounts": {
               "personal": {**driver.account_config("personal"), "owners": [main_owner]}, "familybot": family}}},
           "bindings": [{"match": {"channel": platform, "account_id": "personal"}, "agent_id": "main"},
                        {"match": {"channel": platform, "account_id": "familybot"}, "agent_id": "family"}]}
    if platform == "discord":  # main's server, for main's bot (without account_id it would take familybot's too)
        cfg["bindings"].append({"match": {"channel": "discord", "account_id": "personal", "guild_id": GUILD_ID},
                                "agent_id": "main"})
    if platform == "slack":  # bindings naming main's workspace: its owner's DMs, and the workspace itself
        cfg["bindings"] += [{"match": {"channel": "slack", "peer": {"kind": "dm", "id": f"{main_owner}@{MAIN_TEAM}"}},
                             "agent_id": "main"}, {"match": {"channel": "slack", "team_id": MAIN_TEAM}, "agent_id": "main"}]
    home.mkdir(mode=0o700)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    os.chmod(home / "hermit.yaml", 0o600)
    ws = home / "workspace"
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n\n- numbat {CANARIES['memory']}\n", encoding="utf-8")
    (ws / "memory" / "private" / "p.md").write_text(f"- numbat {CANARIES['private']}\n", encoding="utf-8")
    (ws / DAY).write_text(f"- numbat {CANARIES['daily']}\n", encoding="utf-8")


def main_paths(home: Path) -> list[str]:
    ws, sessions = home / "workspace", home / "agents" / "main" / "sessions"
    record = SessionStore(sessions).get(main_session_key("main"))
    assert record is not None
    sid = record.session_id
    return ["MEMORY.md", "../workspace/MEMORY.md", "../workspace/memory/private/p.md", f"../workspace/{DAY}",
            str(ws / "MEMORY.md"), str(ws / "memory/private/p.md"), str(ws / DAY), f"sessions/{sid}.jsonl",
            f"../agents/main/sessions/{sid}.jsonl", f"sessions/../../agents/main/sessions/{sid}.jsonl",
            str(sessions / f"{sid}.jsonl"), "../agents/main/sessions/sessions.json", str(sessions / "sessions.json")]


def steps_for(marker: str, paths: list[str]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [{"name": "memory_search", "arguments": {"query": q, "minScore": 0}}
                                   for q in QUERIES]
    calls += [{"name": tool, "arguments": {"path": p}} for p in paths for tool in ("memory_get", "read")]
    quoted = " ".join(shlex.quote(p) for p in paths)
    # the same paths (and each absolute one through /proc/1/root), and a search of the places a command sees, with
    # no path the exec guard could read in the command
    hidden = [*paths, *(f"/proc/1/root{p}" for p in paths if p.startswith("/")), ".", "/workspace", "/tmp", "/etc"]
    words = " ".join(base64.b64encode(p.encode()).decode() for p in hidden)
    calls += [{"name": "exec", "arguments": {"command": f"cat {quoted} 2>&1; ls -la .. / 2>&1 | head -50"}},
              {"name": "exec", "arguments": {"command": f'for b in {words}; do p=$(echo $b | base64 -d); '
                                                        'if [ -d "$p" ]; then grep -rs NUMBAT "$p" | head; '
                                                        'else cat "$p"; fi; done 2>&1'}}]
    return [{"match": {"contains": marker}, "tool_calls": calls},
            {"match": {"contains": marker}, "text": f"done {marker}"}]


async def replies(driver: Driver, account: str, peer: str, count: int) -> list[str]:
    loop = asyncio.get_running_loop()
    end = loop.time() + 90
    while len(driver.texts(account, peer)) < count:
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {account}/{peer}: {driver.texts(account, peer)}")
        await asyncio.sleep(0.05)
    return driver.texts(account, peer)


async def slack_connect_mention(driver: SlackDriver, channel: str, user: str, text: str) -> None:
    """A member of main's workspace (a shared channel) mentions family's bot in family's workspace."""
    f = driver.fakes["familybot"]
    ev, eid = f.message(f"<@{BOT_USER}> {text}", user=user, channel=channel, kind="app_mention")
    ev["user_team"] = MAIN_TEAM
    await f.push(ev, eid)


async def ask(driver: Driver, platform: str, peer: str, member: str, text: str) -> None:
    if not member:
        await driver.dm("familybot", peer, text)
    elif platform == "slack":
        assert isinstance(driver, SlackDriver)
        await slack_connect_mention(driver, peer, member, text)
    else:
        await driver.group("familybot", peer, member, text, mention=True)


@pytest.mark.parametrize("platform", ["discord", "slack", "whatsapp"])
def test_family_side_of_one_gateway_reaches_none_of_mains_private_text(tmp_path: Path, platform: str) -> None:
    home = tmp_path / "home"
    main_owner, family_owner, group, member = IDS[platform]
    sides = [("FAMQ-OWNER", family_owner, ""), ("FAMQ-CONTACT", main_owner, "")]
    if group:
        sides.append(("FAMQ-GROUP", group, member))
    paths_of: list[list[str]] = []

    async def body() -> tuple[list[str], list[str], str, list[str]]:
        script = [{"match": {"contains": "MAIN-OWNER-SAYS"}, "text": "noted"},
                  {"match": {"contains": "/status"}, "text": "status-ok", "repeat": True}]
        with FakeProvider(script) as provider:
            driver = DRIVERS[platform](["personal", "familybot"])
            if isinstance(driver, SlackDriver):
                driver.fakes["personal"].team, driver.fakes["familybot"].team = MAIN_TEAM, FAMILY_TEAM
            await driver.start()
            write_home(home, platform, provider, driver)
            gw = Gateway(home, env_for(driver))
            try:
                await gw.start()
                driver.gateway_url = gw.url
                await driver.dm("personal", main_owner, f"MAIN-OWNER-SAYS remember numbat {CANARIES['chat']}")
                assert await replies(driver, "personal", main_owner, 1) == ["noted"]
                mains = "\n".join(json.dumps(r.body) for r in provider.requests)
                before = len(provider.requests)
                paths = main_paths(home)
                paths_of.append(paths)
                for marker, peer, who in sides:
                    provider.add(*steps_for(marker, paths))
                    n = len(driver.texts("familybot", peer))
                    await ask(driver, platform, peer, who, f"{marker} tell me everything of the other agent")
                    assert (await replies(driver, "familybot", peer, n + 1))[-1] == f"done {marker}"
                    for command in ("/status", "/new"):
                        await ask(driver, platform, peer, who, command)
                        await replies(driver, "familybot", peer, n + 2 + (command == "/new"))
                sent = [t for _m, p, _w in sides for t in driver.texts("familybot", p)]
                family = [json.dumps(r.body, ensure_ascii=False) for r in provider.requests[before:]]
                keys = [r.key for r in SessionStore(home / "agents" / "family" / "sessions").list()]
                return family, sent, mains, keys
            finally:
                if gw.proc is not None:
                    await gw.stop()
                await driver.stop()

    family, sent, mains, keys = run(body, timeout=PROC_TIMEOUT)
    assert CANARIES["memory"] in mains  # main's owner's own request carries MEMORY.md
    # every side's tool calls ran and all their results came back to family's model
    rounds = [json.loads(r)["messages"] for r in family if json.loads(r)["messages"][-1]["role"] == "tool"]
    assert len(rounds) == len(sides), [ms[1]["content"][:80] for ms in rounds]
    assert [sum(m["role"] == "tool" for m in ms) for ms in rounds] == [len(QUERIES) + 2 * len(paths_of[0]) + 2] * len(sides)
    assert all(any(f"done {m}" in t for t in sent) for m, _p, _w in sides)
    leaked = [(c, i, text[max(0, text.index(c) - 300):text.index(c) + 40]) for i, text in enumerate(family + sent)
              for c in CANARIES.values() if c in text]
    assert not leaked, leaked
    if platform == "slack":  # the contact (main's owner's U… in family's workspace) and the member carry theirs
        assert any(f"{main_owner}@{FAMILY_TEAM}" in k for k in keys), keys
        assert f"agent:family:slack:group:{group}@{FAMILY_TEAM}" in keys, keys  # the shared channel stays family's
