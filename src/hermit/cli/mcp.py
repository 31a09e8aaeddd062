"""`hermit mcp serve [--agent ID]`: serve an agent's memory to other agents over MCP on stdio."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermit.cli.context import CliContext

if TYPE_CHECKING:
    from hermit.config.load import AgentConfig, LoadedConfig
    from hermit.config.schema import McpConfig

log = logging.getLogger("hermit.mcp")


def configure(s: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit mcp` (its name and help are in the table of cli/commands.py)."""
    ss = s.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("serve", help="serve memory_search, memory_get and memory_append on stdio",
                      description="Speak MCP on stdin/stdout (logs go to stderr). Add it to a client with "
                                  "`claude mcp add hermit -- hermit mcp serve`.")
    p.add_argument("--agent", dest="mcp_agent", metavar="ID", help="whose memory to serve (default: the default agent)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="stderr log level (default WARNING)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.mcp_server import serve_stdio

    if args.mcp_agent:
        ctx.agent_id = args.mcp_agent
    # stdout is the protocol: every log line goes to stderr, whatever main() configured.
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if ctx.debug else args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = ctx.agent()
    service = ctx.memory_service(agent, long_lived=True)
    try:
        serve_stdio(agent, service, live_settings(ctx.config(), agent))
    finally:
        service.close()
    return 0


def live_settings(loaded: LoadedConfig, agent: AgentConfig) -> Callable[[], McpConfig]:
    """The `mcp` section as hermit.yaml says it at each call (a client keeps its server running for days, so a
    setting read once at start outlived the owner's change): re-read when the file changes (LiveConfig: a stat
    per call). Fails closed: while the file does not load, clients read as a non-owner and memory_append is
    refused; once the agent served is gone from the config or has another workspace, every call is refused
    with a ConfigError naming the restart that serves it as it is now."""
    from hermit.config.schema import McpConfig
    from hermit.errors import ConfigError
    from hermit.gateway.live_config import LiveConfig

    live = LiveConfig(loaded, routing=False)  # no channel: an owner move the gateway refuses is not ours
    said: list[str] = []
    strict = McpConfig(share_private_memory=False, allow_append=False)

    def current() -> McpConfig:
        try:
            now = live.current()
        except ConfigError as e:
            if said[-1:] != [e.message]:
                said.append(e.message)
                log.error("%s does not load (%s), so until it is fixed MCP clients read as a non-owner and "
                          "memory_append is refused", live.where, e.message)
            return strict
        said.clear()
        try:
            same = now.agent(agent.id).workspace == agent.workspace
        except ConfigError:
            same = False
        if not same:
            raise ConfigError(f"agent {agent.id!r} is no longer in {live.where} with the workspace {agent.workspace}, "
                              "so this MCP server stops serving it",
                              "restart the server (in the client) to serve the agent as the config names it now")
        return now.config.mcp

    return current
