"""`hermit` entry point: global options, command groups, and turning HermitErrors into message + hint."""

from __future__ import annotations

import contextlib
import os
import sys

# First, before the imports below and the command's own modules (a gateway's take a few hundred ms): the `hermit`
# process itself — the console script, `python -m hermit`, `python -m hermit.cli.main`; not a test or a script that
# imports this module — makes itself non-dumpable (PR_SET_DUMPABLE 0), so no other process of its uid reads the keys
# from /proc/<pid>/environ while it starts. main() makes sure again (redaction.keep_environment_private). What is
# left is Python's own start-up, before this line runs.
if (HERMIT_PROCESS := (
        __name__ == "__main__" or os.path.basename(sys.argv[0]) == "hermit"
        or getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) == "hermit.__main__")) \
        and sys.platform.startswith("linux"):
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0; libc's own symbol (no find_library: no ldconfig)

import argparse
import errno
import json
import logging
import stat
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from hermit import __version__
from hermit.cli.commands import BY_NAME, COMMANDS, command_index, command_word
from hermit.cli.context import CliContext, configured_secrets
from hermit.cli.preflight import ownership_problem, require_initialized
from hermit.cli.terminal import safe_output
from hermit.errors import HermitError, disk_full
from hermit.redaction import MaskLog, register_later

Handler = Callable[[CliContext, argparse.Namespace], int]


OWNER_ONLY_UMASK = 0o077
GLOBAL_OPTIONS_WITH_VALUES = ("--home", "--agent", "--workspace")
GLOBAL_FLAGS = ("--debug",)
MAX_TOKEN_FILE_BYTES = 4096
# Under `hermit --help`'s list of commands, which is in no order a new user starts from.
FIRST_STEPS = ("first time: `hermit setup` (a model; `--channel telegram` and the others add a chat channel), then "
               "`hermit doctor`; `hermit chat` talks in the terminal; `hermit service install` keeps the gateway (web "
               "app, chat channels, scheduled jobs) running. `hermit COMMAND --help` gives a command's options.")


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that a command group typed without its subcommand (`hermit service`, `hermit
    memory`) prints the group's help — its subcommands, each with a line — instead of only "the following arguments
    are required: SUBCOMMAND". The groups' own subparsers are of this class too (argparse makes them of their
    parent's)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required: SUBCOMMAND") and self._subparsers is not None:
            self.print_help(sys.stderr)
            self.exit(2, f"{self.prog}: error: give one of the subcommands above\n")
        super().error(message)


