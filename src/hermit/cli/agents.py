"""`hermit agents list|add ID`: the configured agents, and adding one to the config file safely.

`add` inserts the agent into `agents.list` in the file's own text (hermit.config.edit keeps every
comment and the layout), validates the result with the same loader every command uses, and only then
replaces the file (temp file + fsync + rename, mode kept). When `agents.list` was empty the implicit
`main` agent is written out first, so adding a second agent never drops the first.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermit.cli.context import CliContext
from hermit.config.paths import DEFAULT_AGENT_ID
from hermit.errors import ConfigError

if TYPE_CHECKING:
    from hermit.config.load import LoadedConfig


def configure(a: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit agents` (its name and help are in the table of cli/commands.py)."""
    aa = a.add_subparsers(dest="agents_command", metavar="SUBCOMMAND", required=True)
    p = aa.add_parser("list", help="configured agents")
    p.add_argument("--json", action="store_true", help="print the agents as a JSON list")
    p.set_defaults(func=cmd_list)
    p = aa.add_parser("add", help="add an agent to the config and create its workspace")
    p.add_argument("id", help="agent id: lowercase letters, digits, '-' or '_'")
    p.add_argument("--workspace", dest="agent_workspace", help="workspace dir (default: <state>/workspace-<id>)")
    p.add_argument("--model", help="model for this agent, <provider>/<model>")
    p.set_defaults(func=cmd_add)


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    loaded = ctx.config()
    rows = [{
        "id": a.id,
        "default": a.is_default,
        "workspace": str(a.workspace),
        "model": a.settings.model,
        "sandbox": a.settings.sandbox.mode,
        "memory": a.settings.memory_search.provider if a.settings.memory_search.enabled else "off",
        "index": str(a.index_path),
    } for a in loaded.agents]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(str(r["id"])) for r in rows) + 2
    for r in rows:
        mark = "*" if r["default"] else " "
        print(f"{mark} {r['id']:<{width}} {r['workspace']}  model={r['model'] or '(auto)'}  "
              f"sandbox={r['sandbox']}  memory={r['memory']}")
    print("(* = default agent)")
    return 0


def _check_id(agent_id: str) -> None:
    """The id by the config's own rule (config/schema.py AgentEntry), said as a mistake in the command — not
    as a line of hermit.yaml the user never wrote."""
    import re

    from pydantic import ValidationError

    from hermit.config.schema import AgentEntry

    try:
        AgentEntry(id=agent_id)
    except ValidationError:
        slug = re.sub(r"[^a-z0-9_-]+", "-", agent_id.lower()).strip("-_")[:64]
        raise ConfigError(f"{agent_id!r} is not a valid agent id: an id is lowercase letters, digits, '-' and '_', "
                          "starts with a letter or digit and has at most 64 characters",
                          f"e.g. hermit agents add {slug or 'helper'}") from None


def cmd_add(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.config_file import ConfigText, edit_config
    from hermit.config.edit import append_agents
    from hermit.config.load import build_config, parse_config_text
    from hermit.workspace import ensure_workspace

    _check_id(args.id)
    built: list[LoadedConfig] = []  # the config as `add` validated it

    def add(current: ConfigText) -> str:
        path, text, is_yaml = current.path, current.text, current.is_yaml
        data, _ = parse_config_text(text, str(path), is_yaml)
        agents = data.get("agents") or {}
        if not isinstance(agents, dict):
            raise ConfigError(f"{path}: 'agents' must be a mapping", "fix the config by hand, then retry")
        entries = agents.get("list") or []
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: agents.list must be a list", "fix the config by hand, then retry")
        ids = [e.get("id") for e in entries if isinstance(e, dict)]
        if args.id in ids or (not entries and args.id == DEFAULT_AGENT_ID):
            raise ConfigError(f"agent {args.id!r} already exists", "pick another id; `hermit agents list` shows them")
        entry: dict[str, Any] = {"id": args.id}
        if args.agent_workspace:
            entry["workspace"] = str(Path(args.agent_workspace).expanduser().resolve())
        if args.model:
            entry["model"] = args.model
        new_entries = [entry] if entries else [{"id": DEFAULT_AGENT_ID}, entry]  # the implicit main becomes explicit
        # Validate the intended data first: a bad id or model is reported before the file is touched.
        build_config({**data, "agents": {**agents, "list": [*entries, *new_entries]}}, ctx.paths, path)
        new_text = append_agents(text, new_entries, is_yaml=is_yaml, source=str(path))
        new_data, where = parse_config_text(new_text, str(path), is_yaml)
        built.append(build_config(new_data, ctx.paths, path, where))
        return new_text

    path = edit_config(ctx, add).path
    loaded = built[-1]
    agent = loaded.agent(args.id)
    earlier = _left_by_an_earlier_agent(ctx, loaded, args.id, default_workspace=not args.agent_workspace)
    report = ensure_workspace(agent.workspace)
    print(f"added agent {agent.id} to {path}")
    print(f"workspace {agent.workspace} (created: {', '.join(report.created) or 'nothing new'})")
    if earlier:
        print(f"note: an earlier agent {agent.id} left {'; '.join(earlier)}. They are this agent's now: whoever it "
              "answers (its owners, contacts and groups) continues those sessions and finds those notes, and the "
              "jobs run again. To start afresh, stop the gateway, move them away and `hermit cron remove` the jobs.")
    print(f"talk to it with: hermit --agent {agent.id} chat")
    from hermit.cli.running_gateway import after_change_note

    note = after_change_note(ctx.home)
    if note:
        print(f"note: {note}")
    return 0


def _left_by_an_earlier_agent(ctx: CliContext, loaded: LoadedConfig, agent_id: str, *, default_workspace: bool) -> list[str]:
    """What an agent of this id left when it was taken out of the config (its folders and jobs stay): re-added,
    a new agent — perhaps bound to other people — would take over its owner's sessions, its contacts' rooms,
    its notes and its scheduled jobs without a word. A workspace named with --workspace is the user's choice."""
    from hermit.errors import HermitError
    from hermit.scheduler.control import CronJobs

    agent = loaded.agent(agent_id)
    found = []
    if default_workspace and agent.workspace.exists():
        found.append(f"its workspace {agent.workspace} (MEMORY.md, notes)")
    if agent.sessions_dir.parent.exists():
        found.append(f"its sessions and chats' rooms in {agent.sessions_dir.parent}")
    if agent.index_path.exists():
        found.append(f"its memory index {agent.index_path}")
    try:
        jobs = [j.id for j in CronJobs(ctx.home, loaded).load().jobs if j.agent_id == agent_id]
    except HermitError:
        jobs = []
    if jobs:
        found.append(f"{len(jobs)} cron job{'s' if len(jobs) > 1 else ''} ({', '.join(jobs)})")
    return found
