"""`hermit mcp serve [--agent ID]`: serve an agent's memory to other agents over MCP on stdio."""

from __future__ import annotations

import argparse
import logging
import sys

from hermit.cli.context import CliContext


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
        serve_stdio(agent, service, ctx.config().config.mcp)
    finally:
        service.close()
    return 0