def build_parser(command: str | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The parser with `command`'s arguments added from its module (hermit.cli.commands); the other commands
    are listed by name and help only, so that parsing and `--help` stay quick. `full` adds every command's
    arguments (shell completion needs them all)."""
    p = Parser(prog="hermit", description="Hermit — a local-first personal AI assistant "
                                "whose memory is plain Markdown.", epilog=FIRST_STEPS)
    p.add_argument("--home", help="state dir (default: $HERMIT_HOME or ~/.hermit)")
    p.add_argument("--agent", help="agent id (default: the default agent, 'main')")
    p.add_argument("--workspace", help="use this workspace instead of the configured one")
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    p.add_argument("--version", action="version", version=f"hermit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for c in COMMANDS:
        parser = sub.add_parser(c.name, help=c.help)
        if full or c.name == command:
            c.load()(parser)
    return p


def hoist_global_options(argv: list[str]) -> list[str]:
    """argv with the global options written after the command moved in front of it, so that
    `hermit memory search --workspace DIR "q"` means what `hermit --workspace DIR memory search "q"`
    does. An option a subcommand defines itself (`agents add --workspace`, `mcp serve --agent`; the
    command table's `own_options`) stays its own."""
    start = command_index(argv, GLOBAL_OPTIONS_WITH_VALUES)
    if start is None:
        return argv
    command = BY_NAME.get(argv[start])
    front, out = argv[:start], [argv[start]]
    owned: tuple[str, ...] = ()
    subcommand = None
    i = start + 1
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
        if subcommand is None and not token.startswith("-"):
            subcommand = token
            owned = command.own_options.get(token, ()) if command is not None else ()
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


def _gateway_words(ctx: CliContext, e: HermitError) -> str | None:
    """A scheduler hint whose last words are the gateway's restart, in words for how it runs (or its start)."""
    targets = sys.modules.get("hermit.scheduler.targets")  # not loaded: the error is not one of its (no import)
    if targets is None or not isinstance(e, targets.NoAccount):
        return None
    from hermit.cli.running_gateway import start_or_restart

    return e.hint_then(start_or_restart(ctx))


def _report(e: HermitError, as_json: bool, ctx: CliContext | None = None) -> None:
    from hermit.redaction import KNOWN, register

    hint = e.hint
    if ctx is not None:
        from hermit.cli.setup import stopped_fake_hint

        register(*configured_secrets(ctx))  # a provider or platform may echo a key into its error
        hint = stopped_fake_hint(ctx, e) or _gateway_words(ctx, e) or hint
    message, hint = KNOWN.mask(e.message), KNOWN.mask(hint)
    if as_json:  # scripts reading --json output get the error as JSON too
        print(json.dumps({"results": [], "error": message, "hint": hint}, ensure_ascii=False))
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def _process_secrets(ctx: CliContext) -> list[str]:
    """What the config names (provider keys, channel tokens) and the gateway token, when its file exists: any
    command may run a tool or show an error, and none of these may reach a transcript, a provider or the
    screen. A token file that is not a small regular file is not read."""
    from hermit.gateway.state import token_path

    values = configured_secrets(ctx)
    path = token_path(ctx.home)
    try:
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_TOKEN_FILE_BYTES:
            values.append(path.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        pass  # none yet, or unreadable: nothing of it can be shown either
    return values


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
    try:
        # Nothing a contact wrote may drive the owner's terminal, and no registered secret is shown (cli/terminal.py).
        with safe_output():
            try:
                return _main(argv)
            except Exception as e:
                if argv is not None:  # a test or a script calling main(argv) gets the exception itself
                    raise
                # The `hermit` process: --debug's traceback (or a bug's) is printed here, through the filter, not by
                # the interpreter after it (an error may quote a key or a URL's password). Exit status 1 either way.
                _print_crash(e)
                return 1
    finally:
        if argv is None and HERMIT_PROCESS:
            _quick_exit()


def _quick_exit() -> None:
    """Before the `hermit` process exits: collect what is garbage now — a file or a connection in a reference cycle
    is flushed and closed by its finalizer here, as the interpreter's exit would — then freeze the rest, so the
    interpreter's exit does not walk every object again (the model runtime, pydantic, the command's modules: about
    0.13 s of CPU at each exit, and the tests start thousands of `hermit` processes). What stays alive is still freed
    at exit by reference counting (module globals, sqlite connections, open files); atexit handlers (logging's
    flush) run as before."""
    import gc

    gc.collect()
    gc.freeze()


def _print_crash(e: BaseException) -> None:
    """The traceback of a bug that ended the process. When stderr is systemd's journal (a service's `hermit
    gateway run`; other groups read it) the exception's message — it may quote a chat's text, a peer id, a file
    someone sent — is left out: the frames and the exception's type say where it broke."""
    from hermit.gateway.logs import JOURNAL_HINT, stderr_is_journal

    if not stderr_is_journal():
        traceback.print_exception(e)
        return
    frames = "".join(traceback.format_tb(e.__traceback__))
    print(f"Traceback (most recent call last):\n{frames}{type(e).__module__}.{type(e).__qualname__}"
          f" (its message is kept out of the journal; {JOURNAL_HINT})", file=sys.stderr)


def _main(argv: list[str] | None) -> int:
    real_process = argv is None
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_word(argv, GLOBAL_OPTIONS_WITH_VALUES))
    argv = hoist_global_options(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and not _dash_query(args, extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # masked before formatting (its stream masks again, cheaply)
        handler.addFilter(MaskLog())
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    ctx = CliContext.from_args(args.home, args.agent, args.workspace, args.debug)
    # Before the command runs; read (config, provider table, token file) only when something is first masked —
    # every line printed is. The shell completion script holds nothing of them and is read at every shell start.
    if args.command != "completion":
        register_later(lambda: _process_secrets(ctx))
    if real_process:
        # The `hermit` process itself (not a test or script calling main(argv)): its environment holds the keys,
        # and the commands its exec runs have its uid. Non-dumpable, they cannot read /proc/<its pid>/environ.
        from hermit.redaction import keep_environment_private

        keep_environment_private()
    # Everything Hermit creates — state dir, workspace notes, logs, transcripts, files its tools write —
    # is owner-only, whichever module creates it and with whatever mode it asks for. Restored on return
    # for callers that run commands in their own process (tests, scripts).
    umask = os.umask(OWNER_ONLY_UMASK)
    try:
        command = BY_NAME[args.command]
        # A state dir another user owns or may write is refused before any command reads or writes it (the
        # doctor reports it as a failed check; completion reads nothing; restore judges its target itself).
        if args.command not in ("completion", "doctor", "restore") and (problem := ownership_problem(ctx.home)):
            raise problem
        # A restore killed half-way is finished or rolled back before anything reads the state dir, so no command
        # runs on a mix of two snapshots (restore_journal.py; restore does it itself once it judged its target).
        if args.command not in ("completion", "restore"):
            from hermit.cli.restore_journal import finish_interrupted_restores

            finish_interrupted_restores(ctx.home)
        if command.requires_init:
            require_initialized(ctx, writes=command.writes)
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
