"""Test doubles implementing the real Model interface: ScriptedModel replays replies, FunctionModel computes them.

A reply may be a string (text), a script step dict (`{"text": ...}`, `{"tool_calls": [...]}`,
`{"error": 429}`... — the fake provider's format), a `Step`, an `AssistantMessage`, a `ModelResponse`,
or an exception instance to raise. Both doubles record every `ModelRequest` they receive in
`.requests`, and stream like a real adapter: text in small deltas, tool-call arguments as JSON pieces,
then `ResponseDone`. Usage is estimated from the request (CJK-aware) unless the step gives it, so
compaction thresholds behave as with a real model.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeAlias

from hermit.messages import AssistantMessage, AssistantPart, TextPart, ToolCallPart, Usage
from hermit.models.base import (
    ModelProfile,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hermit.testing.script import Step, parse_step
from hermit.tokens import estimate_tokens

Reply: TypeAlias = str | Mapping[str, Any] | Step | AssistantMessage | ModelResponse | BaseException

DEFAULT_PROFILE = ModelProfile(provider="scripted", model_id="scripted-1", context_window=128_000)


class ScriptExhaustedError(AssertionError):
    """The model was asked for more replies than its script holds."""


def request_text(request: ModelRequest) -> str:
    """System prompt and message texts of a request, for `match.contains` and token estimates."""
    parts = [request.system]
    for m in request.messages:
        d = m.to_dict()
        parts.append(json.dumps(d.get("content", ""), ensure_ascii=False))
    return "\n".join(parts)


class _Base:
    def __init__(self, profile: ModelProfile | None) -> None:
        self._profile = profile or DEFAULT_PROFILE
        self.requests: list[ModelRequest] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def profile(self) -> ModelProfile:
        return self._profile

    @property
    def last_request(self) -> ModelRequest:
        return self.requests[-1]

    def _next_reply(self, request: ModelRequest) -> Reply:
        raise NotImplementedError

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)
            reply = self._next_reply(request)
        return self._to_response(reply, request)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        response = self.complete(request)
        for part in response.message.content:
            if isinstance(part, TextPart):
                for i in range(0, len(part.text), 8):
                    yield TextDelta(part.text[i : i + 8])
        for index, call in enumerate(response.tool_calls):
            yield ToolCallDelta(index, call.id, call.name, "")
            raw = json.dumps(call.arguments, ensure_ascii=False)
            for i in range(0, len(raw), 7):
                yield ToolCallDelta(index, "", "", raw[i : i + 7])
        yield ResponseDone(response)

    def _to_response(self, reply: Reply, request: ModelRequest) -> ModelResponse:
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, ModelResponse):
            return reply
        if isinstance(reply, AssistantMessage):
            return ModelResponse(reply)
        step = reply if isinstance(reply, Step) else parse_step(reply)
        if not step.is_reply:
            raise step.to_error(self._profile.provider)
        parts: list[AssistantPart] = [TextPart(step.text)] if step.text else []
        parts += [
            ToolCallPart(c.id or f"call_{next(self._ids)}", c.name, dict(c.arguments))
            for c in step.tool_calls
        ]
        usage = step.usage or Usage(
            input_tokens=estimate_tokens(request_text(request)),
            output_tokens=estimate_tokens(
                step.text + "".join(json.dumps(c.arguments) for c in step.tool_calls)
            ),
        )
        stop = step.stop_reason or ("tool_use" if step.tool_calls else "end_turn")
        message = AssistantMessage(tuple(parts), stop, usage, self._profile.model_id, self._profile.provider)
        return ModelResponse(message)


class ScriptedModel(_Base):
    """Replays `replies` in order; a step with `match` is given to the first request it accepts and
    a step with `repeat: true` is never used up. Running out raises ScriptExhaustedError."""

    def __init__(self, replies: Iterable[Reply] = (), *, profile: ModelProfile | None = None) -> None:
        super().__init__(profile)
        self.replies: list[Reply] = [
            parse_step(r, f"reply {i}") if isinstance(r, str | Mapping) else r for i, r in enumerate(replies)
        ]

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.replies += [parse_step(r) if isinstance(r, str | Mapping) else r for r in replies]

    @property
    def remaining(self) -> int:
        return len(self.replies)

    def _next_reply(self, request: ModelRequest) -> Reply:
        text: str | None = None
        for i, reply in enumerate(self.replies):
            if isinstance(reply, Step) and reply.match is not None:
                text = request_text(request) if text is None else text
                if not reply.match.accepts("scripted", text, self._profile.model_id):
                    continue
            if not (isinstance(reply, Step) and reply.repeat):
                del self.replies[i]
            return reply
        raise ScriptExhaustedError(
            f"ScriptedModel: no scripted reply left for request #{len(self.requests)} "
            f"(last message: {request.messages[-1].to_dict() if request.messages else None!r:.200})"
        )


class FunctionModel(_Base):
    """Computes each reply with `fn(request)`; `fn` may return any reply form or raise."""

    def __init__(self, fn: Callable[[ModelRequest], Reply], *, profile: ModelProfile | None = None) -> None:
        super().__init__(profile)
        self.fn = fn

    def _next_reply(self, request: ModelRequest) -> Reply:
        return self.fn(request)

    def complete(self, request: ModelRequest) -> ModelResponse:
        # `fn` runs outside the lock: it may block (a test holding a turn open) while other
        # sessions' turns call the same model concurrently, as they do with a real provider.
        with self._lock:
            self.requests.append(request)
        return self._to_response(self.fn(request), request)
