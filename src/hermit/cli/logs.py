"""`hermit logs [-f] [--json] [-n N]`: the gateway's log (`<state>/logs/gateway.log`), last lines or followed.

The gateway writes text or JSON lines (`gateway run --log-format`); `--json` prints JSON either way (a
text line is split into ts, level, logger and msg; traceback lines join the entry above them). `-f`
keeps reading as the file grows and reopens it when the gateway rotates it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermit.cli.context import CliContext
from hermit.errors import HermitError
from hermit.gateway.logs import log_entry, log_path, split_lines

POLL_SECONDS = 0.3


def configure(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit logs` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    p.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="how many of the last lines (default 50)")
    p.add_argument("--json", action="store_true", help="one JSON object per entry, whatever the log's format")
    p.set_defaults(func=run)


class Printer:
    """Prints lines as they are, or as JSON entries (a continuation line is kept until its entry ends)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.pending: dict[str, Any] | None = None

    def line(self, text: str) -> None:
        if not self.as_json:
            print(text, flush=True)
            return
        entry = log_entry(text)
        if entry is None:  # a traceback's line: it belongs to the entry above
            if self.pending is None:
                self.pending = {"msg": text}
            else:
                self.pending["exc"] = f"{self.pending['exc']}\n{text}" if "exc" in self.pending else text
            return
        self.flush()
        self.pending = entry

    def flush(self) -> None:
        if self.pending is not None:
            print(json.dumps(self.pending, ensure_ascii=False), flush=True)
            self.pending = None


def _last_lines(path: Path, n: int) -> tuple[list[str], int]:
    """The last `n` lines and the size read up to."""
    with path.open("rb") as f:
        data = f.read()
    lines = split_lines(data)
    return list(deque(lines, maxlen=max(n, 0))), len(data)


def _follow(path: Path, offset: int) -> Iterator[str]:
    """New lines of `path` from `offset`, across rotations (a new inode, or a shorter file)."""
    f = path.open("rb")
    f.seek(offset)
    inode = os.fstat(f.fileno()).st_ino
    buffer = b""
    try:
        while True:
            chunk = f.read()
            if chunk:
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    yield raw.decode("utf-8", "replace")
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                time.sleep(POLL_SECONDS)
                continue
            if st.st_ino != inode or st.st_size < f.tell():
                f.close()
                f = path.open("rb")
                inode = os.fstat(f.fileno()).st_ino
                continue
            yield ""  # nothing new: lets the caller flush what it holds
            time.sleep(POLL_SECONDS)
    finally:
        f.close()


def run(ctx: CliContext, args: argparse.Namespace) -> int:
    path = log_path(ctx.home)
    if not path.exists():
        raise HermitError(f"no gateway log at {path} yet", "start the gateway (`hermit gateway run`, or "
                          "`hermit service install` for a service); its log is written there")
    lines, size = _last_lines(path, args.lines)
    out = Printer(args.json)
    for text in lines:
        out.line(text)
    out.flush()
    if not args.follow:
        return 0
    try:
        for text in _follow(path, size):
            if text:
                out.line(text)
            else:
                out.flush()
    except KeyboardInterrupt:
        out.flush()
    sys.stdout.flush()
    return 0
