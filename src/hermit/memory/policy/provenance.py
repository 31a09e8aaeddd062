"""Where a memory note came from: origin markers written around notes, and reading them back.

A note a session adds to a memory file is wrapped in two HTML comment lines — invisible when the
Markdown is rendered, kept by every editor — naming who wrote it and who may read it (its audience,
memory/policy/audience.py):

    <!-- origin session="agent:main:telegram:group:-100123" channel="telegram" group="-100123" sender="bob" audience="telegram:group:-100123" -->
    - the note
    <!-- /origin -->

The main session's own notes get such a block too, with `audience="owner"`. memory_search reports
the origin of a hit whose lines overlap another writer's block, so the main session can weigh the note
as someone else's. Written text cannot forge or close a marker: every `<!--` in it is escaped before it
is written (`neutralize`), whoever wrote it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

OPEN_RE = re.compile(r"^<!-- origin((?: \w+=\"[^\"]*\")*) -->$")
CLOSE_LINE = "<!-- /origin -->"
_ATTR_RE = re.compile(r"(\w+)=\"([^\"]*)\"")
_UNSAFE = re.compile(r"[\"<>\x00-\x1f\x7f]|--")


@dataclass(frozen=True)
class Origin:
    """Who wrote a note: the session key, and when known the channel, group and sender; and who may read
    it (`audience`; None in blocks written before audiences existed: then derived from `session`)."""

    session: str
    channel: str | None = None
    group: str | None = None
    sender: str | None = None
    audience: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    def describe(self) -> str:
        where = f"{self.channel} " if self.channel else ""
        where += f"group {self.group}" if self.group else f"session {self.session}"
        return f"written from {where}" + (f" by {self.sender}" if self.sender else "")


def _clean(value: str, limit: int = 200) -> str:
    return _UNSAFE.sub(" ", value).strip()[:limit]


def open_line(origin: Origin) -> str:
    # An audience is never cut short: a shortened key would name nobody (and so fail closed, but lose
    # the note for its own chat). Audience keys are marker-safe by construction (memory/policy/audience.py).
    attrs = "".join(f' {k}="{_clean(v, 1000 if k == "audience" else 200)}"' for k, v in origin.to_dict().items())
    return f"<!-- origin{attrs} -->"


def neutralize(text: str) -> str:
    """Text made unable to open or close an origin block (from any writer, the owner's agent included)."""
    return text.replace("<!--", "&lt;!--")


def seal(text: str) -> str:
    """`text` with a close marker added when it ends inside an unclosed block, so that what is appended
    after it is not taken for part of someone else's note."""
    if "<!-- origin" not in text:
        return text
    blocks = origin_blocks(text)
    if not blocks:
        return text
    lines = text.split("\n")
    last = blocks[-1]
    if lines[last.end - 1].strip() == CLOSE_LINE:
        return text
    return text + ("" if text.endswith("\n") or not text else "\n") + CLOSE_LINE + "\n"


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
    return Origin(attrs.get("session", "unknown"), attrs.get("channel"), attrs.get("group"), attrs.get("sender"),
                  attrs.get("audience"))
