"""Where a memory note came from: origin markers written around notes from non-main sessions, and reading them back.

A note a group chat (or anyone but the owner's main session) adds to a memory file is wrapped in two
HTML comment lines — invisible when the Markdown is rendered, kept by every editor and indexed with
the note:

    <!-- origin channel="telegram" group="-100123" sender="bob" session="agent:main:telegram:group:-100123" -->
    - the note
    <!-- /origin -->

memory_search reports the origin of a hit whose lines overlap such a block, so the main session can
weigh the note as someone else's. Text from a non-main session cannot forge or close a marker: every
`<!--` in it is escaped before it is written (`neutralize`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

OPEN_RE = re.compile(r"^<!-- origin((?: \w+=\"[^\"]*\")*) -->$")
CLOSE_LINE = "<!-- /origin -->"
_ATTR_RE = re.compile(r"(\w+)=\"([^\"]*)\"")
_UNSAFE = re.compile(r"[\"<>\x00-\x1f\x7f]|--")
MAX_SCAN_BYTES = 20_000_000


@dataclass(frozen=True)
class Origin:
    """Who wrote a note: the session key, and when known the channel, group and sender."""

    session: str
    channel: str | None = None
    group: str | None = None
    sender: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    def describe(self) -> str:
        where = f"{self.channel} " if self.channel else ""
        where += f"group {self.group}" if self.group else f"session {self.session}"
        return f"written from {where}" + (f" by {self.sender}" if self.sender else "")


def _clean(value: str) -> str:
    return _UNSAFE.sub(" ", value).strip()[:200]


def open_line(origin: Origin) -> str:
    attrs = "".join(f' {k}="{_clean(v)}"' for k, v in origin.to_dict().items())
    return f"<!-- origin{attrs} -->"


def neutralize(text: str) -> str:
    """Text from a non-main session, made unable to open or close an origin block."""
    return text.replace("<!--", "&lt;!--")


def wrap(text: str, origin: Origin) -> str:
    """`text` (already neutralized) inside an origin block, ending with a newline."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{open_line(origin)}\n{body}{CLOSE_LINE}\n"


@dataclass(frozen=True)
class OriginBlock:
    start: int  # 1-based line of the opening marker
    end: int  # 1-based line of the closing marker (the last line of the file when it is missing)
    origin: Origin


def origin_blocks(text: str) -> list[OriginBlock]:
    lines = text.split("\n")
    out: list[OriginBlock] = []
    open_at: int | None = None
    attrs: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        m = OPEN_RE.match(line.strip())
        if m and open_at is None:
            open_at, attrs = number, dict(_ATTR_RE.findall(m.group(1)))
        elif line.strip() == CLOSE_LINE and open_at is not None:
            out.append(OriginBlock(open_at, number, _origin(attrs)))
            open_at = None
    if open_at is not None:  # an unclosed block runs to the end: fail towards "not the owner's"
        out.append(OriginBlock(open_at, len(lines), _origin(attrs)))
    return out


def _origin(attrs: dict[str, str]) -> Origin:
    return Origin(attrs.get("session", "unknown"), attrs.get("channel"), attrs.get("group"), attrs.get("sender"))


def origin_of_lines(blocks: list[OriginBlock], start: int, end: int) -> Origin | None:
    """The origin of lines start..end (1-based, inclusive): the first block they overlap, else None."""
    for b in blocks:
        if b.start <= end and start <= b.end:
            return b.origin
    return None


SNIPPET_MAX_CHARS = 700


def annotate_origins(results: list[dict[str, Any]], workspace: Path) -> list[dict[str, Any]]:
    """memory_search results with `origin` (and a snippet prefix saying it) on hits from others' notes."""
    blocks: dict[str, list[OriginBlock]] = {}
    out = []
    for r in results:
        if r.get("source") != "memory":
            out.append(r)
            continue
        path = str(r.get("path", ""))
        if path not in blocks:
            blocks[path] = _file_blocks(workspace / path)
        origin = origin_of_lines(blocks[path], int(r.get("startLine", 0)), int(r.get("endLine", 0)))
        if origin is None:
            out.append(r)
            continue
        snippet = f"[{origin.describe()}] {r.get('snippet', '')}"
        out.append({**r, "origin": origin.to_dict(), "snippet": snippet[:SNIPPET_MAX_CHARS]})
    return out


def _file_blocks(path: Path) -> list[OriginBlock]:
    try:
        if not path.is_file():  # regular files only: never block on a FIFO
            return []
        text = path.read_bytes()[:MAX_SCAN_BYTES].decode("utf-8", errors="replace")
    except OSError:
        return []
    return origin_blocks(text) if "<!-- origin" in text else []
