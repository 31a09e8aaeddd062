"""The Anthropic adapter over real HTTP against the fake provider: replies, streaming, caching, faults."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from hermit.config.schema import ModelsConfig
from hermit.errors import AuthError, ContextOverflowError, ProviderError, RateLimitError
from hermit.messages import (
    AssistantMessage,
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
    ResponseDone,
    TextDelta,
    ToolCallDelta,
    ToolSchema,
    build_model,
    final_response,
)
from hermit.testing import FakeProvider

PROFILE = ModelProfile(
    "anthropic",
    "claude-sonnet-4-5",
    context_window=200_000,
    max_output_tokens=4096,
    supports_prompt_caching=True,
    cache_ttl_seconds=300,
    tool_call_style="anthropic",
)
SEARCH = ToolSchema(
    "memory_search",
    "Search memory.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
REQUEST = ModelRequest("You are Hermit.", (UserMessage("What database did we pick?"),), (SEARCH,))


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as f:
        yield f


@pytest.fixture
def sleeps() -> list[float]:
    return []


def model(fake: FakeProvider, sleeps: list[float], **kw: object) -> AnthropicModel:
    return AnthropicModel(PROFILE, "sk-ant-test", base_url=fake.base_url, sleep=sleeps.append, **kw)


def test_text_reply_with_usage_including_cache(fake: FakeProvider, sleeps: list[float]) -> None:
    usage = {"input_tokens": 12, "output_tokens": 7, "cache_read_tokens": 3000, "cache_write_tokens": 250}
    fake.add({"text": "We picked PostgreSQL.", "usage": usage})
    r = model(fake, sleeps).complete(REQUEST)
    assert r.text == "We picked PostgreSQL."
    assert r.stop_reason == "end_turn" and r.tool_calls == ()
    assert r.usage == Usage(12, 7, 3000, 250)
    assert r.usage.context_tokens == 3262
    assert (r.message.model, r.message.provider) == ("claude-sonnet-4-5", "anthropic")


def test_request_carries_headers_cache_control_and_tools(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add("ok")
    model(fake, sleeps).complete(REQUEST)
    [req] = fake.requests
    assert req.path == "/v1/messages" and req.api == "anthropic"
    assert req.headers["x-api-key"] == "<redacted>"
    assert req.headers["anthropic-version"] == "2023-06-01"
    body = req.body
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 4096
    assert body["system"] == [
        {"type": "text", "text": "You are Hermit.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"] == [
        {"name": "memory_search", "description": "Search memory.", "input_schema": dict(SEARCH.parameters)}
    ]
    assert "stream" not in body


def test_no_cache_control_when_profile_disables_caching(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add("ok")
    plain = ModelProfile("anthropic", "claude-x", supports_prompt_caching=False)
    AnthropicModel(plain, "k", base_url=fake.base_url).complete(REQUEST)
    assert "cache_control" not in str(fake.requests[0].body)


def test_tool_call_reply(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add(
        {"text": "Searching.", "tool_calls": [{"name": "memory_search", "arguments": {"query": "database"}}]}
    )
    r = model(fake, sleeps).complete(REQUEST)
    assert r.stop_reason == "tool_use"
    assert r.text == "Searching."
    [call] = r.tool_calls
    assert call.name == "memory_search" and call.arguments == {"query": "database"} and call.id


def test_stream_text_deltas_and_final_usage(fake: FakeProvider, sleeps: list[float]) -> None:
    text = "PostgreSQL, chosen on 2026-01-20 for its JSONB support. 数据库已选定。"
    fake.add({"text": text, "usage": {"input_tokens": 40, "output_tokens": 20, "cache_read_tokens": 900}})
    events = list(model(fake, sleeps).stream(REQUEST))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 3 and "".join(deltas) == text
    assert isinstance(events[-1], ResponseDone)
    done = events[-1].response
    assert done.text == text and done.stop_reason == "end_turn"
    assert done.usage == Usage(40, 20, 900, 0)
    assert fake.requests[0].body["stream"] is True


def test_stream_tool_call_arguments_assembled(fake: FakeProvider, sleeps: list[float]) -> None:
    args = {"query": "what did we decide about the 数据库 migration", "maxResults": 4, "minScore": 0.2}
    fake.add(
        {"tool_calls": [{"name": "memory_search", "arguments": args}, {"name": "read", "arguments": {}}]}
    )
    events = list(model(fake, sleeps).stream(REQUEST))
    tool_deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    first = [d for d in tool_deltas if d.index == 0]
    assert first[0].name == "memory_search" and first[0].id
    assert len(first) > 3  # arguments arrived in several input_json_delta pieces
    done = final_response(iter(events))
    assert [c.name for c in done.tool_calls] == ["memory_search", "read"]
    assert done.tool_calls[0].arguments == args and done.tool_calls[1].arguments == {}
    assert done.stop_reason == "tool_use"


def test_history_with_tool_results_is_merged_into_alternating_turns(
    fake: FakeProvider, sleeps: list[float]
) -> None:
    history = (
        UserMessage("Find the db decision"),
        AssistantMessage(
            (
                TextPart(""),
                ToolCallPart("toolu_1", "memory_search", {"query": "db"}),
                ToolCallPart("toolu_2", "read", {"path": "MEMORY.md"}),
            ),
            "tool_use",
        ),
        ToolResultMessage("toolu_1", "memory_search", '{"results": []}'),
        ToolResultMessage("toolu_2", "read", "", is_error=True),
        AssistantMessage((), "error", error_message="HTTP 500"),  # a failed turn kept in the transcript
        UserMessage("and?"),
    )
    fake.add("Nothing found.")
    r = model(fake, sleeps).complete(ModelRequest("sys", history))
    assert r.text == "Nothing found."  # the fake server's Anthropic rules accepted the conversation
    msgs = fake.requests[0].body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert [b["type"] for b in msgs[1]["content"]] == ["tool_use", "tool_use"]
    last = msgs[2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert last[1]["is_error"] is True and last[1]["content"][0]["text"] == "(no output)"
    assert last[-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in last[0]


def test_401_is_auth_error_with_hint_naming_the_key(fake: FakeProvider) -> None:
    fake.add({"error": 401})
    config = ModelsConfig.model_validate(
        {"providers": {"anthropic": {"type": "anthropic", "base_url": fake.base_url}}}
    )
    m = build_model(
        "anthropic/claude-sonnet-4-5", config, {"ANTHROPIC_API_KEY": "sk-wrong"}, sleep=lambda s: None
    )
    with pytest.raises(AuthError) as e:
        m.complete(REQUEST)
    assert "ANTHROPIC_API_KEY" in e.value.hint
    assert len(fake.requests) == 1  # never retried


def test_wrong_key_rejected_by_server_configured_with_a_key(sleeps: list[float]) -> None:
    with FakeProvider(["hello"], api_key="sk-right") as fake:
        with pytest.raises(AuthError):
            model(fake, sleeps).complete(REQUEST)
        ok = AnthropicModel(PROFILE, "sk-right", base_url=fake.base_url)
        assert ok.complete(REQUEST).text == "hello"


def test_429_then_success_honours_retry_after(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 429, "retry_after": 0}, {"error": 429, "retry_after": 2.5}, "finally")
    assert model(fake, sleeps).complete(REQUEST).text == "finally"
    assert sleeps == [0.0, 2.5]
    assert len(fake.requests) == 3


def test_429_in_stream_is_retried_before_first_event(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 429, "retry_after": 1}, "streamed")
    assert final_response(model(fake, sleeps).stream(REQUEST)).text == "streamed"
    assert sleeps == [1.0]


def test_429_beyond_retries_raises_rate_limit_error(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add(*[{"error": 429, "retry_after": 3}] * 3)
    with pytest.raises(RateLimitError) as e:
        model(fake, sleeps, max_retries=2).complete(REQUEST)
    assert e.value.retry_after == 3.0 and sleeps == [3.0, 3.0]


def test_long_retry_after_is_not_waited_for(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 429, "retry_after": 3600}, "never")
    with pytest.raises(RateLimitError) as e:
        model(fake, sleeps).complete(REQUEST)
    assert e.value.retry_after == 3600.0 and sleeps == []


def test_500_retried_with_backoff_then_error(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add(*[{"error": 500}] * 4)
    with pytest.raises(ProviderError) as e:
        model(fake, sleeps, max_retries=3).complete(REQUEST)
    assert not isinstance(e.value, AuthError | RateLimitError | ContextOverflowError)
    assert "500" in e.value.message and e.value.hint
    assert sleeps == [1.0, 2.0, 4.0] and len(fake.requests) == 4


def test_overloaded_529_then_success(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": 529, "message": "Overloaded"}, "back")
    assert model(fake, sleeps).complete(REQUEST).text == "back"
    assert sleeps == [1.0]


def test_context_overflow_is_not_retried(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"error": "context_overflow"}, {"error": "context_overflow"}, "unused")
    with pytest.raises(ContextOverflowError, match="prompt is too long"):
        model(fake, sleeps).complete(REQUEST)
    with pytest.raises(ContextOverflowError):
        list(model(fake, sleeps).stream(REQUEST))
    assert sleeps == [] and fake.remaining == 1


def test_garbage_is_provider_error(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"garbage": True}, {"garbage": True})
    with pytest.raises(ProviderError, match="not valid JSON"):
        model(fake, sleeps).complete(REQUEST)
    with pytest.raises(ProviderError, match="invalid JSON"):
        list(model(fake, sleeps).stream(REQUEST))


def test_timeout_is_provider_error(fake: FakeProvider, sleeps: list[float]) -> None:
    fake.add({"text": "slow", "delay": 1.0})
    with pytest.raises(ProviderError, match="within"):
        model(fake, sleeps, timeout_seconds=0.2, max_retries=0).complete(REQUEST)


def test_refused_loopback_server_is_provider_error_without_retries(sleeps: list[float]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = AnthropicModel(PROFILE, "k", base_url=f"http://127.0.0.1:{port}", sleep=sleeps.append, max_retries=1)
    with pytest.raises(ProviderError, match=f"nothing listens on 127.0.0.1:{port}"):
        m.complete(REQUEST)
    assert sleeps == []  # nothing listens on this machine: waiting will not start the server


def test_base_url_with_v1_suffix_is_accepted(fake: FakeProvider) -> None:
    fake.add("ok")
    m = AnthropicModel(PROFILE, "k", base_url=fake.base_url + "/v1/")
    assert m.complete(REQUEST).text == "ok"
