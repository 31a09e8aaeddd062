"""Wire formats for the fake provider: Anthropic and OpenAI replies, SSE streams, errors, request checks.

Shapes follow the providers' documented JSON closely enough that a real SDK would accept them; the
request checks reproduce the 400s the real APIs give for malformed conversations, so adapter bugs
(orphan tool calls, non-alternating roles) fail in tests as they would in production.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from hermit.messages import Usage
from hermit.testing.script import Step
from hermit.tokens import estimate_tokens

OVERFLOW = -1  # pseudo-status for the "context_overflow" step

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}
_ANTHROPIC_STOP = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens"}
_OPENAI_STOP = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
TEXT_CHUNK = 8
JSON_CHUNK = 7


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    if status == OVERFLOW:
        msg = message or "prompt is too long: 215000 tokens > 200000 maximum"
        return {"type": "error", "error": {"type": "invalid_request_error", "message": msg}}
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message or f"fake {kind} ({status})"}}


def openai_error(status: int, message: str) -> dict[str, Any]:
    if status == OVERFLOW:
        msg = message or (
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "131000 tokens. Please reduce the length of the messages."
        )
        return {"error": {"message": msg, "type": "invalid_request_error", "code": "context_length_exceeded"}}
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = _OPENAI_CODES.get(status)
    return {"error": {"message": message or f"fake {kind} ({status})", "type": kind, "code": code}}


def _usage(step: Step, raw: str) -> Usage:
    if step.usage is not None:
        return step.usage
    out = step.text + "".join(json.dumps(c.arguments) for c in step.tool_calls)
    return Usage(input_tokens=estimate_tokens(raw), output_tokens=max(1, estimate_tokens(out)))


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _stop(step: Step) -> str:
    return step.stop_reason or ("tool_use" if step.tool_calls else "end_turn")


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    try:
        return f"{head}data: {payload}\n\n".encode()
    except UnicodeEncodeError:
        # A lone surrogate (a script testing hostile model output): sent as a JSON escape, as real
        # providers do, so the client sees exactly "\ud800".
        payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=True)
        return f"{head}data: {payload}\n\n".encode(errors="backslashreplace")


# --- Anthropic Messages -------------------------------------------------------------------------------


def _anthropic_usage(u: Usage) -> dict[str, int]:
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
    }


def _tool_id(c_id: str, prefix: str, index: int, i: int) -> str:
    return c_id or f"{prefix}_fake_{index}_{i}"


def anthropic_reply(body: Mapping[str, Any], raw: str, step: Step, index: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
    content += [
        {"type": "tool_use", "id": _tool_id(c.id, "toolu", index, i), "name": c.name, "input": c.arguments}
        for i, c in enumerate(step.tool_calls)
    ]
    return {
        "id": f"msg_fake_{index}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": _ANTHROPIC_STOP[_stop(step)],
        "stop_sequence": None,
        "usage": _anthropic_usage(_usage(step, raw)),
    }


def anthropic_stream(body: Mapping[str, Any], raw: str, step: Step, index: int) -> Iterator[bytes]:
    usage = _usage(step, raw)
    start_usage = _anthropic_usage(usage) | {"output_tokens": 1}
    message = {
        "id": f"msg_fake_{index}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    yield _sse("message_start", {"type": "message_start", "message": message})
    yield _sse("ping", {"type": "ping"})
    block = 0
    if step.text:
        start = {"type": "content_block_start", "index": block, "content_block": {"type": "text", "text": ""}}
        yield _sse("content_block_start", start)
        for piece in _chunks(step.text, TEXT_CHUNK):
            delta = {
                "type": "content_block_delta",
                "index": block,
                "delta": {"type": "text_delta", "text": piece},
            }
            yield _sse("content_block_delta", delta)
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": block})
        block += 1
    for i, c in enumerate(step.tool_calls):
        cb = {"type": "tool_use", "id": _tool_id(c.id, "toolu", index, i), "name": c.name, "input": {}}
        yield _sse(
            "content_block_start", {"type": "content_block_start", "index": block, "content_block": cb}
        )
        for piece in _chunks(json.dumps(c.arguments, ensure_ascii=False), JSON_CHUNK):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": block, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": block})
        block += 1
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": _ANTHROPIC_STOP[_stop(step)], "stop_sequence": None},
        "usage": {"output_tokens": usage.output_tokens},
    }
    yield _sse("message_delta", end)
    yield _sse("message_stop", {"type": "message_stop"})


def validate_anthropic(body: Any, headers: Mapping[str, str]) -> str | None:  # noqa: C901 - one check per rule of the real API's 400s, in the API's order
    if not headers.get("anthropic-version"):
        return "anthropic-version header is required"
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str) or not isinstance(body.get("max_tokens"), int):
        return "model (string) and max_tokens (integer) are required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    pending: set[str] = set()
    for n, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            return f"messages.{n}.role must be user or assistant"
        if n == 0 and role != "user":
            return "messages: the first message must use the user role"
        if n and messages[n - 1].get("role") == role:
            return f"messages: roles must alternate between user and assistant (messages.{n})"
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{n}: content must be a non-empty string or list"
        answered: set[str] = set()
        for b in blocks:
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "text" and not str(b.get("text", "")).strip():
                return f"messages.{n}: text content blocks must be non-empty"
            if kind == "tool_use" and role == "assistant":
                pending.add(str(b.get("id")))
            elif kind == "tool_result" and role == "user":
                answered.add(str(b.get("tool_use_id")))
            elif kind not in ("text", "image"):
                return f"messages.{n}: unexpected content block {kind!r} in a {role} message"
        if role == "user":
            if answered - pending:
                return f"messages.{n}: tool_result for unknown tool_use ids {sorted(answered - pending)}"
            if pending - answered:
                return f"messages.{n}: tool_use ids {sorted(pending - answered)} without tool_result blocks"
            pending = set()
    if pending:
        return f"tool_use ids {sorted(pending)} must be answered before the request ends"
    return None


# --- OpenAI Chat Completions --------------------------------------------------------------------------


def _openai_usage(u: Usage) -> dict[str, Any]:
    prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": u.output_tokens,
        "total_tokens": prompt + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
    }


def openai_reply(body: Mapping[str, Any], raw: str, step: Step, index: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if step.tool_calls:
        message["tool_calls"] = [
            {
                "id": _tool_id(c.id, "call", index, i),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for i, c in enumerate(step.tool_calls)
        ]
    return {
        "id": f"chatcmpl-fake-{index}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": _OPENAI_STOP[_stop(step)]}],
        "usage": _openai_usage(_usage(step, raw)),
    }


def openai_stream(body: Mapping[str, Any], raw: str, step: Step, index: int) -> Iterator[bytes]:
    base = {
        "id": f"chatcmpl-fake-{index}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model", ""),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _chunks(step.text, TEXT_CHUNK):
        yield chunk({"content": piece})
    for i, c in enumerate(step.tool_calls):
        first = {"index": i, "id": _tool_id(c.id, "call", index, i), "type": "function",
                 "function": {"name": c.name, "arguments": ""}}  # fmt: skip
        yield chunk({"tool_calls": [first]})
        for piece in _chunks(json.dumps(c.arguments, ensure_ascii=False), JSON_CHUNK):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, _OPENAI_STOP[_stop(step)])
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        yield _sse(None, base | {"choices": [], "usage": _openai_usage(_usage(step, raw))})
    yield _sse(None, "[DONE]")


def validate_openai(body: Any, headers: Mapping[str, str]) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "model (string) is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    pending: set[str] = set()
    for n, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{n}].role is invalid: {role!r}"
        if role == "tool":
            call_id = str(m.get("tool_call_id"))
            if call_id not in pending:
                return f"messages[{n}]: tool message for {call_id!r} does not answer a preceding tool call"
            pending.discard(call_id)
            continue
        if pending:
            return f"messages[{n}]: tool calls {sorted(pending)} must be answered by tool messages first"
        if role == "assistant":
            pending = {str(c.get("id")) for c in m.get("tool_calls") or [] if isinstance(c, dict)}
            if m.get("content") is None and not pending:
                return f"messages[{n}]: an assistant message needs content or tool_calls"
    if pending:
        return f"tool calls {sorted(pending)} must be answered before the request ends"
    return None
