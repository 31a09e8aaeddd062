"""What an approved contact can and cannot do under this config: the one answer `hermit pairing approve` prints
and the web app's pairing.approve returns, so the two can never disagree.

Approving a pairing code makes a *contact*, and a contact normally gets a sandboxed session of their own. The
config can say otherwise: `session.dangerously_share_main_session_with_contacts` puts them in the agent's main
session (MEMORY.md, the owner's notes, no sandbox) and `sandbox.mode: off` runs their session's tools on this
machine. So the terms follow the sender's DM as the bus routes it (bindings, dm_scope) to the agent that
answers, and say so loudly; when the route cannot be worked out (the config does not load, a binding names an
unknown agent) they claim nothing about the main session and say to check the config.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermit.agent.routing import RouteInput, Router
from hermit.channels.pairing import printable
from hermit.config.allowlist import matches
from hermit.config.load import LoadedConfig
from hermit.errors import HermitError

_NOT_MAIN = "reach your main session, MEMORY.md or your owner-only notes"


@dataclass(frozen=True)
class ContactTerms:
    """`main`/`sandboxed`: where the contact's DMs land; None when that could not be worked out."""

    can: str
    cannot: str | None  # None: nothing can be promised
    owner_hint: str
    undo: str
    warnings: tuple[str, ...]
    session_key: str | None
    main: bool | None
    sandboxed: bool | None

    def lines(self) -> list[str]:
        """The terms as `hermit pairing approve` prints them, one aligned line each, warnings last."""
        return [f"  They can:    {self.can}.",
                *([f"  They cannot: {self.cannot}."] if self.cannot else []),
                f"  {self.owner_hint}.",
                f"  Undo with:   {self.undo}",
                *self.warnings]

    def text(self) -> str:
        """The terms as one paragraph (the web app's answer), warnings first."""
        parts = [*self.warnings, f"They can {self.can}."]
        if self.cannot:
            parts.append(f"They cannot {self.cannot}.")
        parts += [f"{self.owner_hint}.", f"Undo: {self.undo}"]
        return " ".join(parts)


def contact_terms(loaded: LoadedConfig | None, channel: str, account_id: str, sender_id: str, *,
                  unknown: str = "the config could not be read") -> ContactTerms:
    """The terms of `sender_id` approved on `channel`/`account_id`; `loaded` None: the config did not load
    (`unknown` says why)."""
    owners_key = f"channels.{channel}.accounts.{account_id}.owners"
    shown = printable(sender_id, 128)  # the real id routes; this one is shown
    undo = f"hermit pairing revoke {channel} {shown} --account {account_id}"
    owner_hint = f"To make someone an owner instead, add their id to {owners_key} in the config"
    route = None
    if loaded is not None:
        try:
            route = Router.from_config(loaded).resolve(RouteInput(channel, account_id, "dm", sender_id))
        except HermitError as e:  # a binding to an unknown agent: the approval stands, `hermit doctor` says more
            unknown = f"their messages could not be routed: {e.message}"
    if loaded is None or route is None:
        return ContactTerms(
            "talk to the assistant", None, owner_hint, undo,
            (f"WARNING: {unknown}, so which session they reach (your main session, if the config shares it with "
             "contacts) and whether its tools are sandboxed is unknown: run `hermit doctor`, or revoke them "
             f"({undo}).",), None, None, None)
    agent = loaded.agent(route.agent_id).settings
    # Several agents: say which one answers them (whose shared notes and instruction files they reach).
    who = f"the assistant (agent {route.agent_id})" if len(loaded.config.agents.list) > 1 else "the assistant"
    mode = agent.sandbox.mode  # agent/confinement.py's rule: `all` confines the main session too
    sandboxed = mode == "all" or (mode == "non-main" and not route.main)
    warnings: list[str] = []
    if route.main:
        warnings.append(f"WARNING: agents {route.agent_id} has session.dangerously_share_main_session_with_"
                        "contacts: true, so they reach your MAIN session (MEMORY.md, your notes"
                        f"{'' if sandboxed else ', an unsandboxed shell'}). Turn it off, or revoke them ({undo}).")
        tools = "its tools are confined to the workspace" if sandboxed else "its tools are NOT sandboxed"
        can = f"talk to {who} in your MAIN session ({route.session_key}), with MEMORY.md; {tools}"
    else:
        tools = "its tools run in the sandbox" if sandboxed else "its tools are NOT sandboxed (see below)"
        can = f"talk to {who} in their own session ({route.session_key}); {tools}"
    if mode == "off":
        warnings.append(f"WARNING: agents {route.agent_id} has sandbox.mode: off, so their session's tools (exec, "
                        "files) run unsandboxed on this machine. Set sandbox.mode: non-main.")
    cannot = None if route.main else _NOT_MAIN + (", nor run commands outside the sandbox" if sandboxed else "")
    warnings += _server_bindings_skipped(loaded, channel, route.agent_id, shown)
    acc = loaded.config.channels.accounts_of(channel).get(account_id)
    if acc is not None and matches(channel, acc.owners, sender_id):
        warnings.append(f"They are also listed under {owners_key}, so they are an owner anyway.")
    return ContactTerms(can, cannot, owner_hint, undo, tuple(warnings), route.session_key, route.main, sandboxed)


def _server_bindings_skipped(loaded: LoadedConfig, channel: str, agent_id: str, shown: str) -> list[str]:
    """A Discord DM carries no server, so `guild_id` bindings never route one: a member of the work server
    who DMs the bot reaches the agent its DMs route to (often the default), not the server's agent."""
    if channel != "discord":
        return []
    others = sorted({b.agent_id for b in loaded.config.bindings
                     if b.match.channel == "discord" and b.match.guild_id is not None and b.agent_id != agent_id})
    if not others:
        return []
    return [f"Note: Discord DMs carry no server, so the guild_id bindings (agent {', '.join(others)}) do not "
            f"apply to them: their DMs reach agent {agent_id}. To route them elsewhere, bind their id: "
            f"{{match: {{channel: discord, peer: {{kind: dm, id: \"{shown}\"}}}}, agent_id: …}}."]
