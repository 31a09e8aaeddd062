"""The model's Markdown rewritten for Telegram's `Markdown` parse mode (bold, italic, code, links).

Best effort by design: what Telegram still rejects ("can't parse entities") is sent as plain text by the
channel, so this only has to be right for the common cases, never complete.
"""

from __future__ import annotations

import re

_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
# Blanks only, never \s: a \s after the heading's text also matched the newlines that follow it, so
# "# Title\n\nText" lost its blank line ("*Title*\nText").
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__", re.S)
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_BOLD_MARK = "\x00"


def _prose(text: str) -> str:
    text = _BULLET.sub(lambda m: f"{m.group(1)}• ", text)  # a leading "* " would open bold in Telegram
    text = _HEADING.sub(lambda m: f"{_BOLD_MARK}{m.group(1)}{_BOLD_MARK}", text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(1) or m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    return text.replace(_BOLD_MARK, "*")


def to_telegram_markdown(text: str) -> str:
    """CommonMark-ish → Telegram legacy Markdown; code spans and fences pass through untouched."""
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_prose(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_prose(text[pos:]))
    return "".join(out)
