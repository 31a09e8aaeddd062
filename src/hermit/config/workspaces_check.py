"""An agent's workspace may not be one another agent used before (its MEMORY.md, USER.md and daily logs).

config/load.py `_one_each` refuses two agents of one config that share a workspace or nest one in the other. It
cannot see the past: an agent removed from hermit.yaml leaves its workspace on disk, and a new agent pointed at it
(`workspace: ~/.hermit/workspace-family`) — or at the owner's main workspace while the `main` agent is left out of
agents.list, or at the folder an agent moved away from — read that agent's memory as its own: a relative's agent
got the owner's MEMORY.md. So every workspace an agent was loaded with is recorded (real paths, links resolved) in
`<state>/agents/workspaces.json`, and a config giving an agent a workspace that is, holds or lies inside one
recorded for another agent id is refused at load (the gateway's start and each live reload, and every command),
naming both agents and how to hand the notes on on purpose (remove the path from the record).

No record yet (a genuinely first start) adopts the config as it is. A record that is there but cannot be trusted
(damaged by a crash, a symlink, another user's, its folder a link), or that is missing on a state dir a gateway has
run on while an agent's workspace exists, is not read as "no record": `trusted` raises, and the gateway refuses to
start (gateway/owner_routes.refusal) or to apply a reload until `hermit channels accept-routes` records the config
as it is after the owner's review (s23 t5). Other commands load on (the check refuses nothing from such a record),
and the record is never written over it but by that command.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from hermit.config import records
from hermit.config.paths import StatePaths
from hermit.durable import write_atomic
from hermit.errors import ConfigError

RECORD = "workspaces.json"
_MAX_BYTES = 1024 * 1024


class _Agent(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def workspace(self) -> Path: ...


def record_path(paths: StatePaths) -> Path:
    return paths.home / "agents" / RECORD


def check(agents: Sequence[_Agent], paths: StatePaths, src: object) -> None:
    """Raise ConfigError when an agent's workspace is, holds or lies inside one recorded for another agent id (a
    config being built: the file loaded, and the candidates `hermit agents add` and `hermit setup` check)."""
    path = record_path(paths)
    try:
        recorded = _read(path)
    except records.UntrustedRecord:
        recorded = None  # the gateway refuses on it (`trusted`); a command reads its own notes
    mine = {a.id: os.path.realpath(a.workspace) for a in agents}
    if recorded is not None:
        for a in agents:
            here = Path(mine[a.id])
            for other, places in sorted(recorded.items()):
                if other == a.id:
                    continue
                for place in places:
                    if here == Path(place) or here.is_relative_to(place) or Path(place).is_relative_to(here):
                        raise _refusal(a.id, here, other, Path(place), path, src, other in mine)


def trusted(agents: Sequence[_Agent], paths: StatePaths, ran_before: bool) -> None:
    """UntrustedRecord when the record cannot be trusted, or is missing though a gateway has run here (`ran_before`)
    and an agent's workspace exists: which agent used it before cannot be told (the record removed, then another
    agent pointed at the owner's former workspace)."""
    path = record_path(paths)
    if _read(path) is not None or not ran_before:
        return
    there = [a.id for a in agents if os.path.isdir(a.workspace)]
    if there:
        raise records.untrusted(path, _WHAT, f"is missing, though a gateway has run here and the workspaces of "
                                f"{', '.join(there)} exist: which agent used each before cannot be told")


def record(agents: Sequence[_Agent], paths: StatePaths, *, replace: bool = False) -> None:
    """Add each agent's workspace to the record (hermit.yaml as loaded, never a candidate not saved yet). A record
    that cannot be trusted is left as it is (the gateway refuses on it), unless `replace` (`hermit channels
    accept-routes`, after the owner's review): then it is written anew from `agents`."""
    path = record_path(paths)
    try:
        recorded = _read(path)
    except records.UntrustedRecord:
        if not replace:
            return
        recorded = None
    mine = {a.id: os.path.realpath(a.workspace) for a in agents}
    merged = {k: list(v) for k, v in (recorded or {}).items()}
    for agent_id, where in mine.items():
        if where not in merged.setdefault(agent_id, []):
            merged[agent_id].append(where)
    # Nothing to guard before any agent ran or any workspace exists (a config written before `hermit init`): a
    # command that only says "run init" leaves the state dir as it found it; the first load after init records.
    exists = path.parent.is_dir() or any(os.path.isdir(where) for where in mine.values())
    if (merged != recorded or replace) and exists and paths.home.is_dir() and not records.folder_is_link(path):
        # Another user's state dir read (uid 65534 given root's home): nothing recorded, nothing refused.
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, exist_ok=True)
            write_atomic(path, json.dumps({"version": 1, "workspaces": merged}, indent=2) + "\n", mode=0o600,
                         keep_mode=False)


def _refusal(agent: str, here: Path, other: str, place: Path, record: Path, src: object, current: bool) -> ConfigError:
    how = "is" if here == place else "holds" if place.is_relative_to(here) else "lies inside"
    whose = f"agent '{other}' used before" if current else f"agent '{other}' (no longer in the config) used"
    return ConfigError(
        f"{src}: agent '{agent}''s workspace {here} {how} the workspace {place} that {whose}: its MEMORY.md, "
        f"USER.md and daily logs would be '{agent}''s memory, read by whoever '{agent}' serves",
        f"give agent '{agent}' a workspace of its own (agents.list[].workspace); to hand '{other}''s notes on to "
        f"'{agent}' on purpose, remove \"{place}\" from \"{other}\" in {record}")


_WHAT = "the record of which workspace each agent used"


def _read(path: Path) -> dict[str, list[str]] | None:
    """The record; None when there is none; UntrustedRecord when it is there but cannot be trusted."""
    raw = records.read(path, _WHAT)
    if raw is None:
        return None
    try:
        data = json.loads(raw) if len(raw) <= _MAX_BYTES else None
    except ValueError:
        raise records.untrusted(path, _WHAT, "is not valid JSON (damaged)") from None
    raw_map = data.get("workspaces") if isinstance(data, dict) else None
    if not isinstance(raw_map, dict) or not all(isinstance(k, str) and isinstance(v, list) for k, v in raw_map.items()):
        raise records.untrusted(path, _WHAT, "is not the record Hermit writes (damaged)")
    return {k: [p for p in v if isinstance(p, str) and p.startswith("/")] for k, v in raw_map.items()}
