"""Shared parts of the audit-20 household walk (tests/test_audit20_household_*.py): one real `hermit gateway run`
holding a household's week — the owner Ann (Telegram id 1000, Slack U1000, the web app), her spouse Bea (Telegram 2000,
a contact by `allow_from`), the family Telegram group -100300 served by a `family` agent (its own workspace, notes and
canaries), and a Slack channel C500 of colleagues (Carl U3000) served by main. The model is the fake provider
(scripted by markers in the requests), the platforms the fakes in tests/fakes on 127.0.0.1.

Canaries: main's MEMORY.md, memory/private/, a note the main session writes, the main session's own conversation,
and the family agent's MEMORY.md and private notes. Each non-owner side (Bea, the group, the colleagues, the other
agent) has the model search for every canary word and read every path it could name; the tests then read what the
model was sent for that side and what the bots posted there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from audit19_who import last_user_text
from channeldrivers import SlackDriver, TelegramDriver
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.testing.fake_provider import FakeProvider

OWNER, SPOUSE, MEMBER, GROUP = "1000", "2000", "2500", "-100300"
S_OWNER, S_COLLEAGUE, S_CHANNEL = "U1000", "U3000", "C500"
MAIN_CANARIES = {"memory": "KIWI-MEMORY-4101", "private": "KIWI-PRIVATE-4102", "note": "KIWI-NOTE-4103",
                 "chat": "KIWI-CHAT-4104", "web": "KIWI-WEB-4105"}
FAMILY_CANARIES = {"fmemory": "KIWI-FAMILY-4201", "fprivate": "KIWI-FAMPRIV-4202"}
SPOUSE_CANARY = "KIWI-SPOUSE-4301"  # what Bea tells the assistant in her own DM: hers and the owner's only
ALL = {**MAIN_CANARIES, **FAMILY_CANARIES, "spouse": SPOUSE_CANARY}
QUERIES = ["kiwi", *(c.lower().replace("-", " ") for c in ALL.values())]


def household_config(provider: FakeProvider, channels: dict[str, Any], bindings: list[dict[str, Any]],
                     extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A household's hermit.yaml: agents main (default) and family (sandboxed), the fake model, these channels."""
    return {
        "agents": {"defaults": {"model": "fake/test-model", "timezone": "UTC",
                                "memory_search": {"provider": "none", "sources": ["memory", "sessions"]}},
                   "list": [{"id": "main", "default": True}, {"id": "family", "sandbox": {"mode": "all"}}]},
        "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
        "gateway": {"shutdown_grace_seconds": 5},
        "channels": channels,
        "bindings": bindings,
        **(extra or {})}


def seed_home(home: Path, cfg: dict[str, Any]) -> dict[str, Path]:
    """Write `cfg` as home's hermit.yaml (0600) and both agents' canary notes; return the agents' workspaces."""
    home.mkdir(mode=0o700, parents=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    os.chmod(home / "hermit.yaml", 0o600)
    loaded = load_config(StatePaths(home))
    main, family = loaded.agent("main").workspace, loaded.agent("family").workspace
    for ws, mem, priv in ((main, MAIN_CANARIES["memory"], MAIN_CANARIES["private"]),
                          (family, FAMILY_CANARIES["fmemory"], FAMILY_CANARIES["fprivate"])):
        (ws / "memory" / "private").mkdir(parents=True, exist_ok=True)
        (ws / "MEMORY.md").write_text(f"# Memory\n\n- kiwi {mem}\n", encoding="utf-8")
        (ws / "memory" / "private" / "p.md").write_text(f"- kiwi {priv}\n", encoding="utf-8")
    return {"main": main, "family": family}


def write_home(home: Path, provider: FakeProvider, tg: TelegramDriver, sl: SlackDriver,
               extra: dict[str, Any] | None = None) -> dict[str, Path]:
    channels = {
        "telegram": {"accounts": {"personal": {**tg.account_config("personal"), "owners": [OWNER],
                                               "allow_from": [SPOUSE], "groups": [GROUP]}}},
        "slack": {"accounts": {"work": {**sl.account_config("work"), "owners": [S_OWNER],
                                        "groups": [S_CHANNEL]}}}}
    bindings = [{"match": {"channel": "telegram", "account_id": "personal", "peer": {"kind": "group", "id": GROUP}},
                 "agent_id": "family"}]
    return seed_home(home, household_config(provider, channels, bindings, extra))


def probe(marker: str, paths: list[str], answer: str | None = None) -> list[dict[str, Any]]:
    """The model of a non-owner side searching for every canary word and reading every path, then answering."""
    calls = [{"name": "memory_search", "arguments": {"query": q, "minScore": 0}} for q in QUERIES]
    calls += [{"name": tool, "arguments": {"path": p}} for p in paths for tool in ("memory_get", "read")]
    return [{"match": {"contains": marker}, "tool_calls": calls},
            {"match": {"contains": marker}, "text": answer or f"done {marker}"}]


def main_paths(ws: dict[str, Path]) -> list[str]:
    m, f = ws["main"], ws["family"]
    return ["MEMORY.md", "memory/private/p.md", "memory/household.md", str(m / "MEMORY.md"),
            str(m / "memory/private/p.md"), str(m / "memory/household.md"), str(f / "MEMORY.md"),
            str(f / "memory/private/p.md")]


def requests_with(provider: FakeProvider, marker: str) -> list[str]:
    """Every turn's request (JSON; one with tools, so not /new's slug request) whose newest user message holds
    `marker`: that turn's requests, tool rounds included."""
    return [json.dumps(r.body, ensure_ascii=False) for r in provider.requests
            if isinstance(r.body, dict) and r.body.get("tools") and marker in last_user_text(r.body)]


def found(text: str, canaries: dict[str, str] | None = None) -> list[str]:
    return [k for k, c in (canaries or ALL).items() if c in text]


def push_raw(fake: Any, message: dict[str, Any], kind: str = "message") -> None:
    """A raw Bot API update (a forward, a member leaving, an edit) into a fake Telegram's queue."""
    fake.updates.append({"update_id": fake._next_update, kind: message})
    fake._next_update += 1
    fake._new_update.set()


def next_mid(fake: Any) -> int:
    fake._next_message += 1
    return int(fake._next_message)
