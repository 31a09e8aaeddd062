"""`hermit chat`: the terminal REPL — streaming replies, slash commands, history, Ctrl-C / Ctrl-D.

Ctrl-C during a turn cancels that turn (the transcript records the cancellation) and returns to the
prompt; Ctrl-C at the prompt clears the line; Ctrl-D exits. Line editing and history come from
readline when the terminal has it, with history kept in `<state>/chat_history`. With no model
configured the command prints one screen on how to configure a provider instead of failing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from hermit.cli.agent import short_args
from hermit.cli.context import CliContext
from hermit.config.paths import ensure_private_dir
from hermit.errors import HermitError

if TYPE_CHECKING:  # the agent runtime loads when the command runs, so `hermit --help` stays quick
    from hermit.agent.loop import AgentEvent
    from hermit.agent.runtime import AgentRuntime

HISTORY_FILE = "chat_history"
HELP = """\
/new [message]    start a new session (the message, if any, is its first prompt);
                  the end of the old one is saved to memory/YYYY-MM-DD-<slug>.md
/reset [message]  same as /new
/compact [focus]  summarise older turns now (e.g. /compact focus on decisions)
/status           agent, model, session and token counts
/context          what a request contains, block by block, in tokens
/verbose [on|off] show tool calls and results
/exit             quit (or Ctrl-D); Ctrl-C cancels a reply in progress"""


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit chat` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("--session", help="session key (default: agent:<agentId>:main)")
    p.add_argument("--verbose", action="store_true", help="show tool calls and results")
    p.set_defaults(func=run)


def _setup_readline(history: Path) -> Callable[[], None]:
    """Load line history; returns the function that saves it (a no-op without readline)."""
    try:
        import readline
    except ImportError:
        return lambda: None
    with contextlib.suppress(OSError):
        readline.read_history_file(history)
    readline.set_history_length(1000)

    def save() -> None:
        with contextlib.suppress(OSError):
            ensure_private_dir(history.parent)
            readline.write_history_file(history)
            history.chmod(0o600)

    return save


class ChatRepl:
    def __init__(self, runtime: AgentRuntime, session_key: str, *, out: TextIO, read_line: Callable[[str], str],
                 interactive: bool, verbose: bool = False,
                 hint_for: Callable[[HermitError], str] = lambda e: e.hint) -> None:
        self.runtime = runtime
        self.hint_for = hint_for
        self.key = session_key
        self.out = out
        self.read_line = read_line
        self.interactive = interactive
        self.verbose = verbose
        self._started_reply = False

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def error(self, e: HermitError) -> None:
        hint = self.hint_for(e)
        self.say(f"error: {e.message}" + (f"\nhint: {hint}" if hint else ""))

    def banner(self) -> None:
        r = self.runtime
        sandbox = " · sandboxed" if r.sandboxed(self.key) else ""
        self.say(f"Hermit · agent {r.agent.id} · {r.model.profile.ref} · session {self.key}{sandbox}")
        self.say("/help for commands · Ctrl-D to exit")

    def loop(self) -> int:
        if self.interactive:
            self.banner()
        while True:
            try:
                line = self.read_line("\nyou> " if self.interactive else "")
            except EOFError:
                if self.interactive:
                    self.say()
                return 0
            except KeyboardInterrupt:
                self.say("^C")
                continue
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    return 0
                continue
            self.turn(line)

    def command(self, line: str) -> bool:
        """Run a slash command; False means exit."""
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if name in ("/exit", "/quit"):
            return False
        from hermit.agent.lifecycle import parse_compact_command
        from hermit.sessions.reset import parse_reset_command

        reset = parse_reset_command(line, self.runtime.agent.settings.session.reset_triggers)
        focus = parse_compact_command(line)
        if reset.is_reset:
            try:
                started = self.runtime.reset_session(self.key, reset.command or "/new")
            except HermitError as e:
                self.error(e)
                return True
            self.say(started.describe(self.runtime.agent.workspace))
            if reset.rest:
                self.turn(reset.rest)
        elif focus is not None:
            self.say(self.runtime.compact(self.key, focus or None).describe())
        elif name == "/status":
            self.status()
        elif name == "/context":
            report = self.runtime.context_report(self.key)
            self.say(report.render(self.runtime.model.profile.context_window))
        elif name == "/verbose":
            self.verbose = {"on": True, "off": False}.get(rest.lower(), not self.verbose)
            self.say(f"verbose {'on' if self.verbose else 'off'}")
        elif name in ("/help", "/?"):
            self.say(HELP)
        else:
            self.say(f"unknown command {name}\n{HELP}")
        return True

    def status(self) -> None:
        r = self.runtime
        rec = r.session(self.key)
        profile = r.model.profile
        self.say(f"agent      {r.agent.id}  (workspace {r.agent.workspace})")
        self.say(f"model      {profile.ref}  (context window {profile.context_window:,} tokens)")
        self.say(f"session    {self.key}  {rec.session_id if rec else '(not started)'}")
        if rec is not None:
            pct = 100 * rec.context_tokens / profile.context_window if profile.context_window else 0
            self.say(f"tokens     in {rec.input_tokens:,} · out {rec.output_tokens:,} · "
                     f"context {rec.context_tokens:,} ({pct:.1f}%) · compactions {rec.compaction_count}")
        self.say(f"sandbox    {'on' if r.sandboxed(self.key) else 'off'} ({r.agent.settings.sandbox.mode})"
                 f" · memory {'on' if r.memory is not None else 'off'} · verbose {'on' if self.verbose else 'off'}")

    def on_event(self, event: AgentEvent) -> None:
        from hermit.agent.loop import Notice, TextChunk, ToolFinished, ToolStarted

        if isinstance(event, TextChunk):
            if not self._started_reply:
                self.out.write("hermit> ")
                self._started_reply = True
            self.out.write(event.text)
            self.out.flush()
        elif isinstance(event, ToolStarted) and self.verbose:
            self._end_line()
            self.say(f"  · {event.name} {short_args(event.arguments)}")
        elif isinstance(event, ToolFinished) and self.verbose:
            res = event.run.result
            first = res.content.strip().splitlines()[0][:160] if res.content.strip() else "(empty)"
            self.say(f"    {'✗' if res.is_error else '✓'} {first} ({event.run.seconds:.1f}s)")
        elif isinstance(event, Notice) and (event.level == "warning" or self.verbose
                                            or self.runtime.agent.settings.compaction.verbose):
            self._end_line()
            self.say(event.text)

    def _end_line(self) -> None:
        if self._started_reply:
            self.say()
            self._started_reply = False

    def turn(self, text: str) -> None:
        self._started_reply = False
        try:
            result = self.runtime.run_turn(self.key, text, self.on_event, stream=True)
        except KeyboardInterrupt:
            self._end_line()
            self.say("[cancelled]")
            return
        except HermitError as e:
            self._end_line()
            self.error(e)
            return
        self._end_line()
        if result.reset in ("daily", "idle"):
            self.say(f"(the previous session expired — {result.reset} reset — so this is a new session)")
        if not result.delivered and self.verbose:
            self.say("(silent reply: NO_REPLY — nothing delivered)")
        if self.verbose:
            u = result.usage
            self.say(f"  [{u.context_tokens:,} in · {u.output_tokens:,} out · {_count(len(result.tool_calls), 'tool call')}]")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.assistant import NoModelConfigured, build_runtime
    from hermit.cli.setup import stopped_fake_hint
    from hermit.sessions.keys import main_session_key

    try:
        runtime = build_runtime(ctx)
    except NoModelConfigured:
        sys.stdout.write(no_model_screen(ctx))
        return 1
    interactive = sys.stdin.isatty()
    save_history = _setup_readline(ctx.home / HISTORY_FILE) if interactive else (lambda: None)

    def read_line(prompt: str) -> str:
        if interactive:
            return input(prompt)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line

    repl = ChatRepl(runtime, args.session or main_session_key(runtime.agent.id), out=sys.stdout,
                    read_line=read_line, interactive=interactive, verbose=args.verbose,
                    hint_for=lambda e: stopped_fake_hint(ctx, e) or e.hint)
    try:
        return repl.loop()
    finally:
        save_history()
        runtime.close()


def no_model_screen(ctx: CliContext) -> str:
    """What `hermit chat` shows before a model is chosen: `hermit setup` first (it asks, checks the model with
    one tiny request and keeps keys in the owner-only hermit.env), the flags that script it, then the files."""
    from hermit.config.envfile import env_file_path

    config = ctx.paths.config_file() or ctx.home / "hermit.yaml"
    return f"""\
Hermit has no language model to talk to yet. Choose one with:

  hermit setup          asks which model (a local Ollama, Anthropic, OpenAI, any OpenAI-compatible
                        server, or the built-in fake provider), checks it with one tiny request and
                        keeps the key in {env_file_path(ctx.home)} (owner-only)

or by flags, the key on stdin (kept out of your shell history):

  printf '%s\\n' "$KEY" | hermit setup --provider anthropic --api-key-stdin      (claude-sonnet-4-5)
  printf '%s\\n' "$KEY" | hermit setup --provider openai --api-key-stdin         (gpt-4.1)
  hermit setup --provider ollama --model llama3.1                                (a local Ollama)
  hermit setup --provider openai-compatible --base-url http://HOST:PORT/v1 --model MODEL
  hermit setup --provider fake                   (canned replies, to try Hermit without a model)

Then run `hermit chat` again. By hand instead: ANTHROPIC_API_KEY=… or OPENAI_API_KEY=… in
{env_file_path(ctx.home)}, or agents.defaults.model: <provider>/<model> in {config}.
Memory already works offline without a model: try `hermit memory search "..."`.
"""
