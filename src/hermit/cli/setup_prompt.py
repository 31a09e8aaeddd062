"""`hermit setup`'s questions: asked on a terminal; without one, a missing answer is an error naming the flag."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable

from hermit.errors import ConfigError


class Prompter:
    """Questions on a terminal; without one, a missing answer is an error naming the flag to pass."""

    def __init__(self, interactive: bool, ask: Callable[[str], str] = input,
                 secret: Callable[[str], str] = getpass.getpass) -> None:
        self.interactive = interactive
        self._read_line = ask
        self._read_secret = secret

    # Ctrl-D at a prompt stops setup as Ctrl-C does (nothing saved, exit 130): it ended in an EOFError traceback.
    def _ask(self, prompt: str) -> str:
        return _until_eof(self._read_line, prompt)

    def _secret(self, prompt: str) -> str:
        return _until_eof(self._read_secret, prompt)

    def need(self, flag: str, what: str) -> ConfigError:
        return ConfigError(f"hermit setup needs {what}", f"pass {flag} (or run `hermit setup` on a terminal)")

    def text(self, question: str, default: str | None, flag: str, what: str) -> str:
        if not self.interactive:
            if default is None:
                raise self.need(flag, what)
            return default
        shown = f" [{default}]" if default else ""
        while True:
            answer = self._ask(f"{question}{shown}: ").strip()
            if answer or default is not None:
                return answer or (default or "")
            print("  (an answer is needed)")

    def secret(self, question: str) -> str:
        return self._secret(f"{question}: ").strip()

    def choose(self, question: str, options: list[tuple[str, str]], default: int = 1) -> str:
        print(question)
        for i, (_, label) in enumerate(options, start=1):
            print(f"  {i}) {label}")
        while True:
            raw = self._ask(f"choice [{default}]: ").strip() or str(default)
            if raw.isdigit() and 1 <= int(raw) <= len(options):
                return options[int(raw) - 1][0]
            keys = [k for k, _ in options]
            if raw in keys:
                return raw
            print(f"  type a number from 1 to {len(options)}")

    def yes(self, question: str, default: bool = False) -> bool:
        if not self.interactive:
            return default
        answer = self._ask(f"{question} [{'Y/n' if default else 'y/N'}]: ").strip().lower()
        return default if not answer else answer.startswith("y")


def _until_eof(read: Callable[[str], str], prompt: str) -> str:
    try:
        return read(prompt)
    except EOFError:
        print(flush=True)  # the prompt's line ends before main's "interrupted"
        raise KeyboardInterrupt from None


def read_stdin_line(what: str, flag: str) -> str:
    """One answer piped in on stdin (--api-key-stdin, --token-stdin, --secret-stdin FIELD); none is an error."""
    line = sys.stdin.readline().strip()
    if not line:
        raise ConfigError(f"no {what} on stdin", f"pipe it in, one line each: printf '%s\\n' \"$KEY\" | hermit setup … "
                          f"{flag}")
    return line
