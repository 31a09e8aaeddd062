"""The normalized message protocol: JSON round trip, camelCase keys, and errors on malformed input."""

from __future__ import annotations

import json

import pytest

from hermit.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)

CONVERSATION = [
    UserMessage("What did we decide about the 数据库?"),
    AssistantMessage(
        (
            TextPart("Let me check."),
            ToolCallPart("call_1", "memory_search", {"query": "数据库 decision", "maxResults": 3}),
        ),
        "tool_use",
        Usage(120, 30, 1000, 200),
        "claude-sonnet-4-5",
        "anthropic",
    ),
    ToolResultMessage("call_1", "memory_search", '{"results": []}'),
    ToolResultMessage("call_2", "read", "no such file", is_error=True),
    AssistantMessage((TextPart("We chose PostgreSQL."),), "end_turn", Usage(5, 6)),
    UserMessage("look", images=(ImagePart("image/png", "iVBORw0KGgo="),)),
    ToolResultMessage("call_3", "read", "an image", images=(ImagePart("image/jpeg", "/9j/4AAQ"),)),
    AssistantMessage((), "error", Usage(), error_message="HTTP 500"),
]


@pytest.mark.parametrize("message", CONVERSATION, ids=lambda m: type(m).__name__)
def test_json_round_trip(message: UserMessage | AssistantMessage | ToolResultMessage) -> None:
    text = json.dumps(message_to_dict(message), ensure_ascii=False)
    assert message_from_dict(json.loads(text)) == message


def test_keys_are_camel_case_as_in_transcripts() -> None:
    assistant = CONVERSATION[1].to_dict()
    assert assistant["role"] == "assistant"
    assert assistant["stopReason"] == "tool_use"
    assert assistant["usage"] == {"input": 120, "output": 30, "cacheRead": 1000, "cacheWrite": 200}
    assert assistant["content"][1] == {
        "type": "toolCall",
        "id": "call_1",
        "name": "memory_search",
        "arguments": {"query": "数据库 decision", "maxResults": 3},
    }
    result = CONVERSATION[3].to_dict()
    assert result == {
        "role": "toolResult",
        "toolCallId": "call_2",
        "toolName": "read",
        "content": [{"type": "text", "text": "no such file"}],
        "isError": True,
    }
    image = CONVERSATION[5].to_dict()["content"][1]
    assert image == {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}


def test_string_content_is_accepted() -> None:
    assert message_from_dict({"role": "user", "content": "hi"}) == UserMessage("hi")
    tr = message_from_dict({"role": "toolResult", "toolCallId": "c", "toolName": "t", "content": "out"})
    assert tr == ToolResultMessage("c", "t", "out")
    a = message_from_dict({"role": "assistant", "content": "plain"})
    assert isinstance(a, AssistantMessage) and a.text == "plain" and a.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"role": "system", "content": "x"}, "unknown message role"),
        ({"role": "assistant", "content": [], "stopReason": "stop"}, "stopReason"),
        ({"role": "assistant", "content": [{"type": "thinking"}]}, "unknown assistant content part"),
        (
            {"role": "assistant", "content": [{"type": "toolCall", "id": "a", "name": "b", "arguments": []}]},
            "object",
        ),
        ({"role": "user", "content": 5}, "string or a list"),
        ({"role": "toolResult", "toolName": "t", "content": "x"}, "toolCallId"),
        (
            {"role": "toolResult", "toolCallId": "c", "toolName": "t", "content": "x", "isError": "no"},
            "isError",
        ),
        ({"role": "assistant", "content": [], "usage": {"input": "many"}}, "usage"),
        ("not a dict", "must be an object"),
    ],
)
def test_malformed_input_raises_value_error(raw: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        message_from_dict(raw)


def test_assistant_accessors_and_usage_arithmetic() -> None:
    m = CONVERSATION[1]
    assert isinstance(m, AssistantMessage)
    assert m.text == "Let me check."
    assert [c.name for c in m.tool_calls] == ["memory_search"]
    total = Usage(10, 2, 100, 5) + Usage(1, 1, 0, 0)
    assert total == Usage(11, 3, 100, 5)
    assert total.context_tokens == 116
    assert total.total_tokens == 119
    assert CONVERSATION[6].has_image and not CONVERSATION[2].has_image
