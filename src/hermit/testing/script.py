"""The reply-script format shared by ScriptedModel and the fake provider server: parsing and loading.

One step is one model reply (or failure); the format is documented in `hermit.testing.fake_provider`.
Steps are validated when loaded, so a typo in a test script fails at once with the step's number
instead of as a puzzling reply later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.errors import AuthError, ContextOverflowError, HermitError, ProviderError, RateLimitError
from hermit.messages import STOP_REASONS, StopReason, ToolCallPart, Usage

_STEP_KEYS = {
    "text", "tool_calls", "error", "retry_after", "message", "garbage",
    "usage", "stop_reason", "match", "repeat", "delay", "keepalive", "keepalive_for",
}  # fmt: skip
_MATCH_KEYS = {"api", "contains", "model"}
_USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}


@dataclass(frozen=True)
class StepMatch:
    """A step with a match is served only to requests it accepts (all given fields must hold)."""

    api: str | None = None  # "anthropic" or "openai"
    contains: str | None = None  # substring of the request (raw body / text of system + messages)
    model: str | None = None

    def accepts(self, api: str, text: str, model: str) -> bool:
        return (
            (self.api is None or self.api == api)
            and (self.contains is None or self.contains in text)
            and (self.model is None or self.model == model)
        )


@dataclass(frozen=True)
class Step:
    text: str = ""
    # Ids may be "": the server or scripted model makes them up.
    tool_calls: tuple[ToolCallPart, ...] = ()
    error: int | str | None = None
    retry_after: float | None = None
    message: str | None = None
    garbage: bool = False
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    match: StepMatch | None = None
    repeat: bool = False
    delay: float = 0.0
    # Before answering, send a keep-alive every `keepalive` seconds (an SSE comment, or a space before a
    # JSON body) for `keepalive_for` seconds (None: until the client goes away, at most 10 minutes).
    keepalive: float | None = None
    keepalive_for: float | None = None

    @property
    def is_reply(self) -> bool:
        return self.error is None and not self.garbage

    def to_error(self, provider: str = "scripted") -> HermitError:
        """The exception an adapter would raise for this failure step (used by ScriptedModel)."""
        if self.garbage:
            return ProviderError(f"{provider}: the reply is not valid JSON", "check base_url")
        msg = self.message or f"scripted failure {self.error}"
        if self.error == "context_overflow":
            return ContextOverflowError(f"{provider}: prompt is too long: {msg}", "compact the session")
        if self.error in (401, 403):
            return AuthError(f"{provider} rejected the credentials: {msg}", "set the API key")
        if self.error == 429:
            return RateLimitError(f"{provider}: rate limited: {msg}", "wait", retry_after=self.retry_after)
        return ProviderError(f"{provider}: provider error {self.error}: {msg}", "try again later")


def parse_step(raw: Mapping[str, Any] | str, where: str = "step") -> Step:
    """A Step from its JSON form (a bare string is a text reply); raises ValueError naming `where`."""
    if isinstance(raw, str):
        return Step(text=raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a step must be an object or a string, got {type(raw).__name__}")
    unknown = set(raw) - _STEP_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_STEP_KEYS)})")
    error = raw.get("error")
    if (
        error is not None
        and not (isinstance(error, int) and 400 <= error <= 599)
        and error != "context_overflow"
    ):
        raise ValueError(
            f'{where}: error must be an HTTP status 400-599 or "context_overflow", got {error!r}'
        )
    calls = []
    for i, c in enumerate(raw.get("tool_calls") or []):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise ValueError(f"{where}: tool_calls[{i}] needs a name")
        args = c.get("arguments", {})
        if not isinstance(args, dict):
            raise ValueError(f"{where}: tool_calls[{i}].arguments must be an object")
        calls.append(ToolCallPart(str(c.get("id", "")), c["name"], args))
    usage = raw.get("usage")
    if usage is not None:
        if not isinstance(usage, Mapping) or set(usage) - _USAGE_KEYS:
            raise ValueError(f"{where}: usage takes only {sorted(_USAGE_KEYS)}")
        usage = Usage(**{k: int(v) for k, v in usage.items()})
    stop = raw.get("stop_reason")
    if stop is not None and stop not in STOP_REASONS:
        raise ValueError(f"{where}: stop_reason must be one of {STOP_REASONS}")
    match = raw.get("match")
    if match is not None:
        if not isinstance(match, Mapping) or set(match) - _MATCH_KEYS:
            raise ValueError(f"{where}: match takes only {sorted(_MATCH_KEYS)}")
        match = StepMatch(**match)
    retry_after = raw.get("retry_after")
    keepalive = raw.get("keepalive")
    keepalive_for = raw.get("keepalive_for")
    if keepalive is not None and (not isinstance(keepalive, int | float) or keepalive <= 0):
        raise ValueError(f"{where}: keepalive is the seconds between keep-alives (> 0)")
    return Step(
        text=str(raw.get("text", "")),
        tool_calls=tuple(calls),
        error=error,
        retry_after=None if retry_after is None else float(retry_after),
        message=raw.get("message"),
        garbage=bool(raw.get("garbage", False)),
        usage=usage,
        stop_reason=stop,
        match=match,
        repeat=bool(raw.get("repeat", False)),
        delay=float(raw.get("delay", 0.0)),
        keepalive=None if keepalive is None else float(keepalive),
        keepalive_for=None if keepalive_for is None else float(keepalive_for),
    )


def parse_steps(raw: Iterable[Mapping[str, Any] | str | Step]) -> list[Step]:
    return [s if isinstance(s, Step) else parse_step(s, f"step {i}") for i, s in enumerate(raw)]


def load_script(path: Path) -> list[Step]:
    """Steps from a JSON file (a list, or {"steps": [...]}) or a JSONL file (one step per line)."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        steps = []
        for n, line in lines:
            try:
                steps.append(parse_step(json.loads(line), f"{path}:{n}"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON: {e}") from e
        return steps
    if isinstance(data, Mapping) and "steps" in data:
        data = data["steps"]
    if isinstance(data, Mapping | str):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"{path}: a script is a list of steps")
    return [parse_step(s, f"{path}: step {i}") for i, s in enumerate(data)]
