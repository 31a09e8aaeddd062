"""The fake provider server (script, matching, recording, API rules, CLI) and the scripted test models."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermit.errors import AuthError, ContextOverflowError, ProviderError, RateLimitError
from hermit.messages import AssistantMessage, TextPart, ToolCallPart, ToolResultMessage, Usage, UserMessage
from hermit.models import (
    Model,
    ModelProfile,
    ModelRequest,
    OpenAIModel,
    ResponseDone,
    TextDelta,
    ToolCallDelta,
    final_response,
)
from hermit.testing import FakeProvider, FunctionModel, ScriptedModel, ScriptExhaustedError, load_script
from prochelpers import PROC_TIMEOUT

ANTHROPIC_BODY = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
OPENAI_BODY = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}
A_HEADERS = {"x-api-key": "sk-ant-secret", "anthropic-version": "2023-06-01"}


def post_anthropic(
    fake: FakeProvider, body: dict[str, object], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(f"{fake.base_url}/v1/messages", json=body, headers=headers or A_HEADERS)


def post_openai(fake: FakeProvider, body: Mapping[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{fake.openai_base_url}/chat/completions", json=body, headers={"authorization": "Bearer sk-1"}
    )


def test_load_script_json_jsonl_and_steps_object(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(["hi", {"error": 429, "retry_after": 0}]))
    (tmp_path / "b.jsonl").write_text(
        '{"text": "one"}\n\n{"tool_calls": [{"name": "read", "arguments": {}}]}\n'
    )
    (tmp_path / "c.json").write_text(json.dumps({"steps": [{"garbage": True}]}))
    a = load_script(tmp_path / "a.json")
    assert a[0].text == "hi" and a[1].error == 429 and a[1].retry_after == 0.0
    b = load_script(tmp_path / "b.jsonl")
    assert b[0].text == "one" and b[1].tool_calls[0].name == "read"
    assert load_script(tmp_path / "c.json")[0].garbage


@pytest.mark.parametrize(
    "step, fragment",
    [
        ({"txt": "typo"}, "unknown keys"),
        ({"error": 200}, "HTTP status"),
        ({"tool_calls": [{"arguments": {}}]}, "needs a name"),
        ({"usage": {"input": 1}}, "usage takes only"),
        ({"match": {"role": "user"}}, "match takes only"),
        ({"stop_reason": "stop"}, "stop_reason"),
    ],
)
def test_invalid_steps_fail_at_load(tmp_path: Path, step: dict[str, object], fragment: str) -> None:
    (tmp_path / "s.json").write_text(json.dumps([step]))
    with pytest.raises(ValueError, match=fragment):
        load_script(tmp_path / "s.json")


def test_match_repeat_and_exhaustion() -> None:
    script = [
        {"match": {"contains": "Summarize"}, "text": "SUMMARY", "repeat": True},
        {"match": {"api": "openai"}, "text": "for openai"},
        "first",
    ]
    with FakeProvider(script) as fake:
        assert post_anthropic(fake, ANTHROPIC_BODY).json()["content"][0]["text"] == "first"
        summary = {**OPENAI_BODY, "messages": [{"role": "user", "content": "Summarize this"}]}
        assert post_openai(fake, summary).json()["choices"][0]["message"]["content"] == "SUMMARY"
        assert post_openai(fake, OPENAI_BODY).json()["choices"][0]["message"]["content"] == "for openai"
        assert post_openai(fake, summary).json()["choices"][0]["message"]["content"] == "SUMMARY"
        r = post_openai(fake, OPENAI_BODY)
        assert r.status_code == 400 and "script exhausted" in r.json()["error"]["message"]
        assert [q.step for q in fake.requests] == [2, 0, 1, 0, None]
        assert fake.remaining == 0


def test_requests_recorded_with_secrets_redacted(tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    with FakeProvider(["a", "b"], record=record) as fake:
        post_anthropic(fake, ANTHROPIC_BODY)
        post_openai(fake, OPENAI_BODY)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [x["path"] for x in lines] == ["/v1/messages", "/v1/chat/completions"]
    assert lines[0]["headers"]["x-api-key"] == "<redacted>"
    assert lines[1]["headers"]["authorization"] == "Bearer <redacted>"
    assert "sk-ant-secret" not in record.read_text() and "sk-1" not in record.read_text()
    assert lines[0]["body"] == ANTHROPIC_BODY


def test_api_rules_are_enforced_like_the_real_apis() -> None:
    with FakeProvider(["unused"]) as fake:
        two_users = {
            **ANTHROPIC_BODY,
            "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        }
        assert "alternate" in post_anthropic(fake, two_users).json()["error"]["message"]
        orphan = {
            **ANTHROPIC_BODY,
            "messages": [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}],
                },
                {"role": "user", "content": "b"},
            ],
        }
        assert "without tool_result" in post_anthropic(fake, orphan).json()["error"]["message"]
        empty_text = {
            **ANTHROPIC_BODY,
            "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        }
        assert "non-empty" in post_anthropic(fake, empty_text).json()["error"]["message"]
        no_version = post_anthropic(fake, ANTHROPIC_BODY, {"x-api-key": "k"})
        assert no_version.status_code == 400 and "anthropic-version" in no_version.text
        unanswered = {
            **OPENAI_BODY,
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
                {"role": "user", "content": "b"},
            ],
        }
        assert "must be answered" in post_openai(fake, unanswered).json()["error"]["message"]
        assert fake.remaining == 1  # rejected requests use no step


def test_health_and_unknown_route() -> None:
    with FakeProvider() as fake:
        assert httpx.get(f"{fake.base_url}/health").text == "ok"
        assert httpx.post(f"{fake.base_url}/v2/other", json={}).status_code == 404


def test_cli_subprocess_serves_script_and_records(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text('{"error": 500}\n{"text": "from the CLI server"}\n')
    record = tmp_path / "rec.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermit.testing.fake_provider",
            "--port",
            "0",
            "--script",
            str(script),
            "--record",
            str(record),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("fake provider listening on http://127.0.0.1:"), line + proc.stderr.read()  # type: ignore[union-attr]
        base = line.rsplit(" ", 1)[1].strip()
        m = OpenAIModel(ModelProfile("local", "m"), None, base_url=base + "/v1", sleep=lambda s: None)
        assert m.complete(ModelRequest("sys", (UserMessage("hello"),))).text == "from the CLI server"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    recorded = [json.loads(x) for x in record.read_text().splitlines()]
    assert len(recorded) == 2 and recorded[1]["body"]["messages"][-1] == {"role": "user", "content": "hello"}


def test_cli_rejects_a_bad_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"txt": "typo"}]')
    r = subprocess.run(
        [sys.executable, "-m", "hermit.testing.fake_provider", "--script", str(bad)],
        capture_output=True,
        text=True,
        timeout=PROC_TIMEOUT,
    )
    assert r.returncode == 2 and "unknown keys" in r.stderr


# --- ScriptedModel / FunctionModel --------------------------------------------------------------------

REQ = ModelRequest("You are Hermit.", (UserMessage("remember the 数据库 choice"),))


def test_scripted_model_replays_and_records() -> None:
    m = ScriptedModel(
        [
            {"tool_calls": [{"name": "memory_search", "arguments": {"query": "db"}}]},
            "Done.",
            AssistantMessage((TextPart("literal"),), usage=Usage(1, 1)),
        ]
    )
    assert isinstance(m, Model)
    first = m.complete(REQ)
    assert first.stop_reason == "tool_use" and first.tool_calls[0].id == "call_1"
    assert first.usage.input_tokens > 0 and first.message.provider == "scripted"
    follow = ModelRequest(
        REQ.system,
        (*REQ.messages, first.message, ToolResultMessage("call_1", "memory_search", "{}")),
    )
    assert m.complete(follow).text == "Done."
    assert m.complete(REQ).text == "literal"
    assert m.requests == [REQ, follow, REQ]
    with pytest.raises(ScriptExhaustedError):
        m.complete(REQ)


@pytest.mark.parametrize(
    "step, error",
    [
        ({"error": 401}, AuthError),
        ({"error": 429, "retry_after": 2}, RateLimitError),
        ({"error": "context_overflow"}, ContextOverflowError),
        ({"error": 500}, ProviderError),
        ({"garbage": True}, ProviderError),
    ],
)
def test_scripted_model_failure_steps_raise_adapter_errors(
    step: dict[str, object], error: type[Exception]
) -> None:
    m = ScriptedModel([step])
    with pytest.raises(error):
        m.complete(REQ)


def test_scripted_model_streams_like_an_adapter() -> None:
    m = ScriptedModel(
        [
            {
                "text": "Saving it to today's log now.",
                "tool_calls": [{"name": "write", "arguments": {"path": "memory/x.md"}}],
            }
        ]
    )
    events = list(m.stream(REQ))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Saving it to today's log now."
    args = "".join(e.arguments_delta for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(args) == {"path": "memory/x.md"}
    assert isinstance(events[-1], ResponseDone) and events[-1].response.tool_calls[0].name == "write"


def test_scripted_model_match_and_raise_exception() -> None:
    m = ScriptedModel(
        [
            {"match": {"contains": "flush"}, "text": "NO_REPLY", "repeat": True},
            RuntimeError("boom"),
        ]
    )
    with pytest.raises(RuntimeError, match="boom"):
        m.complete(REQ)
    flush = ModelRequest("Pre-compaction memory flush turn.", (UserMessage("Store durable memories now."),))
    assert m.complete(flush).text == m.complete(flush).text == "NO_REPLY"


def test_function_model() -> None:
    def reply(request: ModelRequest) -> AssistantMessage | str:
        last = request.messages[-1]
        if isinstance(last, UserMessage):
            return AssistantMessage((ToolCallPart("t1", "memory_search", {"query": last.text}),), "tool_use")
        return "found it"

    m = FunctionModel(reply, profile=ModelProfile("fn", "echo", context_window=4096))
    first = final_response(m.stream(REQ))
    assert first.tool_calls[0].arguments == {"query": "remember the 数据库 choice"}
    second = m.complete(
        ModelRequest("", (*REQ.messages, first.message, ToolResultMessage("t1", "memory_search", "x")))
    )
    assert second.text == "found it" and m.profile.context_window == 4096 and len(m.requests) == 2
