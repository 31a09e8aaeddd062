"""An owner new to an agent whose recorded owners are all gone does not inherit that agent's memory at start.

gateway/owner_routes.py measures each sender the record has against where the config sends them now; an owner id the
record does not have is "a promotion the config states" and goes through. That let an agent id removed and added
again — or an agent's bot rebound — hand a different person the agent's old main session: the `family` agent
removed, later added again under its id (same default workspace, same sessions) and bound to a new bot whose owner
is someone else; they read the MEMORY.md, USER.md and daily logs the first family's owner left there.

Refused at start (owner_routes.refusal asks `heirs`): an owner id not recorded on its account, given the main
session of an agent the record has owners of, none of whom reach it any more, when that agent holds anything (a
MEMORY.md, USER.md or memory/ note in its workspace, or a session). An owner joining an agent whose recorded owner
still reaches it (the owner's second phone) goes through, as does any owner of a brand-new or empty agent. To hand
the agent on on purpose, run `hermit channels accept-routes` (it lists them and records hermit.yaml's routes after
the owner's yes). Checked at start and at each live reload (gateway/records_check.live_refusal, s23): an owner added
live to a running account bound to such an agent was let in until the next start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from hermit.config.load import LoadedConfig
from hermit.gateway.live_config import CONTACTS
from hermit.gateway.owner_routes import GROUP, parts_of


def heirs(before: Mapping[str, str], now: Mapping[str, tuple[str, bool]], loaded: LoadedConfig) -> list[str]:
    """Each `channel/account/owner` (in words) the rule above refuses; `before`: the record, `now`: the routes."""
    split = parts_of

    def is_owner(key: str) -> bool:
        p = split(key)
        return len(p) >= 3 and p[2] != CONTACTS and not p[2].startswith(GROUP)

    recorded_owners: dict[str, set[str]] = {}
    for k, agent in before.items():
        if is_owner(k):
            recorded_owners.setdefault(agent, set()).add(k)
    out = []
    for k, (agent, main) in sorted(now.items()):
        if not main or not is_owner(k) or k in before or agent not in recorded_owners:
            continue
        if any(now.get(old, ("", False))[0] == agent for old in recorded_owners[agent]):
            continue  # someone who reached it still does: they took the new owner in with them
        held = _holds(loaded, agent)
        if held:
            who = ", ".join(sorted("/".join(split(o)[:3]) for o in recorded_owners[agent]))
            out.append(f"{'/'.join(split(k)[:3])} (new to agent {agent}, whose owners {who} no longer reach it; "
                       f"it holds {held})")
    return out


def _holds(loaded: LoadedConfig, agent_id: str) -> str | None:
    a = next((x for x in loaded.agents if x.id == agent_id), None)
    if a is None:
        return None
    for name in ("MEMORY.md", "USER.md"):
        if (a.workspace / name).is_file():
            return name
    if any(p.suffix == ".md" for p in _files(a.workspace / "memory")):
        return "notes in memory/"
    if any(not p.name.endswith(".lock") for p in _files(a.sessions_dir)):
        return "sessions"
    return None


def _files(folder: Path) -> list[Path]:
    try:
        return [folder / n for n in os.listdir(folder)]
    except OSError:
        return []
