"""The CLI's command table: every top-level command's name, one-line help and the function that adds its
arguments, so `hermit --help` lists them all while only the command being run is imported.

Importing every command module would pull in the agent runtime, the config schema, the gateway… (half
a second on a busy machine) just to print help. A new command is one line here plus its module's
`configure(parser)`; tests/test_cli_main.py checks that each line's module still defines what the line
says (its options included), so the table cannot drift from the code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Configure = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: str  # "module:function" that adds the command's arguments and sets `func(ctx, args) -> int`
    # Reads or writes an agent's memory or sessions: before `hermit init` it says so and creates nothing;
    # `writes=False` ones need no writable state dir.
    requires_init: bool = False
    writes: bool = True
    # Global options (--home, --agent, --workspace, --debug) that a subcommand defines as its own, by
    # subcommand: written after it, they stay its own instead of moving in front of the command.
    own_options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def load(self) -> Configure:
        module, _, func = self.configure.partition(":")
        configure: Configure = getattr(importlib.import_module(module), func)
        return configure


COMMANDS: tuple[Command, ...] = (
    Command("init", "create the state dir, config and workspace (never overwrites)", "hermit.cli.init:configure"),
    Command("memory", "index, search and read Markdown memory", "hermit.cli.memory:configure",
            requires_init=True, own_options={"migrate": ("--agent",), "claim": ("--agent",)}),
    Command("doctor", "check the installation and config, and say how to fix problems",
            "hermit.cli.doctor:configure"),
    Command("agent", "send one message to the agent and print the reply", "hermit.cli.agent:configure",
            requires_init=True),
    Command("chat", "chat with the agent in the terminal", "hermit.cli.chat:configure", requires_init=True),
    Command("sessions", "list sessions and show transcripts", "hermit.cli.sessions:configure",
            requires_init=True, writes=False),
    Command("agents", "list or add agents (each with its own workspace and memory)", "hermit.cli.agents:configure",
            own_options={"add": ("--workspace",)}),
    Command("pairing", "list, approve, deny and revoke chat senders (contacts)", "hermit.cli.pairing:configure"),
    Command("mcp", "memory tools for other agents (Claude Code, Cursor…) over MCP", "hermit.cli.mcp:configure",
            own_options={"serve": ("--agent",)}),
    Command("gateway", "the gateway (web chat, channels, scheduler): run it in the foreground, show its status",
            "hermit.cli.gateway:configure_gateway"),
    Command("service", "keep the gateway running as a user service (systemd, launchd): install, status, start, "
            "stop, restart, uninstall", "hermit.cli.service_control:configure"),
    Command("dashboard", "open the web app in a browser (and print its URL with the token)",
            "hermit.cli.gateway:configure_dashboard"),
    Command("devices", "browsers signed in to the web app: list them, sign one out", "hermit.cli.devices:configure"),
    Command("cron", "scheduled jobs: list, add, edit, remove, run now, show runs", "hermit.cli.cron:configure"),
    Command("channels", "chat channel accounts (Telegram, Discord, Slack, WhatsApp)",
            "hermit.cli.channels:configure"),
    Command("setup", "choose a language model and add a chat channel (interactive, or by flags)",
            "hermit.cli.setup:configure"),
    Command("models", "configured model providers and models; test that one answers", "hermit.cli.models:configure"),
    Command("logs", "show the gateway's log (-f to follow it)", "hermit.cli.logs:configure"),
    Command("backup", "write config, keys, workspaces, sessions and jobs to one archive",
            "hermit.cli.backup:configure_backup"),
    Command("restore", "restore a `hermit backup` archive into an empty state dir",
            "hermit.cli.backup:configure_restore"),
    Command("completion", "print a bash or zsh completion script", "hermit.cli.completion:configure"),
)
BY_NAME = {c.name: c for c in COMMANDS}


def command_index(argv: list[str], options_with_values: tuple[str, ...]) -> int | None:
    """Where in argv the command is: the first word that is not a global option or its value."""
    skip = False
    for i, token in enumerate(argv):
        if skip:
            skip = False
            continue
        if token in options_with_values:
            skip = True
            continue
        if token == "--":
            return None
        if token.startswith("-"):
            continue
        return i
    return None


def command_word(argv: list[str], options_with_values: tuple[str, ...]) -> str | None:
    """The first word of argv that is not a global option or its value: the command being run."""
    i = command_index(argv, options_with_values)
    return None if i is None else argv[i]
