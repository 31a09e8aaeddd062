"""`hermit` entry point: global options, command groups, and turning HermitErrors into message + hint."""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from hermit import __version__
from hermit.cli.commands import command_index, command_word, declared_commands
from hermit.cli.context import CliContext
from hermit.cli.preflight import require_initialized
from hermit.errors import HermitError, disk_full

# Each module exposes register(subparsers) and sets `func(ctx, args) -> int` on its parsers.
COMMAND_MODULES = (
    "hermit.cli.init", "hermit.cli.memory", "hermit.cli.doctor",
    "hermit.cli.agent", "hermit.cli.chat", "hermit.cli.sessions", "hermit.cli.agents",
    "hermit.cli.pairing", "hermit.cli.mcp",
    "hermit.cli.gateway",
    "hermit.cli.cron",
    "hermit.cli.channels",
    "hermit.cli.setup", "hermit.cli.models", "hermit.cli.logs", "hermit.cli.backup",
    "hermit.cli.completion",
)

# Commands that read or write an agent's memory or sessions: before `hermit init` they say so and create
# nothing. READ_ONLY ones do not need a writable state dir.
REQUIRES_INIT = {"memory", "agent", "chat", "sessions"}
READ_ONLY = {"sessions"}

Handler = Callable[[CliContext, argparse.Namespace], int]


OWNER_ONLY_UMASK = 0o077
GLOBAL_OPTIONS_WITH_VALUES = ("--home", "--agent", "--workspace")
GLOBAL_FLAGS = ("--debug",)


def build_parser(command: str | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The parser with `command`'s module imported and registered; the other commands are listed from
    their modules' source (hermit.cli.commands) so that parsing and `--help` stay quick. `full`
    imports every command module."""
    p = argparse.ArgumentParser(prog="hermit", description="Hermit — a local-first personal AI assistant "
                                "whose memory is plain Markdown.")
    p.add_argument("--home", help="state dir (default: $HERMIT_HOME or ~/.hermit)")
    p.add_argument("--agent", help="agent id (default: the default agent, 'main')")
    p.add_argument("--workspace", help="use this workspace instead of the configured one")
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    p.add_argument("--version", action="version", version=f"hermit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        declared = None if full else declared_commands(name)
        if declared is None or any(d.name == command for d in declared):
            importlib.import_module(name).register(sub)
        else:
            for d in declared:
                sub.add_parser(d.name, help=d.help, add_help=False)
    return p


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def hoist_global_options(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """argv with the global options written after the command moved in front of it, so that
    `hermit memory search --workspace DIR "q"` means what `hermit --workspace DIR memory search "q"`
    does. An option the command itself defines (`agents add --workspace`, `mcp --agent`) stays its own."""
    start = command_index(argv, GLOBAL_OPTIONS_WITH_VALUES)
    if start is None:
        return argv
    front, out = argv[:start], []
    owned: set[str] = set()  # the options of the command (and subcommand) named so far
    current = parser
    i = start
    while i < len(argv):
        token = argv[i]
        if token == "--":
            out.extend(argv[i:])
            break
        name = token.split("=", 1)[0]
        if (name in GLOBAL_OPTIONS_WITH_VALUES or name in GLOBAL_FLAGS) and name not in owned:
            n = 2 if name in GLOBAL_OPTIONS_WITH_VALUES and "=" not in token else 1
            front.extend(argv[i:i + n])
            i += n
            continue
        sub = _subparsers(current).get(token)
        if sub is not None:
            current = sub
            owned |= {o for a in sub._actions for o in a.option_strings}
        out.append(token)
        i += 1
    return front + out


def _dash_query(args: argparse.Namespace, extra: list[str]) -> bool:
    """`memory search -x`: a single unknown '-word' with no query given is the query (a typo of a
    long option, '--…', stays an error)."""
    if (getattr(args, "memory_command", None) == "search" and args.query is None and len(extra) == 1
            and extra[0].startswith("-") and not extra[0].startswith("--")):
        args.query = extra[0]
        return True
    return False


def configured_secrets(ctx: CliContext) -> list[str]:
    """Every secret value the config names (provider API keys, channel tokens, by value or by variable),
    for masking; nothing when the config cannot be read (the error being shown may say why)."""
    from hermit.channels.platforms import accounts as channel_accounts
    from hermit.channels.platforms import secrets as channel_secrets
    from hermit.cli.assistant import PROVIDER_KEY_VARS

    try:
        loaded = ctx.config()
    except HermitError:
        return [ctx.environ.get(n, "") for n in PROVIDER_KEY_VARS]
    names = set(PROVIDER_KEY_VARS)
    names.update(pc.api_key_env for pc in loaded.config.models.providers.values() if pc.api_key_env)
    values = [ctx.environ.get(n, "") for n in names]
    values += [pc.api_key for pc in loaded.config.models.providers.values() if pc.api_key]
    for name, _, account in channel_accounts(loaded.config.channels):  # bot tokens, app secrets
        values += [s.plaintext or ctx.environ.get(s.env_name, "") for s in channel_secrets(name, account)]
    return [v for v in values if v]


def _report(e: HermitError, as_json: bool, ctx: CliContext | None = None) -> None:
    from hermit.redaction import KNOWN, register

    if ctx is not None:
        register(*configured_secrets(ctx))  # a provider or platform may echo a key into its error
    message, hint = KNOWN.mask(e.message), KNOWN.mask(e.hint)
    if as_json:  # scripts reading --json output get the error as JSON too
        print(json.dumps({"results": [], "error": message, "hint": hint}, ensure_ascii=False))
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def _disk_full(e: BaseException, home: Path) -> HermitError | None:
    """A full disk that reached the CLI without a message of its own (a session or log write): said
    plainly, the traceback only with --debug."""
    if isinstance(e, OSError):
        return disk_full(e.filename or home, "a file") if e.errno in (errno.ENOSPC, errno.EDQUOT) else None
    if type(e).__module__.startswith(("sqlean", "sqlite3")):
        from hermit.db import is_disk_full

        return disk_full(home, "a database") if is_disk_full(e, home) else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_word(argv, GLOBAL_OPTIONS_WITH_VALUES))
    argv = hoist_global_options(parser, argv)
    args, extra = parser.parse_known_args(argv)
    if extra and not _dash_query(args, extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    ctx = CliContext.from_args(args.home, args.agent, args.workspace, args.debug)
    # Everything Hermit creates — state dir, workspace notes, logs, transcripts, files its tools write —
    # is owner-only, whichever module creates it and with whatever mode it asks for. Restored on return
    # for callers that run commands in their own process (tests, scripts).
    umask = os.umask(OWNER_ONLY_UMASK)
    try:
        if args.command in REQUIRES_INIT:
            require_initialized(ctx, writes=args.command not in READ_ONLY)
        return func(ctx, args)
    except HermitError as e:
        if args.debug:
            raise
        _report(e, bool(getattr(args, "json", False)), ctx)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # only a full disk is named here; anything else keeps its traceback
        full = _disk_full(e, ctx.home)
        if full is None or args.debug:
            raise
        _report(full, bool(getattr(args, "json", False)), ctx)
        return 1
    finally:
        os.umask(umask)


if __name__ == "__main__":
    sys.exit(main())
