"""`hermit doctor` on agents.defaults' loosening settings another agent does not get.

Since s18 a setting under agents.defaults that widens who reaches an agent's private text or its machine
(heartbeat.share_alerts_with_target, session.dangerously_share_main_session_with_contacts, sandbox.mode: off) is
the default agent's alone (config/load._own_opt_ins): another agent — a relative's family bot, whose main session is
the relative's — falls back to the built-in value unless its own agents.list entry sets it. A user who wrote it under
defaults for everyone saw nothing say so. This check names, per other agent, each default it does not get, the value
it runs with, and the exact lines for its own entry if that is meant.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hermit.cli.checks import Check, check

if TYPE_CHECKING:
    from hermit.cli.context import CliContext
    from hermit.config.load import AgentConfig, WithheldDefault

NAME = "agent defaults"


def _yaml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)  # quoted: a bare `off` is YAML's false


def _said(w: WithheldDefault) -> str:
    return f"{w.section}.{w.key}: {_yaml_value(w.value).strip(chr(34))}"


def own_entry_lines(agent: AgentConfig, *, as_json: bool = False) -> str:
    """The settings agents.defaults gave and `agent` did not get, as they go in its own agents.list entry."""
    sections: dict[str, dict[str, object]] = {}
    for w in agent.withheld:
        sections.setdefault(w.section, {})[w.key] = w.value
    if as_json:
        return json.dumps({"id": agent.id, **sections})
    lines = [f"- id: {agent.id}"]
    for section, keys in sections.items():
        lines.append(f"  {section}:")
        lines += [f"    {key}: {_yaml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines)


@check(NAME, needs=("config",))
def withheld_defaults_check(ctx: CliContext) -> str | Check:
    loaded = ctx.config()
    default = loaded.agent().id
    others = [a for a in loaded.agents if a.withheld]
    if not others:
        if len(loaded.agents) == 1:
            return "one agent: agents.defaults are all its own"
        return "every agent gets agents.defaults as written (none of its loosening settings is left out)"
    as_json = loaded.source is not None and loaded.source.suffix == ".json"
    parts, entries = [], []
    for a in others:
        runs = ", ".join(f"{w.section}.{w.key}: {_yaml_value(getattr(getattr(a.settings, w.section), w.key))}"
                         .replace('"', "") for w in a.withheld)
        parts.append(f"agent '{a.id}' does not get {', '.join(_said(w) for w in a.withheld)} (it runs with {runs})")
        entries.append(own_entry_lines(a, as_json=as_json))
    where = "its entry under agents.list" if len(others) == 1 else "each one's entry under agents.list"
    indented = "\n".join("         " + line for e in entries for line in e.splitlines())
    return Check(NAME, "warn",
                 f"agents.defaults loosens settings for the default agent ({default}) only: " + "; ".join(parts),
                 f"nothing to do if that is what you want (a relative's agent should not share your alerts, main "
                 f"session or an unsandboxed shell); if you mean them for {'that agent' if len(others) == 1 else 'those agents'} "
                 f"too, put the lines in {where} "
                 f"of {loaded.source.name if loaded.source else 'the config'}:\n{indented}")


DOCTOR_CHECKS = (withheld_defaults_check,)
