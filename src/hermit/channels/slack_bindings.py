"""Slack `peer` bindings that name neither an account nor a workspace.

A Slack member or channel id names someone only within one workspace (`U0123` in workspace A and `U0123` in B
are two people), but a binding's `peer` is compared by id alone: one without `account_id` or `team_id` routes
that id in every workspace the Slack accounts are in to its agent. Sessions stay apart (their keys carry the
workspace, agent/routing.py `session_peer`), so this is routing only — B's stranger reaches the agent meant for
A's contact, with that agent's shared notes. `hermit doctor` names each such binding and the gateway logs it when
it starts; the config still loads (one Slack account is one workspace, where the binding is exact).
"""

from __future__ import annotations

from dataclasses import dataclass

from hermit.config.load import LoadedConfig

SLACK = "slack"


@dataclass(frozen=True)
class Unscoped:
    index: int
    kind: str
    peer_id: str
    agent_id: str

    def describe(self) -> str:
        return (f"bindings[{self.index}] (slack {self.kind} {self.peer_id} -> agent {self.agent_id}) names no "
                f"account_id or team_id")


def unscoped_peer_bindings(loaded: LoadedConfig) -> list[Unscoped]:
    """The Slack bindings with a `peer` id local to a workspace and neither an account (`*` is none) nor a
    `team_id`."""
    out = []
    for i, b in enumerate(loaded.config.bindings):
        m = b.match
        if m.channel != SLACK or m.peer is None or m.team_id is not None:
            continue
        if m.account_id not in (None, "*"):
            continue
        if "@" in m.peer.id or (m.peer.kind == "dm" and m.peer.id.strip().upper().startswith("W")):
            continue  # a Slack Connect member's `U…@T…` names the workspace; a Grid `W…` member id is global
        out.append(Unscoped(i, m.peer.kind, m.peer.id, b.agent_id))
    return out


def fix_text(accounts: list[str]) -> str:
    names = ", ".join(accounts) or "<account>"
    return (f"add `account_id: <the account whose workspace the peer is in>` ({names}) or `team_id: T…` (the "
            "workspace's id) to each binding's match")


def warning(loaded: LoadedConfig) -> str | None:
    """The warning for the gateway's log and `hermit doctor`, or None (none, or one Slack account: one workspace)."""
    found = unscoped_peer_bindings(loaded)
    accounts = sorted(loaded.config.channels.accounts_of(SLACK))
    if not found or len(accounts) < 2:
        return None
    return (f"{'; '.join(u.describe() for u in found)}: with {len(accounts)} Slack accounts ({', '.join(accounts)}) "
            f"{'it matches that id' if len(found) == 1 else 'each matches its id'} in every one of their workspaces, "
            "where it is someone else (another channel) in each, and routes them to that agent")
