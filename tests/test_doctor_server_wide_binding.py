"""`hermit doctor` warns of a Discord server's (or Slack workspace's) binding with no account_id when another bot
account in that channel is bound to another agent: the server binding ranks above the account's (SPEC §15), so a
relative's family bot's channel in your own server would land in your agent's group session (found by the s18
several-agents guard on Discord)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clihere import hermit_here

CONFIG = """agents:
  defaults:
    memory_search: {{provider: none}}
  list:
    - {{id: main, default: true}}
    - {{id: family, sandbox: {{mode: all}}}}
channels:
  discord:
    accounts:
      personal: {{owners: ['600000000000001000']}}
      familybot: {{owners: ['600000000000000077']}}
bindings:
  - {{match: {{channel: discord, account_id: familybot}}, agent_id: family}}
  - {{match: {{channel: discord, guild_id: '900000000000000001'{account}}}, agent_id: main}}
"""


def _access(tmp_path: Path, account: str) -> str:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text(CONFIG.format(account=account), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    done = hermit_here(home, "doctor", "--json", env=env)
    access: dict[str, Any] = {c["name"]: c for c in json.loads(done.stdout)}["access"]
    return f"{access['status']}: {access['detail']}"


def test_a_server_binding_with_no_account_that_takes_another_agents_bot_is_warned_of(tmp_path: Path) -> None:
    said = _access(tmp_path, "")
    assert said.startswith("warn:"), said
    assert ("Discord server 900000000000000001 goes to agent main with no account_id, so it also takes the chats "
            "there of discord account familybot (agent family)") in said, said


def test_the_same_binding_with_its_own_account_is_not(tmp_path: Path) -> None:
    said = _access(tmp_path, ", account_id: personal")
    assert "with no account_id" not in said, said
