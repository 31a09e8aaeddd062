"""What of a main session's transcript is background, not conversation (SPEC §3, §16): a silent reply (`NO_REPLY`)
was never delivered, and a heartbeat's prompt and acknowledgements (`HEARTBEAT_OK`) were nobody's words.

`HEARTBEAT_OK` at the start or end of a heartbeat's reply is stripped, with simple HTML or Markdown wrapped around
it (`<b>HEARTBEAT_OK</b>`, `**HEARTBEAT_OK**`); what remains is an acknowledgement (nothing to deliver) when it is at
most `ack_max_chars` long. The runtime writes a custom entry `heartbeat` (HEARTBEAT_MARK) before a beat's prompt;
`BeatLines` walks a transcript's messages in order and says which belong to a beat. Here, at the sessions layer,
so every reader of a transcript applies the one rule: the scheduler (what a beat delivers), the web app's history
(what it shows), the session-memory hook (what `/new` saves) and memory's session source (what search indexes)."""

from __future__ import annotations

import re

SILENT_TOKEN = "NO_REPLY"
HEARTBEAT_TOKEN = "HEARTBEAT_OK"
DEFAULT_ACK_MAX_CHARS = 300
# The custom transcript entry the runtime writes before a heartbeat turn's prompt (agent/runtime.py).
HEARTBEAT_MARK = "heartbeat"

# What may wrap the token at an edge: punctuation, Markdown marks (`**`, `__`, backticks), simple HTML
# tags (<b>, </code>) and non-breaking spaces. Underscore counts, since \W does not cover it.
_WRAP = r"(?:</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>|&nbsp;|[\W_])*"
_TOKEN_EDGE = re.compile(rf"^{_WRAP}{HEARTBEAT_TOKEN}{_WRAP}|{_WRAP}{HEARTBEAT_TOKEN}{_WRAP}$")


def is_silent(text: str) -> bool:
    """A reply that is exactly NO_REPLY, or starts or ends with it, is not delivered (SPEC §3)."""
    stripped = text.strip()
    return stripped.startswith(SILENT_TOKEN) or stripped.endswith(SILENT_TOKEN)


def strip_heartbeat_token(reply: str, ack_max_chars: int) -> str | None:
    """The alert text to deliver, or None when the reply is an acknowledgement (or silent)."""
    text = reply.strip()
    if not text or is_silent(text):
        return None
    if HEARTBEAT_TOKEN not in text:
        return text
    stripped = text
    while True:  # "HEARTBEAT_OK" may wrap the reply on both sides
        shorter = _TOKEN_EDGE.sub("", stripped, count=1).strip()
        if shorter == stripped:
            break
        stripped = shorter
    if stripped == text:  # the token only in the middle: a real message that mentions it
        return text
    return stripped if len(stripped) > ack_max_chars else None


class BeatLines:
    """A transcript's heartbeat turns, told apart as its entries are read in order: `mark()` at the HEARTBEAT_MARK
    entry, `user()` at each user message (True: the beat's prompt, leave it out), `assistant(text)` at each assistant
    message (the text to keep: unchanged outside a beat, the alert within one, None for an acknowledgement or a
    beat's tool step with no text). A beat lasts from its prompt to the next user message."""

    def __init__(self, ack_max_chars: int = DEFAULT_ACK_MAX_CHARS) -> None:
        self.ack_max_chars = ack_max_chars
        self._beat = 0  # 1 = a beat's prompt comes next, 2 = within its turn

    def mark(self) -> None:
        self._beat = 1

    def user(self) -> bool:
        self._beat = 2 if self._beat == 1 else 0
        return bool(self._beat)

    def assistant(self, text: str) -> str | None:
        if not self._beat:
            return text
        return strip_heartbeat_token(text, self.ack_max_chars)
