"""The OpenAI-compatible adapter over real HTTP against the fake provider, plus the model registry."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from hermit.config.schema import ModelsConfig
from hermit.errors import AuthError, ConfigError, ContextOverflowError, ProviderError, RateLimitError
from hermit.messages import (
    INVALID_ARGUMENTS_KEY,
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from hermit.models import (
    AnthropicModel,
    ModelProfile,
    ModelRequest,
    OpenAIModel,
    ResponseDone,
    TextDelta,
    ToolCallDelta,
    ToolSchema,
    build_model,
    final_response,
    known_limits,
    parse_model_ref,
)
from hermit.testing import FakeProvider

PROFILE = ModelProfile("openai", "gpt-4.1", context_window=1_047_576, max_output_tokens=2048, supports_images=True)
SEARCH = ToolSchema(
    "memory_search", "Search memory.", {"type": "object", "properties": {"query": {"type": "string"}}}
)
REQUEST = ModelRequest("You are Hermit.", (UserMessage("What database did we pick?"),), (SEARCH,))


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as f:
        yield f


@pytest.fixture
def sleeps() -> list[float]:
    return []


def model(fake: FakeProvider, sleeps: list[float], **kw: object) -> OpenAIModel:
    return OpenAIModel(PROFILE, "sk-test", base_url=fake.openai_base_url, sleep=sleeps.append, **kw)


def test_text_reply_and_request_shape(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add(
        {"text": "PostgreSQL.", "usage": {"input_tokens": 100, "output_tokens": 4, "cache_read_tokens": 40}}
    )
    r = model(fake, sleeps, max_tokens_param="max_completion_tokens").complete(REQUEST)
    assert r.text == "PostgreSQL." and r.stop_reason == "end_turn"
    # prompt_tokens (140) includes the 40 cached tokens; Usage.input_tokens excludes them.
    assert r.usage == Usage(100, 4, 40, 0)
    [req] = fake.requests
    assert req.path == "/v1/chat/completions" and req.api == "openai"
    assert req.headers["authorization"] == "Bearer <redacted>"
    body = req.body
    assert body["messages"][0] == {"role": "system", "content": "You are Hermit."}
    assert body["messages"][1] == {"role": "user", "content": "What database did we pick?"}
    assert body["max_completion_tokens"] == 2048 and "max_tokens" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "memory_search",
                "description": "Search memory.",
                "parameters": dict(SEARCH.parameters),
            },
        }
    ]


def test_tool_call_reply(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"tool_calls": [{"name": "memory_search", "arguments": {"query": "db"}, "id": "call_abc"}]})
    r = model(fake, sleeps).complete(REQUEST)
    assert r.stop_reason == "tool_use" and r.text == ""
    assert r.tool_calls == (ToolCallPart("call_abc", "memory_search", {"query": "db"}),)


def test_stream_text_and_usage(fake: FakeProvider, sleeps: list[float]) -> None:
    text = "We chose PostgreSQL for JSONB. 我们选择了 PostgreSQL。"
    fake.add({"text": text, "usage": {"input_tokens": 50, "output_tokens": 12}})
    events = list(model(fake, sleeps).stream(REQUEST))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    assert isinstance(events[-1], ResponseDone)
    assert events[-1].response.usage == Usage(50, 12)
    body = fake.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_stream_tool_call_argument_deltas_assembled(fake: FakeProvider, sleeps: list[float]) -> None:
    a1 = {"query": "decisions about the 数据库 last week", "maxResults": 5}
    a2 = {"path": "memory/2026-01-20.md", "from": 3, "lines": 10}
    fake.add(
        {
            "text": "Checking.",
            "tool_calls": [
                {"name": "memory_search", "arguments": a1},
                {"name": "memory_get", "arguments": a2},
            ],
        }
    )
    events = list(model(fake, sleeps).stream(REQUEST))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert {d.index for d in deltas} == {0, 1}
    assert len([d for d in deltas if d.index == 0]) > 3
    assert "".join(d.arguments_delta for d in deltas if d.index == 1) == json.dumps(a2)
    done = final_response(iter(events))
    assert done.text == "Checking." and done.stop_reason == "tool_use"
    assert [(c.name, c.arguments) for c in done.tool_calls] == [("memory_search", a1), ("memory_get", a2)]
    assert all(c.id for c in done.tool_calls)


def test_history_mapping_passes_the_servers_tool_rules(fake: FakeProvider, sleeps: list[float]) -> None:
    history = (
        UserMessage("Find it", images=(ImagePart("image/png", "iVBORw0KGgo="),)),
        AssistantMessage(
            (
                TextPart("Looking."),
                ToolCallPart("c1", "memory_search", {"query": "数据库"}),
                ToolCallPart("c2", "read", {}),
            ),
            "tool_use",
        ),
        ToolResultMessage("c1", "memory_search", '{"results": []}'),
        ToolResultMessage("c2", "read", "", is_error=True, images=(ImagePart("image/png", "xx"),)),
        AssistantMessage((), "error", error_message="boom"),
        UserMessage("and?"),
    )
    fake.add("Nothing.")
    assert model(fake, sleeps).complete(ModelRequest("sys", history)).text == "Nothing."
    msgs = fake.requests[0].body["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert msgs[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    assert msgs[2]["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "memory_search", "arguments": '{"query": "数据库"}'},
    }
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": '{"results": []}'}
    assert msgs[4]["content"].startswith("(no output)") and "image" in msgs[4]["content"]


def test_compatible_server_without_key_sends_no_authorization(fake: FakeProvider) -> None:
    fake.add("local answer")
    config = ModelsConfig.model_validate(
        {"providers": {"ollama": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}
    )
    m = build_model("ollama/llama3.1:8b", config, {})
    assert m.complete(REQUEST).text == "local answer"
    req = fake.requests[0]
    assert "authorization" not in req.headers
    assert req.body["max_tokens"] == 8192 and req.body["model"] == "llama3.1:8b"
    assert m.profile.context_window == 128_000 and not m.profile.supports_prompt_caching


def test_401_is_auth_error_with_hint_naming_the_key(fake: FakeProvider) -> None:
    fake.add({"error": 401})
    config = ModelsConfig.model_validate(
        {"providers": {"openai": {"type": "openai", "base_url": fake.openai_base_url}}}
    )
    m = build_model("openai/gpt-4o", config, {"OPENAI_API_KEY": "sk-bad"}, sleep=lambda s: None)
    with pytest.raises(AuthError) as e:
        m.complete(REQUEST)
    assert "OPENAI_API_KEY" in e.value.hint
    assert fake.requests[0].body["max_completion_tokens"] == 16_384


def test_429_then_success_honours_retry_after(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 429, "retry_after": 0}, {"error": 429, "retry_after": 1.5}, "done")
    assert final_response(model(fake, sleeps).stream(REQUEST)).text == "done"
    assert sleeps == [0.0, 1.5] and len(fake.requests) == 3


def test_quota_429_is_not_retried(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 429, "message": "You exceeded your current quota, check your plan and billing"}, "x")
    with pytest.raises(ProviderError, match="quota") as e:
        model(fake, sleeps).complete(REQUEST)
    assert not isinstance(e.value, RateLimitError) and sleeps == []


def test_500_retried_then_error(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add(*[{"error": 500}] * 3)
    with pytest.raises(ProviderError, match="500"):
        model(fake, sleeps, max_retries=2).complete(REQUEST)
    assert sleeps == [1.0, 2.0] and len(fake.requests) == 3


def test_503_in_stream_then_success(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 503}, {"tool_calls": [{"name": "read", "arguments": {"path": "MEMORY.md"}}]})
    done = final_response(model(fake, sleeps).stream(REQUEST))
    assert done.tool_calls[0].arguments == {"path": "MEMORY.md"} and sleeps == [1.0]


def test_context_overflow(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": "context_overflow"}, {"error": "context_overflow"})
    with pytest.raises(ContextOverflowError, match="maximum context length"):
        model(fake, sleeps).complete(REQUEST)
    with pytest.raises(ContextOverflowError):
        list(model(fake, sleeps).stream(REQUEST))
    assert sleeps == [] and len(fake.requests) == 2


def test_garbage_is_provider_error(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"garbage": True}, {"garbage": True})
    with pytest.raises(ProviderError, match="not valid JSON"):
        model(fake, sleeps).complete(REQUEST)
    with pytest.raises(ProviderError, match="invalid JSON"):
        list(model(fake, sleeps).stream(REQUEST))


def _sse_transport(chunks: list[object]) -> httpx.MockTransport:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.MockTransport(
        lambda request: httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})
    )


def test_stream_quirks_of_local_servers() -> None:
    # No index, no id, arguments sent as an object, finish "stop" despite tool calls, usage absent.
    chunks: list[object] = [
        {
            "choices": [
                {"delta": {"tool_calls": [{"function": {"name": "read", "arguments": {"path": "a.md"}}}]}}
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [{"id": "x2", "function": {"name": "exec", "arguments": "{not json"}}]
                    }
                }
            ]
        },
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
    ]
    m = OpenAIModel(PROFILE, None, base_url="http://127.0.0.1:9/v1", transport=_sse_transport(chunks))
    done = final_response(m.stream(REQUEST))
    assert done.stop_reason == "tool_use"
    assert done.tool_calls[0] == ToolCallPart("call_0", "read", {"path": "a.md"})
    assert done.tool_calls[1] == ToolCallPart("x2", "exec", {INVALID_ARGUMENTS_KEY: "{not json"})


def test_error_event_inside_stream_is_mapped() -> None:
    chunks: list[object] = [{"error": {"message": "context_length_exceeded: too many tokens"}}]
    m = OpenAIModel(PROFILE, None, base_url="http://127.0.0.1:9/v1", transport=_sse_transport(chunks))
    with pytest.raises(ContextOverflowError):
        list(m.stream(REQUEST))


# --- registry ------------------------------------------------------------------------------------------


def test_parse_model_ref() -> None:
    assert parse_model_ref("openrouter/anthropic/claude-sonnet-4") == (
        "openrouter",
        "anthropic/claude-sonnet-4",
    )
    with pytest.raises(ConfigError):
        parse_model_ref("gpt-4o")


def test_known_limits() -> None:
    assert known_limits("claude-sonnet-4-5-20250929") == (200_000, 64_000)
    assert known_limits("anthropic/claude-3-5-haiku-latest") == (200_000, 8192)
    assert known_limits("gpt-4o-mini") == (128_000, 16_384)
    assert known_limits("gpt-4.1-mini")[0] == 1_047_576
    assert known_limits("my-local-finetune") == (128_000, 8192)


def test_build_model_uses_config_limits_and_env_key() -> None:
    config = ModelsConfig.model_validate(
        {
            "providers": {
                "work": {
                    "type": "anthropic",
                    "api_key_env": "WORK_ANTHROPIC_KEY",
                    "models": {"claude-custom": {"context_window": 100_000, "max_output_tokens": 1000}},
                }
            }
        }
    )
    m = build_model("work/claude-custom", config, {"WORK_ANTHROPIC_KEY": "k"})
    assert isinstance(m, AnthropicModel)
    p = m.profile
    assert (p.provider, p.model_id, p.context_window, p.max_output_tokens) == (
        "work",
        "claude-custom",
        100_000,
        1000,
    )
    assert p.supports_prompt_caching and p.cache_ttl_seconds == 300 and p.tool_call_style == "anthropic"
    with pytest.raises(AuthError) as e:
        build_model("work/claude-custom", config, {})
    assert "WORK_ANTHROPIC_KEY" in e.value.hint


def test_build_model_errors() -> None:
    with pytest.raises(AuthError, match="no API key") as e:
        build_model("anthropic/claude-sonnet-4-5", ModelsConfig(), {})
    assert "ANTHROPIC_API_KEY" in e.value.hint
    with pytest.raises(ConfigError, match="unknown model provider"):
        build_model("nope/model", ModelsConfig(), {})
    assert isinstance(build_model("openai/gpt-4o", ModelsConfig(), {"OPENAI_API_KEY": "k"}), OpenAIModel)


# --- shared transport pieces ----------------------------------------------------------------------------


def test_retry_after_header_forms() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from hermit.retry import retry_after_seconds

    assert retry_after_seconds(httpx.Headers({"retry-after": "7"})) == 7.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (retry_after_seconds(httpx.Headers({"retry-after": later})) or 0) <= 30
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx.Headers()) is None


def test_sse_parsing_follows_the_spec() -> None:
    from hermit.models.provider_wire import SseEvent, iter_sse

    lines = [": comment", "event: a", 'data: {"x":', "data: 1}", "", "data:no-space", "", "", "data: tail"]
    assert list(iter_sse(iter(lines))) == [
        SseEvent("a", '{"x":\n1}'),
        SseEvent("message", "no-space"),
        SseEvent("message", "tail"),
    ]


def test_json_error_body_on_a_200_stream_is_mapped() -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(
            200, json={"error": {"message": "invalid x-api-key", "type": "authentication_error"}}
        )
    )
    m = OpenAIModel(PROFILE, None, base_url="http://127.0.0.1:9/v1", transport=transport)
    with pytest.raises(ProviderError, match="invalid x-api-key"):
        list(m.stream(REQUEST))
