"""`hermit --agent ID setup`: what is chosen goes to that agent, not to every agent.

`hermit agents add family` says "talk to it with: hermit --agent family chat", so a user sets the family agent up
the same way. Setup wrote the model to `agents.defaults.model` whatever --agent said (the main agent's model
changed too, and an agent with a model of its own kept it while setup said "updated: model …"), and a bot added
for it answered as the default agent unless the user wrote a `bindings:` entry by hand. Now, for an agent other
than the default one, the model goes into its own `agents.list` entry and the channel account gets a binding
`{agent_id: ID, match: {channel, account_id}}` (an existing binding of exactly that account is re-aimed).

The account's owners (a relative on the family bot) then own that agent's main session, whose exec and file tools
ran unsandboxed under the default `sandbox.mode: non-main`: they could read the default agent's MEMORY.md, its
transcripts and Hermit's keys. Access control fails closed: binding an account to such an agent whose own entry sets
no sandbox mode also writes `sandbox: {mode: all}` into that entry (and says how to undo it when only the user owns
the agent). An entry that sets a mode keeps it (`hermit doctor` warns while it is not `all`). `hermit agents add`
does not: a new agent has no owner yet, and may well be the user's own second agent.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import yaml

from hermit.cli.context import CliContext
from hermit.errors import ConfigError


def other_agent(ctx: CliContext) -> str | None:
    """The agent --agent names when it is not the default one (an unknown id is refused, naming the known)."""
    if not ctx.agent_id:
        return None
    agent = ctx.config().agent(ctx.agent_id)
    return None if agent.is_default else agent.id


def answered_by(ctx: CliContext, channel: str, account: str) -> str:
    """The agent an account's messages go to now, as far as bindings by account say (setup writes those): one
    of exactly that account, else one of the whole channel, else the default agent."""
    loaded = ctx.config()
    plain = [b for b in loaded.config.bindings if b.match.channel == channel and b.match.peer is None
             and b.match.guild_id is None and b.match.team_id is None]
    for want in (account, None, "*"):
        hit = next((b.agent_id for b in plain if b.match.account_id == want), None)
        if hit is not None:
            return hit
    return loaded.agent().id


def lacks_sandbox_mode(entry: Any) -> bool:
    """An agents.list entry that sets no sandbox mode of its own (no `sandbox:`, an empty one, or one without
    `mode`): its main session would take the default's, `non-main` unless the user changed it."""
    sandbox = entry.get("sandbox")
    return sandbox is None or (isinstance(sandbox, dict) and "mode" not in sandbox)


def sandbox_note(agent_id: str) -> str:
    """The one line setup prints when it sandboxed the agent's main session."""
    return (f"agent {agent_id}'s main session now belongs to this account's owner: its exec and file tools run "
            f"sandboxed (sandbox: {{mode: all}} in its agents.list entry), away from other agents' memory and "
            f"Hermit's keys; if only you own agent {agent_id}, set sandbox: {{mode: non-main}} there instead")


def agent_updates(data: dict[str, Any], agent_id: str, model_ref: str | None,
                  account: tuple[str, str] | None) -> list[tuple[tuple[str, ...], Any]]:
    """The key paths to set in the parsed config `data` (after setup's other changes): the agent's list entry
    with its model (and, when an account is bound to it and the entry sets no sandbox mode, `sandbox.mode: all`),
    and `bindings` with the account bound to the agent."""
    updates: list[tuple[tuple[str, ...], Any]] = []
    agents = data.get("agents") or {}
    entries = copy.deepcopy(agents.get("list") or []) if isinstance(agents, dict) else []
    entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == agent_id), None)
    sandbox = account is not None and (entry is None or lacks_sandbox_mode(entry))
    if model_ref is not None or sandbox:
        if entry is None:
            what = "its model" if model_ref is not None else "its sandbox mode"
            raise ConfigError(f"agent {agent_id!r} has no entry under agents.list to put {what} in",
                              f"add it with `hermit agents add {agent_id}`, then run this again")
        if model_ref is not None:
            entry["model"] = model_ref
        if sandbox:
            if isinstance(entry.get("sandbox"), dict):
                entry["sandbox"]["mode"] = "all"
            else:
                entry["sandbox"] = {"mode": "all"}
        updates.append((("agents", "list"), entries))
    if account is not None:
        channel, account_id = account
        bindings = copy.deepcopy(data.get("bindings") or [])
        if not isinstance(bindings, list):
            raise ConfigError("'bindings' in the config is not a list", "fix it by hand, then run this again")
        want = {"channel": channel, "account_id": account_id}
        same = next((b for b in bindings if isinstance(b, dict) and b.get("match") == want), None)
        if same is None:
            bindings.append({"agent_id": agent_id, "match": want})
        else:
            same["agent_id"] = agent_id
        updates.append((("bindings",), bindings))
    return updates


