"""`hermit init`: create the state dir, a commented default config and the workspace templates."""

from __future__ import annotations

import argparse

from hermit.cli.context import CliContext
from hermit.cli.preflight import check_environment, creatable_problem
from hermit.config.paths import ensure_private_dir, tighten_dir
from hermit.workspace import ensure_workspace, template_text, write_new


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit init` (its name and help are in the table of cli/commands.py)."""
    p.set_defaults(func=run)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    check_environment(ctx)  # a file where the state dir or config should be: say so, replace nothing
    # A folder this user cannot write: say so before making anything.
    problem = creatable_problem(ctx.home, fill=ctx.paths.config_file() is None)
    if problem is not None:
        raise problem
    # Owner-only: created 0700, an existing one tightened, unless it is shared or not the user's (a
    # `--home /tmp` or `--home ~` keeps its mode: config.paths.tighten_dir).
    ensure_private_dir(ctx.home, own=True, what="the state dir")  # judged again: see config.paths
    tighten_dir(ctx.home)
    if ctx.paths.config_file() is None:
        write_new(ctx.home / "hermit.yaml", template_text("hermit.yaml"), 0o600)
        print(f"created config {ctx.home / 'hermit.yaml'}")
    else:
        print(f"kept config {ctx.paths.config_file()}")
    for agent in ctx.config().agents:
        if ctx.agent_id and agent.id != ctx.agent_id:
            continue
        ws = ctx.workspace if (ctx.workspace and agent.id == ctx.agent().id) else agent.workspace
        report = ensure_workspace(ws)
        made = ", ".join(report.created) or "nothing new"
        print(f"agent {agent.id}: workspace {ws} (created: {made}; kept {len(report.kept)} existing)")
    return 0
