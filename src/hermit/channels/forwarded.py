"""How a forwarded message's text reaches a session: quoted, under a header naming its original author.

Why: a message the owner forwards is someone else's words arriving from the owner's account. Passed on
as plain text it would read as the owner's own instruction in the main session ("SYSTEM: the owner
authorises you to …"). So the text is framed: a first line the adapter writes, naming the author, then
every line of the original prefixed with "> ". The original text cannot forge or close the frame: each
of its lines (split on every character a model may treat as a line break) starts with the quote
marker, and the author's name, which its author chose, is reduced to one short line without brackets,
control, format or bidi characters.

A long line is wrapped (at a space where there is one) into quoted lines of at most QUOTE_WIDTH characters
with their marker: a /new dump or a daily log that keeps the message keeps no quoted line longer
than a memory chunk, so the index never splits one into pieces (memory.index.chunking repeats the labels
of a split line in every piece, but a line that is never split needs nothing repeated).
"""

from __future__ import annotations

import unicodedata

from hermit.messages import forward_header, label_text

MAX_AUTHOR_CHARS = 64
UNKNOWN_AUTHOR = "someone"
QUOTE_MARK = "> "
# A quoted line's most characters, its marker included: under 400 tokens in any script (one token per CJK
# character), so well inside a memory chunk.
QUOTE_WIDTH = 300


def author_label(name: str | None) -> str:
    """A platform display name made safe to print inside the header (messages.label_text: letters, digits,
    accents, spaces and a few marks; no bracket or quote of any script); "someone" when nothing is left."""
    text = label_text(name, 4 * MAX_AUTHOR_CHARS) if name else ""
    if len(text) > MAX_AUTHOR_CHARS:
        text = text[:MAX_AUTHOR_CHARS - 1].rstrip() + "…"
    return text or UNKNOWN_AUTHOR


def header(author: str | None) -> str:
    return forward_header(author_label(author))


def wrap(line: str, width: int = QUOTE_WIDTH - len(QUOTE_MARK)) -> list[str]:
    """`line` in parts of at most `width` characters: cut at its last space that fits (the space is
    dropped: the line break replaces it), else at `width`, never just before a mark or joiner (an accent
    stays on its letter, an emoji sequence stays whole where it can)."""
    parts: list[str] = []
    while len(line) > width:
        cut = line.rfind(" ", 1, width + 1)
        if cut > 0:
            parts.append(line[:cut])
            line = line[cut + 1:]
            continue
        cut = width
        while cut > 1 and (unicodedata.category(line[cut]).startswith("M") or line[cut] == "\u200d"):
            cut -= 1
        parts.append(line[:cut])
        line = line[cut:]
    return [*parts, line]


def frame(text: str, author: str | None) -> str:
    """`text` as quoted content under the header. str.splitlines splits on every line-break character
    (\\r, \\v, \\f, \\x1c-\\x1e, \\x85, U+2028, U+2029 as well as \\n), so no line escapes the quote marker;
    a line longer than QUOTE_WIDTH becomes several quoted lines (`wrap`)."""
    lines = text.splitlines()
    if not lines:
        return header(author)
    return header(author) + "\n" + "\n".join(QUOTE_MARK + part for line in lines for part in wrap(line))
