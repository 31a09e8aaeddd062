"""What of a heartbeat turn's reply is an alert (SPEC §16): `HEARTBEAT_OK` at the start or end of the reply is
stripped, with simple HTML or Markdown wrapped around it (`<b>HEARTBEAT_OK</b>`, `**HEARTBEAT_OK**`); what remains
is an acknowledgement (nothing to deliver) when it is at most `ack_max_chars` long. Read by the scheduler (what a
beat delivers), the web app's history (what it shows) and the session-memory hook (what `/new` saves: a beat's
prompt and acknowledgements are nobody's conversation)."""

from __future__ import annotations

import re

HEARTBEAT_TOKEN = "HEARTBEAT_OK"
DEFAULT_ACK_MAX_CHARS = 300
# The custom transcript entry the runtime writes before a heartbeat turn's prompt (agent/runtime.py).
HEARTBEAT_MARK = "heartbeat"

# What may wrap the token at an edge: punctuation, Markdown marks (`**`, `__`, backticks), simple HTML
# tags (<b>, </code>) and non-breaking spaces. Underscore counts, since \W does not cover it.
_WRAP = r"(?:</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>|&nbsp;|[\W_])*"
_TOKEN_EDGE = re.compile(rf"^{_WRAP}{HEARTBEAT_TOKEN}{_WRAP}|{_WRAP}{HEARTBEAT_TOKEN}{_WRAP}$")


def strip_heartbeat_token(reply: str, ack_max_chars: int) -> str | None:
    """The alert text to deliver, or None when the reply is an acknowledgement (or silent)."""
    from hermit.agent.context import is_silent  # (not at import: `hermit doctor`'s job checks run no agent)

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
