"""`hermit completion bash|zsh`: a shell completion script generated from the CLI's own argparse parser
(by shtab), so every command, subcommand and option completes as `--help` lists it."""

from __future__ import annotations

import argparse

from hermit.cli.context import CliContext

INSTALL = {
    "bash": "hermit completion bash > ~/.local/share/bash-completion/completions/hermit",
    "zsh": "hermit completion zsh > \"${fpath[1]}/_hermit\"   # then: autoload -U compinit && compinit",
}


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit completion` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("shell", choices=sorted(INSTALL), help=f"the shell: {INSTALL['bash']}; or {INSTALL['zsh']}")
    p.set_defaults(func=run)


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    import shtab

    from hermit.cli.main import build_parser

    parser = build_parser(full=True)  # every command module, not only the one being run
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0
