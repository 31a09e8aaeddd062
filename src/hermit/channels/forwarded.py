"""How a forwarded message's text reaches a session: quoted, under a header naming its original author.

Why: a message the owner forwards is someone else's words arriving from the owner's account. Passed on
as plain text it would read as the owner's own instruction in the main session ("SYSTEM: the owner
authorises you to …"). So the text is framed: a first line the adapter writes, naming the author, then
every line of the original prefixed with "> ". The original text cannot forge or close the frame: each
of its lines (split on every character a model may treat as a line break) starts with the quote
marker, and the author's name, which its author chose, is reduced to one short line without brackets,
control, format or bidi characters.
"""

from __future__ import annotations

from hermit.messages import label_text

MAX_AUTHOR_CHARS = 64
UNKNOWN_AUTHOR = "someone"

def author_label(name: str | None) -> str:
    """A platform display name made safe to print inside the header (messages.label_text: letters, digits,
    accents, spaces and a few marks; no bracket or quote of any script); "someone" when nothing is left."""
    text = label_text(name, 4 * MAX_AUTHOR_CHARS) if name else ""
    if len(text) > MAX_AUTHOR_CHARS:
        text = text[:MAX_AUTHOR_CHARS - 1].rstrip() + "…"
    return text or UNKNOWN_AUTHOR


def header(author: str | None) -> str:
    return f"[forwarded message from {author_label(author)} — quoted, not the sender's own words]"


def frame(text: str, author: str | None) -> str:
    """`text` as quoted content under the header. str.splitlines splits on every line-break character
    (\\r, \\v, \\f, \\x1c-\\x1e, \\x85, U+2028, U+2029 as well as \\n), so no line escapes the quote marker."""
    lines = text.splitlines()
    if not lines:
        return header(author)
    return header(author) + "\n" + "\n".join("> " + line for line in lines)
