"""What model providers' HTTP bodies say: server-sent events, the message inside an error body, a context overflow.

Both wire formats put a message in `{"error": {"message": ...}}`, Ollama in `{"error": "..."}`, some servers in
`{"detail": ...}`; `error_message()` reads all of them, cut to ERROR_MESSAGE_CHARS. Split from models/transport.py,
which sends the requests (retries, deadline, watchdog) and maps a failure to an error with these.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hermit.errors import ProviderError
from hermit.messages import valid_json

_OVERFLOW_MARKERS = (
    "prompt is too long",
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "too many tokens",
    "input is too long",
    "input too long",
    "request_too_large",
    "reduce the length",
)


def is_context_overflow(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in _OVERFLOW_MARKERS)


def error_message(body: Any) -> str:
    """The human message inside a provider's error body (a parsed JSON value or raw text), cut to
    ERROR_MESSAGE_CHARS: a provider may quote the whole request in it (a 400's "Invalid 'messages[1].content':
    …", an HTML error page echoing the upstream request) — the prompt with MEMORY.md and the main session —
    and the error goes to the log, the transcript, the terminal and a bug report its hint asks for."""
    return _clipped(_error_message(body))


ERROR_MESSAGE_CHARS = 300


def _clipped(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_MESSAGE_CHARS else f"{text[:ERROR_MESSAGE_CHARS]}…(+{len(text) - ERROR_MESSAGE_CHARS} chars)"


def _error_message(body: Any) -> str:
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping):
            msg = err.get("message") or err.get("type") or err.get("code")
            if msg:
                return str(msg)
        if isinstance(err, str) and err:
            return err
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])
        return json.dumps(body)
    return str(body)


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str


def iter_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Server-sent events from text lines (WHATWG rules: event/data fields, blank line dispatches)."""
    event = ""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield SseEvent(event or "message", "\n".join(data))


def parse_event_json(provider: str, data: str) -> Any:
    """Parse one SSE data payload; garbage raises ProviderError."""
    try:
        return valid_json(json.loads(data))  # a lone "\ud800" from the model must not reach a transcript
    except ValueError as e:
        raise ProviderError(
            f"{provider}: the reply stream carried invalid JSON: {data[:120]!r}",
            "check base_url points at the provider's API",
        ) from e
