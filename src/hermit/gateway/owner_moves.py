"""Which owner moves cannot widen what anyone reads (gateway/owner_routes.py refuses the others).

A move: a sender (an owner id, or an account's contacts) whom the last gateway gave agent A's main session and
this config gives agent B's, because routing changed. B's main session reads B's MEMORY.md, notes and transcripts,
and runs B's owner tools; its other owners read what the mover says there. Two kinds of move add nothing to
what anyone reads, and are let through (named in `hermit channels accept-routes` and the log, not refused):

- **B is already theirs.** The same id, on the same channel, already reaches B's main session through another
  account whose `owners` list it (the owner owns both bots), and that route is not itself a move.
- **B is fresh, and they move there together.** No owner was ever recorded reaching B, B is neither the default
  agent nor the web chat's (the token holder's), B's workspace holds only the untouched templates and its sessions
  folder no transcript, the folders its memory_search.extra_paths names nothing; every sender reaching B's main session now comes from the same agent A's main session
  (they already read each other there); and B's owner commands are sandboxed (`sandbox.mode: all`), or A's were
  not (an unsandboxed owner command of A's already reads whatever B's could, as this user).

A move into a session of their own at B (a contact, a group, or an owner under a per-peer `dm_scope`) reads B's
shared notes (memory/ text outside origin blocks: the owner's daily logs), now and as B's owners write them:
harmless when B is fresh as above (nothing in its memory, sessions or memory_search.extra_paths; not the default
or web chat's agent; no owner recorded) and whoever reaches B's main session came from A's with them, or when the
same id already reaches B through another account.

Everything else is refused: the default agent, an agent with owners or private memory, a move of several
agents' owners into one, a move from A's sandboxed main session into B's unsandboxed one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hermit.agent.routing import WEBCHAT, RouteInput, Router
from hermit.config.load import AgentConfig, LoadedConfig
from hermit.errors import ConfigError
from hermit.gateway.live_config import CONTACTS

if TYPE_CHECKING:
    from hermit.gateway.owner_routes import Move

WALK_LIMIT = 2000  # entries of a workspace looked at; more is "not fresh" without looking further


def _parts(key: str) -> list[str]:
    from hermit.gateway.owner_routes import parts_of

    return parts_of(key)


def judge(found: Sequence[Move], before: Mapping[str, str], now: Mapping[str, tuple[str, bool]],
          loaded: LoadedConfig) -> list[Move]:
    """`found` with `harmless` set on each move that cannot widen what anyone reads (the module's two rules)."""
    moved = {m.key for m in found}
    by_agent: dict[str, list[Move]] = {}
    for m in found:
        by_agent.setdefault(m.now, []).append(m)
    out = []
    for m in found:
        why = _already_theirs(m, now, moved) or _fresh(m, before, now, by_agent.get(m.now, []), loaded)
        out.append(dataclasses.replace(m, harmless=why))
    return out


def _already_theirs(m: Move, now: Mapping[str, tuple[str, bool]], moved: set[str]) -> str | None:
    channel, account, sender, *team = _parts(m.key)
    if sender == CONTACTS:
        return None
    for k, (agent, main) in now.items():
        c, a, s, *t = _parts(k)
        if (c, s, t) == (channel, sender, team) and a != account and agent == m.now and k not in moved and \
                (main or not m.main):
            where = "main session" if main else "sessions"
            return f"{sender} already reaches agent {m.now}'s {where} as an owner of {c}/{a}"
    return None


def _fresh(m: Move, before: Mapping[str, str], now: Mapping[str, tuple[str, bool]], into: Sequence[Move],
           loaded: LoadedConfig) -> str | None:
    target = m.now
    if len(m.was) != 1 or target in _token_holders(loaded):
        return None
    source = m.was[0]
    if any(agent == target and _parts(k)[2] != CONTACTS and not _parts(k)[2].startswith("group:")
           for k, agent in before.items()):
        return None  # someone owned it before: they would read the mover's words, the mover theirs
    reaching = {k for k, (agent, main) in now.items() if agent == target and main}
    came = {x.key for x in into if x.was == (source,) and x.main}
    # Into a session of their own (a contact, a group): they read B's shared notes, which B's owners write from now
    # on; harmless only while those are A's owners, who wrote what they read at A (audit s22 t11: contacts let into a
    # new agent, or the default one, while empty read the daily logs its other owner wrote there next).
    if (reaching != came) if m.main else not reaching <= came:
        return None  # someone else reaches its main session too (a new owner, owners of another agent)
    agent = _agent(loaded, target)
    if agent is None or _private(agent) is not None:
        return None
    if not m.main:
        return f"agent {target} is new: nothing in its memory or sessions for them to read, and no owner but " \
               f"agent {source}'s"
    was = _agent(loaded, source)
    if agent.settings.sandbox.mode != "all" and (was is None or was.settings.sandbox.mode == "all"):
        return None
    return f"agent {target} is new (no owner yet, nothing in its memory or sessions) and all who reach it come " \
           f"from agent {source}"


def _token_holders(loaded: LoadedConfig) -> set[str]:
    """The default agent and the agent the web chat reaches: the token holder's main sessions."""
    out = {loaded.agent().id}
    with contextlib.suppress(ConfigError):  # bindings naming no agent: the gateway does not start on them
        out.add(Router.from_config(loaded).resolve(RouteInput(WEBCHAT, "default", "dm", "owner",
                                                              sender_is_owner=True)).agent_id)
    return out


def _agent(loaded: LoadedConfig, agent_id: str) -> AgentConfig | None:
    return next((a for a in loaded.agents if a.id == agent_id), None)


def _private(agent: AgentConfig) -> str | None:
    """What of the agent's own there is to read (a file's path), None when nothing: its workspace holds only the
    untouched templates and empty folders, its sessions folder no file but locks, and the folders of notes its
    memory_search.extra_paths names nothing (audit s22 t11: an agent whose entry, copied from main's, indexed the
    owner's vault was "new" with an empty workspace, and a relative moved there searched the vault)."""
    from hermit.workspace import TEMPLATE_FILES, template_text

    seen = 0
    roots = [(agent.workspace, "workspace"), (agent.sessions_dir, "sessions")]
    own = Path(os.path.realpath(agent.workspace))
    roots += [(agent.workspace / Path(e).expanduser(), "extra") for e in agent.settings.memory_search.extra_paths
              if not Path(os.path.realpath(agent.workspace / Path(e).expanduser())).is_relative_to(own)]
    for root, kind in roots:
        if kind == "extra" and (root.is_file() or root.is_symlink()):
            return str(root)
        for top, dirs, files in os.walk(root, onerror=None):
            seen += len(dirs) + len(files)
            if seen > WALK_LIMIT:
                return f"{top} (more than {WALK_LIMIT} entries)"
            for name in files:
                path = Path(top) / name
                if kind == "sessions" and name.endswith(".lock"):
                    continue
                if kind == "workspace" and path.parent == root and name in TEMPLATE_FILES and _is(path, template_text(name)):
                    continue
                return str(path)
    return None


def _is(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False
