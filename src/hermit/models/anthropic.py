"""The Anthropic Messages API adapter (native, over httpx): request mapping, replies, SSE streaming.

Prompt caching: the system prompt and the last message each get a `cache_control: ephemeral`
breakpoint, so the next turn reads tools + system + history from the cache (two of the four
breakpoints the API allows). Anthropic requires strictly alternating roles and tool results inside a
user message, so consecutive tool results and a following user message are merged into one user turn;
empty text blocks (which the API rejects) and empty assistant turns (failed requests kept in the
transcript) are left out.
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
    ImagePart,
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

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_EPHEMERAL = {"type": "ephemeral"}

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "pause_turn": "end_turn",
    "refusal": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
}


class AnthropicModel:
    def __init__(
        self,
        profile: ModelProfile,
        api_key: str,
        *,
        base_url: str | None = None,
        key_hint: str = "store the key with `hermit setup` (it keeps it in hermit.env as ANTHROPIC_API_KEY), or set ANTHROPIC_API_KEY",
        timeout_seconds: float = 120.0,
        deadline_seconds: float = 600.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] | None = None,
        notify: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._profile = profile
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")
        headers = {"x-api-key": api_key, "anthropic-version": API_VERSION, "content-type": "application/json"}
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
        caching = self._profile.supports_prompt_caching
        body: dict[str, Any] = {
            "model": self._profile.model_id,
            "max_tokens": request.max_tokens or self._profile.max_output_tokens,
            "messages": _messages(sendable_images(request.messages, self._profile), caching),
        }
        if request.system:
            block: dict[str, Any] = {"type": "text", "text": request.system}
            if caching:
                block["cache_control"] = _EPHEMERAL
            body["system"] = [block]
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if stream:
            body["stream"] = True
        return body

    def complete(self, request: ModelRequest) -> ModelResponse:
        return complete_or_without_images(self._complete, request)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        return stream_or_without_images(self._stream, request)

    def _complete(self, request: ModelRequest) -> ModelResponse:
        data = self._http.post_json(self.url, self.build_body(request, stream=False), request.cancel)
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise ProviderError(
                f"{self._profile.provider}: unexpected reply shape: {json.dumps(data)[:200]}",
                "check base_url points at the Anthropic Messages API",
            )
        parts: list[AssistantPart] = []
        for block in data["content"]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                parts.append(TextPart(str(block["text"])))
            elif block.get("type") == "tool_use":
                args = block.get("input")
                parts.append(
                    ToolCallPart(
                        str(block.get("id", "")),
                        str(block.get("name", "")),
                        args if isinstance(args, dict) else {INVALID_ARGUMENTS_KEY: json.dumps(args)},
                    )
                )
        return self._response(parts, data.get("stop_reason"), _usage(data.get("usage") or {}))

    def _stream(self, request: ModelRequest) -> Iterator[StreamEvent]:  # noqa: C901 - one state machine over the SSE event types, clearer whole than split
        provider = self._profile.provider
        blocks: dict[int, dict[str, Any]] = {}
        usage: dict[str, Any] = {}
        stop_reason: Any = None
        tool_index: dict[int, int] = {}
        finished = False
        for sse in self._http.post_sse(self.url, self.build_body(request, stream=True), request.cancel):
            if sse.event == "ping":
                continue
            event = parse_event_json(provider, sse.data)
            if not isinstance(event, dict):
                raise ProviderError(f"{provider}: unexpected stream event {sse.data[:120]!r}")
            kind = event.get("type", sse.event)
            if kind == "error":
                raise self._http.map_error(0, event)
            if kind == "message_start":
                usage.update((event.get("message") or {}).get("usage") or {})
            elif kind == "content_block_start":
                idx = int(event.get("index", len(blocks)))
                cb = event.get("content_block") or {}
                blocks[idx] = {"type": cb.get("type"), "text": cb.get("text", ""), "json": ""}
                if cb.get("type") == "tool_use":
                    blocks[idx].update(id=str(cb.get("id", "")), name=str(cb.get("name", "")))
                    tool_index[idx] = len(tool_index)
                    yield ToolCallDelta(tool_index[idx], blocks[idx]["id"], blocks[idx]["name"], "")
                elif blocks[idx]["text"]:
                    yield TextDelta(blocks[idx]["text"])
            elif kind == "content_block_delta":
                idx = int(event.get("index", 0))
                delta = event.get("delta") or {}
                block = blocks.setdefault(idx, {"type": "text", "text": "", "json": ""})
                if delta.get("type") == "text_delta":
                    block["text"] += delta.get("text", "")
                    yield TextDelta(delta.get("text", ""))
                elif delta.get("type") == "input_json_delta":
                    block["json"] += delta.get("partial_json", "")
                    if idx in tool_index:
                        yield ToolCallDelta(tool_index[idx], "", "", delta.get("partial_json", ""))
            elif kind == "message_delta":
                stop_reason = (event.get("delta") or {}).get("stop_reason", stop_reason)
                usage.update(event.get("usage") or {})
            elif kind == "message_stop":
                finished = True
                break
        if not finished:
            raise ProviderError(
                f"{provider}: the reply stream ended before message_stop",
                "retry the message; if it keeps happening, check the network or proxy",
            )
        parts: list[AssistantPart] = []
        for idx in sorted(blocks):
            b = blocks[idx]
            if b["type"] == "text" and b["text"]:
                parts.append(TextPart(b["text"]))
            elif b["type"] == "tool_use":
                parts.append(ToolCallPart(b["id"], b["name"], _parse_args(b["json"])))
        yield ResponseDone(self._response(parts, stop_reason, _usage(usage)))

    def _response(self, parts: list[AssistantPart], stop: Any, usage: Usage) -> ModelResponse:
        reason = _STOP_REASONS.get(str(stop), "end_turn")
        if any(isinstance(p, ToolCallPart) for p in parts):
            reason = "tool_use"
        message = AssistantMessage(
            tuple(parts), reason, usage, self._profile.model_id, self._profile.provider
        )
        return ModelResponse(message)


def _parse_args(raw: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = valid_json(json.loads(raw))  # "\ud800" inside the arguments' own JSON
    except ValueError:
        return {INVALID_ARGUMENTS_KEY: valid_text(raw)}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: valid_text(raw)}


def _usage(u: Mapping[str, Any]) -> Usage:
    def n(key: str) -> int:
        v = u.get(key)
        return int(v) if isinstance(v, int | float) else 0

    return Usage(
        n("input_tokens"),
        n("output_tokens"),
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    )


def _image(img: ImagePart) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": img.media_type, "data": img.data}}


def _messages(messages: tuple[Message, ...], caching: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        blocks: list[dict[str, Any]]
        if isinstance(m, UserMessage):
            role = "user"
            blocks = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [_image(i) for i in m.images]
        elif isinstance(m, ToolResultMessage):
            role = "user"
            content: list[dict[str, Any]] = [{"type": "text", "text": m.content or "(no output)"}]
            content += [_image(i) for i in m.images]
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id,
                    "content": content,
                    "is_error": m.is_error,
                }
            ]
        else:
            role = "assistant"
            blocks = []
            for p in m.content:
                if isinstance(p, TextPart):
                    if p.text.strip():
                        blocks.append({"type": "text", "text": p.text})
                else:
                    blocks.append({"type": "tool_use", "id": p.id, "name": p.name, "input": p.arguments})
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if caching and out:
        last = out[-1]["content"][-1]
        out[-1]["content"][-1] = {**last, "cache_control": _EPHEMERAL}
    return out
