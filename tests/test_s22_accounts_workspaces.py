"""Session 22, t14: an agent pointed at a workspace another agent used before is refused.

The owner ran Hermit with the `main` agent (their MEMORY.md in `<home>/workspace`) and a `family` agent. Later,
with the gateway stopped, they rewrote agents.list: `main` left out (a `home` agent as the default), `family` removed,
and a new agent `kid` for their child's bot given a workspace by hand — the owner's former main workspace, the
removed family agent's, or a folder inside it. config/load.py refused two agents of one config sharing or nesting
workspaces, but not a workspace an agent that is gone had used: the child's turns read the owner's MEMORY.md (or the
family's notes) as kid's own memory. Now each agent's workspace is recorded (real paths) and a config giving an agent
another agent id's former workspace is refused at load, at start and live, naming both agents.

Real `hermit gateway run`, the real Telegram adapter against fake Bot APIs on 127.0.0.1, the fake model provider.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.config import StatePaths, load_config, workspaces_check
from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveConfig
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import Gateway, env_for
from test_s22_accounts_identity import dm, driver_with

OWNER, KID = "1001", "3003"
OWNERS_NOTE, FAMILY_NOTE = "OWNER-SECRET-41", "FAMILY-SECRET-77"


def save(home: Path, provider: FakeProvider, agents: list[dict[str, Any]], accounts: dict[str, Any],
         bindings: list[dict[str, Any]]) -> None:
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}},
                      "list": agents},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5}, "bindings": bindings,
           "channels": {"telegram": {"accounts": accounts}}}
    tmp = home / "hermit.yaml.tmp"
    tmp.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    os.replace(tmp, home / "hermit.yaml")


async def start_and_ask(home: Path, env: dict[str, str], d: TelegramDriver, sender: str,
                        provider: FakeProvider) -> tuple[int | None, str, list[str]]:
    """Start the gateway on the edited config and DM bot2 as `sender`: the gateway's exit code (None when it never
    ran), its stderr, and every request the model was sent."""
    gw = Gateway(home, env)
    try:
        await gw.start()
        await dm(d, "bot2", sender, "what do you remember?")
    except AssertionError:
        pass  # the gateway exited instead of starting
    finally:
        code = await gw.stop() if gw.proc is not None else None
    return code, gw.stderr.read_text(), [json.dumps(r.body) for r in provider.requests]


@pytest.mark.parametrize("where", ["the owner's former main workspace", "a removed agent's workspace",
                                   "a folder inside a removed agent's workspace"])
def test_a_new_agent_given_a_workspace_another_agent_used_is_refused_at_start(tmp_path: Path, where: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    d = driver_with("1:TOKENONE", "2:TOKENTWO")

    async def main() -> tuple[int | None, str, list[str]]:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            await d.start()
            try:
                env = env_for(d)
                bot = {"api_base": d.fakes["bot1"].base_url, "poll_timeout_seconds": 1, "token_env": "TG_BOT1"}
                kidbot = {"api_base": d.fakes["bot2"].base_url, "poll_timeout_seconds": 1, "token_env": "TG_BOT2"}
                save(home, provider, [{"id": "main", "default": True}, {"id": "family"}],
                     {"home": {**bot, "owners": [OWNER], "dm_policy": "allowlist"}}, [])
                for ws, note in (("workspace", OWNERS_NOTE), ("workspace-family", FAMILY_NOTE)):
                    (home / ws / "notes").mkdir(parents=True, exist_ok=True)
                    (home / ws / "MEMORY.md").write_text(f"# Memory\n\n{note}\n", encoding="utf-8")
                gw = await Gateway(home, env).start()  # both agents run once: their workspaces are theirs
                try:
                    assert await dm(d, "bot1", OWNER, "hi") == "agent says hi"
                finally:
                    await gw.stop()
                given = {"the owner's former main workspace": home / "workspace",
                         "a removed agent's workspace": home / "workspace-family",
                         "a folder inside a removed agent's workspace": home / "workspace-family" / "notes"}[where]
                # Edit with no gateway running: main left out, family removed, kid given that folder.
                save(home, provider, [{"id": "home", "default": True}, {"id": "kid", "workspace": str(given)}],
                     {"kidbot": {**kidbot, "owners": [KID], "dm_policy": "allowlist"}},
                     [{"agent_id": "kid", "match": {"channel": "telegram", "account_id": "kidbot"}}])
                return await start_and_ask(home, env, d, KID, provider)
            finally:
                await d.stop()

    code, stderr, asked = run(main, timeout=PROC_TIMEOUT * 3)
    assert not any(OWNERS_NOTE in text or FAMILY_NOTE in text for text in asked[1:])  # kid read neither
    assert code not in (0, None)
    whose = "main" if where == "the owner's former main workspace" else "family"
    assert "agent 'kid''s workspace" in stderr and f"agent '{whose}' (no longer in the config)" in stderr


def test_the_check_holds_live_and_a_workspace_moved_on_purpose_goes_through(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "agents").mkdir(parents=True)  # an agent has run here

    def config(agents: list[dict[str, Any]]) -> None:
        tmp = home / "hermit.yaml.tmp"
        tmp.write_text(json.dumps({"agents": {"defaults": {"memory_search": {"provider": "none"}},
                                              "list": agents}}), encoding="utf-8")
        os.replace(tmp, home / "hermit.yaml")

    config([{"id": "main", "default": True}, {"id": "family"}])
    first = load_config(StatePaths(home))
    workspaces_check.record(first.agents, first.paths)  # as the gateway does at its start
    live = LiveConfig(first)
    record = home / "agents" / "workspaces.json"
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    config([{"id": "main", "default": True}, {"id": "kid", "workspace": str(home / "workspace-family")}])
    with pytest.raises(ConfigError, match="agent 'family' \\(no longer in the config\\)"):
        live.current()  # live: the reload is refused, the gateway lets no channel sender in until it is fixed
    link = tmp_path / "link"
    link.symlink_to(home / "workspace-family")
    config([{"id": "main", "default": True}, {"id": "kid", "workspace": str(link)}])
    with pytest.raises(ConfigError, match="workspace-family"):
        load_config(StatePaths(home))  # a link to it is the same folder
    # Handing family's notes on on purpose: its line removed from the record, as the hint says.
    data = json.loads(record.read_text())
    del data["workspaces"]["family"]
    record.write_text(json.dumps(data), encoding="utf-8")
    config([{"id": "main", "default": True}, {"id": "kid", "workspace": str(home / "workspace-family")}])
    assert [a.id for a in live.current().agents] == ["main", "kid"]


def test_an_agent_added_again_for_someone_else_does_not_hand_them_its_memory(tmp_path: Path) -> None:
    """`family` removed, later added again under its id for another person's bot (edit, edit, start): its workspace
    and sessions are the old family's. The new owner, unknown to the routes record, was a promotion the config
    states and read the first family owner's MEMORY.md; now the start is refused (gateway/agent_heirs.py)."""
    home = tmp_path / "home"
    home.mkdir()
    d = driver_with("1:TOKENONE", "2:TOKENTWO")
    relative, stranger = "2002", "4004"

    async def main() -> tuple[int | None, str, list[str]]:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            await d.start()
            try:
                env = env_for(d)
                fam = {"api_base": d.fakes["bot1"].base_url, "poll_timeout_seconds": 1, "token_env": "TG_BOT1",
                       "owners": [relative], "dm_policy": "allowlist"}
                fam2 = {**fam, "api_base": d.fakes["bot2"].base_url, "token_env": "TG_BOT2", "owners": [stranger]}
                agents = [{"id": "main", "default": True}, {"id": "family"}]
                save(home, provider, agents, {"fam": fam},
                     [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "fam"}}])
                (home / "workspace-family").mkdir()
                (home / "workspace-family" / "MEMORY.md").write_text(f"# Memory\n\n{FAMILY_NOTE}\n", encoding="utf-8")
                gw = await Gateway(home, env).start()
                try:
                    assert await dm(d, "bot1", relative, "hi") == "agent says hi"
                finally:
                    await gw.stop()
                save(home, provider, [{"id": "main", "default": True}], {}, [])  # edit: family removed
                save(home, provider, agents, {"fam2": fam2},  # edit: added again, for someone else's bot
                     [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "fam2"}}])
                return await start_and_ask(home, env, d, stranger, provider)
            finally:
                await d.stop()

    code, stderr, asked = run(main, timeout=PROC_TIMEOUT * 3)
    assert not any(FAMILY_NOTE in text for text in asked[1:])  # the stranger read nothing of the old family's
    assert code not in (0, None)
    assert f"telegram/fam2/{stranger} (new to agent family, whose owners telegram/fam/{relative} no longer reach it" \
        in stderr
