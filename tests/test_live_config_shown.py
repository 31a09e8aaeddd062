"""What a running gateway logs when hermit.yaml adds an agent or a channel account.

New-user walk (s17): `hermit agents add family` while the gateway ran logged about 60 paths of the new agent's
resolved settings ("not applied until the gateway is restarted: agents.family.compaction.…, agents.family.model,
…"), one per key. An agent or an account only one of the two configs has is now named whole; a setting changed
in an agent or account both have is still named by its path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.gateway.live_config import changes


def cfg(home: Path, agents: list[dict[str, Any]] | None = None, accounts: dict[str, Any] | None = None,
        timezone: str = "Europe/Berlin") -> LoadedConfig:
    raw: dict[str, Any] = {"agents": {"defaults": {"timezone": timezone, "memory_search": {"provider": "none"}}},
                           "channels": {"telegram": {"accounts": accounts or {"default": {"owners": ["1"]}}}}}
    if agents:
        raw["agents"]["list"] = agents
    return build_config(raw, StatePaths(home))


def test_an_agent_added_is_named_once_not_by_each_setting(tmp_path: Path) -> None:
    start = cfg(tmp_path, [{"id": "main", "default": True}])
    added = cfg(tmp_path, [{"id": "main", "default": True}, {"id": "family", "model": "fake/family"}])
    applied, restart = changes(start, start, added)
    assert restart == ["agents.family"], restart
    assert applied == []
    # and taken away again: named once too
    assert changes(added, added, start)[1] == ["agents.family"]


def test_an_account_added_is_named_once_and_a_changed_setting_by_its_path(tmp_path: Path) -> None:
    start = cfg(tmp_path)
    more = cfg(tmp_path, accounts={"default": {"owners": ["1"]}, "family": {"owners": ["2"], "dm_policy": "allowlist"}})
    assert changes(start, start, more)[1] == ["channels.telegram.accounts.family"]
    moved = cfg(tmp_path, timezone="Europe/Prague")
    restart = changes(start, start, moved)[1]
    assert restart and all(p.startswith("agents.main.") for p in restart), restart
