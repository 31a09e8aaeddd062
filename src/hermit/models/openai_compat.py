"""The OpenAI Chat Completions adapter (over httpx), for OpenAI, OpenRouter, Ollama, vLLM, LM Studio...

Differences between servers handled here: the output cap is `max_completion_tokens` on OpenAI itself
(newer models refuse `max_tokens`) and `max_tokens` elsewhere; some local servers omit tool-call ids
(we make them up), omit the index on streamed tool-call deltas, send arguments as an object instead of
a JSON string, or finish with "stop" while returning tool calls. Usage is normalised so that
`input_tokens` excludes cached prompt tokens (OpenAI counts them inside `prompt_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from hermit.errors import ProviderError
from hermit.messages import (
    INVALID_ARGUMENTS_KEY,
    AssistantMessage,
    AssistantPart,
    Message,
    StopReason,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    Usage,
    UserMessage,
    valid_json,
    valid_text,
)
from hermit.models.base import (
    ModelProfile,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    complete_or_without_images,
    sendable_images,
    stream_or_without_images,
)
from hermit.models.provider_wire import parse_event_json
from hermit.models.transport import ProviderHttp
from hermit.retry import RetryPolicy

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "end_turn",
}


class OpenAIModel:
    def __init__(
        self,
        profile: ModelProfile,
        api_key: str | None,
        *,
        base_url: str | None = None,
        key_hint: str = "store the key with `hermit setup` (it keeps it in hermit.env as OPENAI_API_KEY), or set OPENAI_API_KEY",
        max_tokens_param: str = "max_tokens",
        extra_headers: Mapping[str, str] | None = None,
        timeout_seconds: float = 120.0,
        deadline_seconds: float = 600.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] | None = None,
        notify: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._profile = profile
        self.url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        self.max_tokens_param = max_tokens_param
        headers = {"content-type": "application/json", **(extra_headers or {})}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._http = ProviderHttp(
            profile.provider,
            headers,
            key_hint=key_hint,
            timeout_seconds=timeout_seconds,
            deadline_seconds=deadline_seconds,
            retry=RetryPolicy(max_retries=max_retries),
            sleep=sleep,
            notify=notify,
            transport=transport,
        )

    @property
    def profile(self) -> ModelProfile:
        return self._profile

    def close(self) -> None:
        self._http.close()

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages += _messages(sendable_images(request.messages, self._profile))
        body: dict[str, Any] = {
            "model": self._profile.model_id,
            "messages": messages,
            self.max_tokens_param: request.max_tokens or self._profile.max_output_tokens,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def complete(self, request: ModelRequest) -> ModelResponse:
        return complete_or_without_images(self._complete, request)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        return stream_or_without_images(self._stream, request)

    def _complete(self, request: ModelRequest) -> ModelResponse:
        data = self._http.post_json(self.url, self.build_body(request, stream=False), request.cancel)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if isinstance(data, dict) and data.get("error"):
                raise self._http.map_error(0, data)
            raise ProviderError(
                f"{self._profile.provider}: unexpected reply shape: {json.dumps(data)[:200]}",
                "check base_url points at an OpenAI-compatible /v1 endpoint",
            )
        choice = choices[0]
        msg = choice.get("message") or {}
        parts: list[AssistantPart] = []
        if msg.get("content"):
            parts.append(TextPart(str(msg["content"])))
        for i, call in enumerate(msg.get("tool_calls") or []):
            fn = call.get("function") or {}
            parts.append(
                ToolCallPart(
                    call.get("id") or f"call_{i}", str(fn.get("name", "")), _args(fn.get("arguments"))
                )
            )
        return self._response(parts, choice.get("finish_reason"), _usage(data.get("usage") or {}))

    def _stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        provider = self._profile.provider
        text: list[str] = []
        calls: list[dict[str, str]] = []
        by_index: dict[int, int] = {}
        usage: Mapping[str, Any] = {}
        finish: Any = None
        done = False
        for sse in self._http.post_sse(self.url, self.build_body(request, stream=True), request.cancel):
            if sse.data.strip() == "[DONE]":
                done = True
                break
            chunk = parse_event_json(provider, sse.data)
            if not isinstance(chunk, dict):
                raise ProviderError(f"{provider}: unexpected stream chunk {sse.data[:120]!r}")
            if chunk.get("error"):
                raise self._http.map_error(0, chunk)
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                    yield TextDelta(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    yield self._tool_delta(tc, calls, by_index)
                finish = choice.get("finish_reason") or finish
        if not done and finish is None:
            raise ProviderError(
                f"{provider}: the reply stream ended before it was finished",
                "retry the message; if it keeps happening, check the server or proxy",
            )
        parts: list[AssistantPart] = [TextPart("".join(text))] if text else []
        parts += [ToolCallPart(c["id"], c["name"], _args(c["arguments"])) for c in calls]
        yield ResponseDone(self._response(parts, finish, _usage(usage)))

    @staticmethod
    def _tool_delta(
        tc: Mapping[str, Any], calls: list[dict[str, str]], by_index: dict[int, int]
    ) -> ToolCallDelta:
        fn = tc.get("function") or {}
        raw_args = fn.get("arguments") or ""
        args = raw_args if isinstance(raw_args, str) else json.dumps(raw_args)
        index = tc.get("index")
        if isinstance(index, int) and index in by_index:
            pos = by_index[index]
        elif index is None and calls and not tc.get("id"):
            pos = len(calls) - 1
        else:
            pos = len(calls)
            calls.append({"id": tc.get("id") or f"call_{pos}", "name": "", "arguments": ""})
            if isinstance(index, int):
                by_index[index] = pos
            first = calls[pos]
            first["name"] = str(fn.get("name") or "")
            first["arguments"] = args
            return ToolCallDelta(pos, first["id"], first["name"], args)
        call = calls[pos]
        if fn.get("name") and not call["name"]:
            call["name"] = str(fn["name"])
        call["arguments"] += args
        return ToolCallDelta(pos, "", "", args)

    def _response(self, parts: list[AssistantPart], finish: Any, usage: Usage) -> ModelResponse:
        reason = _STOP_REASONS.get(str(finish), "end_turn")
        if any(isinstance(p, ToolCallPart) for p in parts):
            reason = "tool_use"
        message = AssistantMessage(
            tuple(parts), reason, usage, self._profile.model_id, self._profile.provider
        )
        return ModelResponse(message)


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        value = valid_json(json.loads(raw))  # "\ud800" inside the arguments' own JSON
    except (TypeError, ValueError):
        return {INVALID_ARGUMENTS_KEY: valid_text(str(raw))}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: valid_text(str(raw))}


def _usage(u: Mapping[str, Any]) -> Usage:
    def n(v: Any) -> int:
        return int(v) if isinstance(v, int | float) else 0

    details = u.get("prompt_tokens_details") or {}
    cached = n(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(max(0, n(u.get("prompt_tokens")) - cached), n(u.get("completion_tokens")), cached, 0)


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, UserMessage):
            if m.images:
                content: Any = [{"type": "text", "text": m.text}] if m.text else []
                content += [
                    {"type": "image_url", "image_url": {"url": f"data:{i.media_type};base64,{i.data}"}}
                    for i in m.images
                ]
            else:
                content = m.text
            out.append({"role": "user", "content": content})
        elif isinstance(m, ToolResultMessage):
            text = m.content or "(no output)"
            if m.images:
                # Chat Completions tool messages carry text only.
                text += f"\n[{len(m.images)} image(s) omitted: this API takes no images in tool results]"
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": text})
        else:
            msg: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(c.arguments, ensure_ascii=False),
                        },
                    }
                    for c in m.tool_calls
                ]
            elif not m.text:
                continue  # an empty assistant turn (a failed request kept in the transcript)
            out.append(msg)
    return out
