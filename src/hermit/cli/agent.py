"""`hermit agent -m "…"`: run one turn of the agent and print the reply (or, with --json, everything)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from hermit.cli.context import CliContext
from hermit.cli.terminal import warn

if TYPE_CHECKING:  # the agent runtime loads when the command runs, so `hermit --help` stays quick
    from hermit.agent.loop import AgentEvent


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit agent` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("-m", "--message", required=True, help="the message ('-' reads it from stdin)")
    p.add_argument("--session", help="session key (default: agent:<agentId>:main)")
    p.add_argument("--json", action="store_true", help="print reply, tool calls and usage as JSON")
    p.add_argument("--verbose", action="store_true", help="show tool calls on stderr")
    p.set_defaults(func=run)


def short_args(arguments: dict[str, Any], limit: int = 120) -> str:
    """A tool call's arguments on one short line, secrets masked before the cut (a key the cut went through
    left its first half, which the output's whole-key masking cannot see)."""
    from hermit.redaction import mask_data

    text = json.dumps(mask_data(arguments), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.agent.loop import Notice, TextChunk, ToolFinished, ToolStarted
    from hermit.cli.assistant import build_runtime
    from hermit.sessions.keys import main_session_key

    text = sys.stdin.read() if args.message == "-" else args.message
    runtime = build_runtime(ctx)
    key = args.session or main_session_key(runtime.agent.id)
    streamed = {"any": False}

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, TextChunk) and not args.json:
            sys.stdout.write(event.text)
            sys.stdout.flush()
            streamed["any"] = True
        elif isinstance(event, ToolStarted) and args.verbose:
            print(f"· {event.name} {short_args(event.arguments)}", file=sys.stderr, flush=True)
        elif isinstance(event, ToolFinished) and args.verbose:
            res = event.run.result
            first = res.content.strip().splitlines()[0][:120] if res.content.strip() else ""
            print(f"  {'✗' if res.is_error else '✓'} {first}", file=sys.stderr, flush=True)
        elif isinstance(event, Notice) and args.verbose:
            print(event.text, file=sys.stderr, flush=True)

    try:
        result = runtime.run_turn(key, text, on_event, stream=not args.json)
    finally:
        runtime.close()
    if args.json:
        from hermit.redaction import mask_data

        # Masked as data: JSON escapes a secret holding `"` or `\\`, and the output's masking looks for it as is.
        print(json.dumps(mask_data({**result.to_dict(), "model": runtime.model.profile.ref}), ensure_ascii=False))
        return 0
    if streamed["any"]:
        sys.stdout.write("\n")
    elif result.delivered:
        print(result.reply)
    if not result.delivered:
        print("(silent reply: nothing delivered)", file=sys.stderr)
    for w in result.warnings:
        warn(w)
    return 0
