"""What the CLI prints goes through one filter: text other people wrote cannot drive the owner's terminal.

A contact's note, a transcript line, a log line or a model's reply quoting them may hold control characters:
`ESC ] 52` writes the clipboard, `ESC [ 2K` / `\\r` erase the provenance label above a note, `ESC ] 8` shows a
link whose target differs from its text, a bidi override reorders what is read. `hermit memory get` and
`hermit sessions show` used to print them raw. Every write to stdout and stderr during a command is now
filtered: C0 controls but tab and newline (and `\\r` before `\\n`), DEL, C1 controls, the bidi controls and
lone surrogates (a file name's undecodable byte, which a C locale would print raw) become visible escapes
(`\\u001b`), which are also valid inside JSON strings, so `--json` output parses to the same values. Two
sequences pass: bold on and off, which `search_view` uses to mark matched words and which can do no more.
A progress bar draws on the stream it was given before the filter (`unfiltered`).

The same filter masks every secret the process registered (hermit.redaction): whatever prints it — a
command's own output, `--json`, a warning, a traceback under `--debug`, a library's log line through the
root handler, the gateway's stderr log — shows `***`. A channel's stored error quoting its bot token, a
`cat hermit.env` an owner's command ran, a model server's URL with its password: no path of the CLI's or the
gateway's output holds them. The one line that must show a secret, `hermit dashboard`'s URL with the gateway
token, says so (`reveal`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from hermit.errors import HermitError
from hermit.redaction import mask

_UNSAFE = re.compile(
    "(\x1b\\[[01]m|\r\n)"  # kept: bold on/off, a Windows line end
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _visible(m: re.Match[str]) -> str:
    return m.group(1) or f"\\u{ord(m.group(0)):04x}"


def terminal_safe(text: str) -> str:
    """`text` with every character that could move the cursor, change the terminal or reorder text escaped."""
    return _UNSAFE.sub(_visible, text)


def one_line(text: object) -> str:
    """`text` for a place that is one line — a file name, a result's label, a warning: its newlines, tabs and
    carriage returns are escaped too (a note named `x\\n1.000  MEMORY.md:3  [memory · owner]` printed a
    forged owner result under its own)."""
    return str(text).replace("\n", "\\u000a").replace("\r", "\\u000d").replace("\t", "\\u0009")


def warn(text: object) -> None:
    """`warning: <text>` on stderr, on one line (a warning quotes file names and others' text)."""
    print(f"warning: {one_line(text)}", file=sys.stderr)


def agent_error(agent_id: str, e: HermitError) -> None:
    """`error: <agent>: …` and its `hint: …` on stderr, for a command that goes on with the other agents."""
    print(f"error: {agent_id}: {e.message}", file=sys.stderr)
    if e.hint:
        print(f"hint: {e.hint}", file=sys.stderr)


class SafeStream:
    """A text stream that writes through `mask` and `terminal_safe`; everything else is the wrapped stream's.
    Each write is masked whole: `print` writes each of its arguments in one piece, so does `json.dump` each
    string."""

    def __init__(self, stream: TextIO) -> None:
        self.unfiltered = stream

    def write(self, text: str) -> int:
        self.unfiltered.write(terminal_safe(mask(text)))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.unfiltered, name)


def unfiltered(stream: TextIO) -> TextIO:
    """The stream under a `SafeStream` (for a progress bar's own drawing), or `stream` itself."""
    inner = getattr(stream, "unfiltered", None)
    return inner if inner is not None else stream


def reveal(text: str, stream: TextIO | None = None) -> None:
    """Print `text` and a newline, made terminal-safe but not masked: for the one line whose purpose is a
    secret (`hermit dashboard`'s one-time sign-in link, asked for on the owner's terminal)."""
    out = unfiltered(stream or sys.stdout)
    out.write(terminal_safe(text) + "\n")
    out.flush()


@contextmanager
def safe_output() -> Iterator[None]:
    """Filter sys.stdout and sys.stderr for the duration (restored after, for callers running commands in
    their own process)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = SafeStream(out) if not isinstance(out, SafeStream) else out
    sys.stderr = SafeStream(err) if not isinstance(err, SafeStream) else err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