def _add_key(mapping: Any, key: str, value: Any) -> None:
    """`mapping[key] = value` in a ruamel map; a new key goes last, above the comment lines that followed the
    map (they belong to its last key until then: the template's `# models:` after the agents list)."""
    last = list(mapping)[-1] if len(mapping) else None
    mapping[key] = value
    if last is not None and last != key and last in mapping.ca.items:
        # A map's trailing lines belong to its own last key: the nested map's, for `sandbox: {mode: all}`.
        holder, at = mapping, key
        while isinstance(holder[at], dict) and len(holder[at]):
            holder, at = holder[at], list(holder[at])[-1]
        holder.ca.items[at] = mapping.ca.items.pop(last)


def for_agent(text: str, *, is_yaml: bool, source: str, agent_id: str, model_ref: str | None,
              account: tuple[str, str] | None) -> tuple[str, str | None]:
    """`text` (the config after setup's other changes) with the agent's model, binding and sandbox mode set in
    place, and the line to print when the sandbox mode was added (None when not): the list entries and bindings
    stay as they were written, their comments too; anything else that would change is refused, as
    config/edit.py's set_values does."""
    from hermit.config.edit import _plain_to_rt, _yaml_rt, guess_indent, set_values

    plain = (yaml.safe_load(text) if is_yaml else json.loads(text)) or {}
    updates = agent_updates(plain, agent_id, model_ref, account)
    want = copy.deepcopy(plain)
    for path, value in updates:
        want[path[0]] = value if len(path) == 1 else {**want.get(path[0], {}), path[1]: value}
    before_entry = next((e for e in ((plain.get("agents") or {}).get("list") or [])
                         if isinstance(e, dict) and e.get("id") == agent_id), {})
    sandboxed = account is not None and lacks_sandbox_mode(before_entry)
    note = sandbox_note(agent_id) if sandboxed else None
    if not is_yaml:
        return json.dumps(want, indent=2, ensure_ascii=False) + "\n", note
    rt = _yaml_rt()
    mapping, sequence, offset = guess_indent(text)
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    data = rt.load(text)
    if model_ref is not None:
        entry: Any = next(e for e in data["agents"]["list"] if isinstance(e, dict) and e.get("id") == agent_id)
        last = list(entry)[-1]
        entry["model"] = model_ref
        # Comment lines after the entry belong to its last key (the template's `# models:` after the list): they
        # move to the new last key, or the new line would come after them.
        if last != "model" and last in entry.ca.items:
            entry.ca.items["model"] = entry.ca.items.pop(last)
    if sandboxed:
        entry = next(e for e in data["agents"]["list"] if isinstance(e, dict) and e.get("id") == agent_id)
        if isinstance(entry.get("sandbox"), dict):
            _add_key(entry["sandbox"], "mode", "all")
        else:
            _add_key(entry, "sandbox", _plain_to_rt({"mode": "all"}))
    new_bindings = None
    if account is not None:
        bound = dict(updates)[("bindings",)]
        if data.get("bindings") is None:
            new_bindings = bound  # a new top-level section: set_values puts it after the file's closing comments
        elif len(bound) > len(data["bindings"]):
            data["bindings"].append(_plain_to_rt(bound[-1]))
        else:
            for b, want_b in zip(data["bindings"], bound, strict=True):
                if isinstance(b, dict) and b.get("agent_id") != want_b.get("agent_id"):
                    b["agent_id"] = want_b["agent_id"]
    out = io.StringIO()
    rt.dump(data, out)
    new = out.getvalue()
    if new_bindings is not None:
        new = set_values(new, [(("bindings",), new_bindings)], is_yaml=True, source=source)
    if (yaml.safe_load(new) or {}) != want:
        raise ConfigError(f"{source}: could not set agent {agent_id}'s model, binding or sandbox mode without "
                          "changing other settings", "make the change by hand (docs/channels.md, 'Routing')")
    return new, note
