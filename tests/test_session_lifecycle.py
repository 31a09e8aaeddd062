"""Session lifecycle: daily and idle resets with an injected clock, /new and /reset, and the session-memory hook."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hermit.agent.session_memory import keyword_slug, recent_dialogue, sanitize_slug
from hermit.errors import ProviderError
from hermit.messages import UserMessage
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key, main_session_key
from hermit.testing import FakeProvider, FunctionModel, ScriptedModel
from sessionhelpers import Clock, fake_model, memory_service, runtime, small_config

MAIN = main_session_key("main")
SLUG_MARK = "kebab-case slug"


def texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if isinstance(m, UserMessage)]


# ---- resets ------------------------------------------------------------------------------------------


def test_daily_reset_at_4am_local_time(tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 1, 20, 1, 30, tzinfo=UTC))  # 02:30 in Paris
    model = ScriptedModel(["one", "two", "three"])
    rt = runtime(small_config(tmp_path / "home"), model, clock=clock)
    first = rt.run_turn(MAIN, "before dawn")
    clock.advance(minutes=80)  # 03:50 Paris: same session
    second = rt.run_turn(MAIN, "still up")
    clock.advance(minutes=20)  # 04:10 Paris: the 04:00 boundary has passed
    third = rt.run_turn(MAIN, "good morning")
    assert first.session_id == second.session_id != third.session_id
    assert (second.reset, third.reset) == (None, "daily")
    assert texts(model.requests[1]) == ["before dawn", "still up"] and texts(model.requests[2]) == ["good morning"]
    record = rt.session(MAIN)
    assert record is not None and record.previous_session_id == first.session_id


def test_idle_reset_and_overrides_by_channel_and_heartbeats(tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 1, 20, 9, 0, tzinfo=UTC))
    session = {"reset": {"mode": "idle", "idle_minutes": 60},
               "reset_by_channel": {"telegram": {"idle_minutes": 10}}}
    model = ScriptedModel([{"text": "ok", "repeat": True}])
    rt = runtime(small_config(tmp_path / "home", defaults={"session": session}), model, clock=clock)
    group = group_session_key("main", "telegram", "-1001")
    a = rt.run_turn(MAIN, "hi")
    g = rt.run_turn(group, "hi all")
    clock.advance(minutes=59)
    assert rt.run_turn(MAIN, "still here").session_id == a.session_id
    g2 = rt.run_turn(group, "anyone?")  # telegram resets after 10 idle minutes
    assert g2.session_id != g.session_id and g2.reset == "idle"
    clock.advance(minutes=61)
    beat = rt.run_turn(MAIN, "heartbeat check", heartbeat=True)  # heartbeats never reset a session
    assert beat.session_id == a.session_id and beat.reset is None
    clock.advance(minutes=61)
    later = rt.run_turn(MAIN, "back again")
    assert later.session_id != a.session_id and later.reset == "idle"


def test_new_and_reset_pass_the_rest_through_as_the_first_prompt(tmp_path: Path) -> None:
    model = ScriptedModel([{"match": {"contains": SLUG_MARK}, "text": "garden-plans", "repeat": True},
                           "first", "second"])
    rt = runtime(small_config(tmp_path / "home"), model)
    old = rt.run_turn(MAIN, "let's plan the garden beds")
    fresh = rt.run_turn(MAIN, "/new what should I plant in March?")
    assert fresh.reset == "/new" and fresh.session_id != old.session_id and fresh.reply == "second"
    assert texts(model.requests[-1]) == ["what should I plant in March?"]
    bare = rt.run_turn(MAIN, "/RESET")
    assert bare.reset == "/reset" and bare.delivered and "Started a new session" in bare.reply
    assert bare.iterations == 0 and bare.session_id not in (old.session_id, fresh.session_id)
    assert "memory/2026-01-20-garden-plans-2.md" in bare.reply  # the second save of the same topic


# ---- the session-memory hook --------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_new_saves_a_slugged_memory_file_that_the_next_session_finds(tmp_path: Path, e5: object, api: str) -> None:
    home = tmp_path / "home"
    script: list[Any] = [
        {"match": {"contains": SLUG_MARK}, "text": "K8s Ingress Cert-Renewal!\nsecond line"},
        "We'll renew the staging ingress certificate with cert-manager on Thursday.",
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "ingress certificate renewal staging"}}]},
        "Last time we planned to renew the staging ingress certificate on Thursday.",
    ]
    with FakeProvider(script) as fake:
        loaded = small_config(home, fake, api)
        memory = memory_service(loaded, e5)
        rt = runtime(loaded, fake_model(loaded), memory=memory)
        rt.run_turn(MAIN, "The TLS certificate of the staging ingress expires soon; password: hunter2")
        old = rt.session(MAIN)
        result = rt.run_turn(MAIN, "/new what did we decide about the certificate?")
    memory.close()
    assert old is not None
    path = home / "workspace" / "memory" / "2026-01-20-k8s-ingress-cert-renewal-second.md"
    assert not path.exists()  # only the first line of the model's answer counts
    path = home / "workspace" / "memory" / "2026-01-20-k8s-ingress-cert-renewal.md"
    text = path.read_text()
    # The whole file, title included, is one owner-only block (memory/policy/audience.py).
    assert text.startswith(f'<!-- origin session="{MAIN}" audience="owner" -->\n'
                           "# Session 2026-01-20 14:05 (Europe/Paris): k8s ingress cert renewal\n")
    assert text.endswith("<!-- /origin -->\n") and text.count("<!-- /origin -->") == 1
    assert f"- Session key: {MAIN}\n" in text and f"- Session id: {old.session_id}\n" in text
    assert "- Source: direct\n" in text and "Saved on /new" in text
    assert "User: The TLS certificate of the staging ingress" in text and "hunter2" not in text
    assert "Assistant: We'll renew the staging ingress certificate" in text
    slug_request = fake.requests[1]  # between the old session's turn and the new session's first request
    assert SLUG_MARK in json.dumps(slug_request.body) and slug_request.body.get("stream") in (None, False)
    assert slug_request.body["max_tokens"] == 24 and "tools" not in slug_request.body
    # The next session searched memory and found the saved file.
    found = json.loads(result.tool_calls[0].result)["results"]
    assert found[0]["path"] == "memory/2026-01-20-k8s-ingress-cert-renewal.md" and found[0]["source"] == "memory"
    assert found[0]["audience"] == "owner" and "origin" not in found[0]  # the owner's own notes carry no label
    assert result.reset == "/new" and result.session_id != old.session_id


def test_slug_falls_back_to_keywords_on_failure_and_timeout(tmp_path: Path) -> None:
    release = threading.Event()
    calls: list[str] = []

    def reply(request: ModelRequest) -> Any:
        is_slug = SLUG_MARK in texts(request)[-1]
        calls.append("slug" if is_slug else "turn")
        if is_slug and calls.count("slug") == 1:
            raise ProviderError("provider down", "retry")
        if is_slug:
            release.wait(5)  # the second slug request hangs until the test lets it go
            return "too-late"
        return "ok"

    session = {"hooks": {"session_memory": {"slug_timeout_seconds": 0.05, "messages": 3}}}
    rt = runtime(small_config(tmp_path / "home", defaults={"session": session}), FunctionModel(reply))
    for text in ("Budget spreadsheet for the offsite", "budget totals per team", "offsite venue shortlist",
                 "the offsite budget again"):
        rt.run_turn(MAIN, text)
    first = rt.reset_session(MAIN)
    rt.run_turn(MAIN, "Budget spreadsheet for the offsite")
    second = rt.reset_session(MAIN, "/reset")
    release.set()
    assert first.memory_file is not None and first.memory_file.name == "2026-01-20-offsite-budget.md"
    assert second.memory_file is not None and second.memory_file.name == "2026-01-20-budget-spreadsheet-offsite.md"
    saved = first.memory_file.read_text()
    assert "the last 3 user/assistant messages" in saved and "Budget spreadsheet" not in saved
    assert "Saved on /reset" in second.memory_file.read_text()


def test_hook_off_and_empty_sessions_write_nothing(tmp_path: Path) -> None:
    model = ScriptedModel(["ok"])
    session = {"hooks": {"session_memory": {"enabled": False}}}
    rt = runtime(small_config(tmp_path / "home", defaults={"session": session}), model)
    rt.run_turn(MAIN, "hello")
    assert rt.reset_session(MAIN).memory_file is None
    rt2 = runtime(small_config(tmp_path / "h2"), ScriptedModel([]))
    rt2.prepare(MAIN)
    assert rt2.reset_session(MAIN).memory_file is None  # no messages: no file, no slug request
    assert list((tmp_path / "home" / "workspace" / "memory").iterdir()) == []


def test_slug_helpers() -> None:
    assert sanitize_slug("  `Database Migration Plan` ") == "database-migration-plan"
    assert sanitize_slug("one two three four five six seven") == "one-two-three-four-five"
    assert sanitize_slug("数据库迁移") is None and sanitize_slug("") is None and sanitize_slug("123") is None
    from hermit.agent.session_memory import Line

    lines = [Line("user", "Postgres migration: the postgres replica lags"), Line("assistant", "Kafka kafka kafka")]
    assert keyword_slug(lines, "abc") == "postgres-migration-replica"
    assert keyword_slug([Line("user", "你好")], "1F2E-99aa") == "session-1f2e99aa"


def test_recent_dialogue_skips_tool_traffic_and_failures(tmp_path: Path) -> None:
    from hermit.sessions.transcript import Transcript

    t = Transcript.create(tmp_path / "s.jsonl", cwd=tmp_path, session_id="s", fsync=False)
    t.append_message({"role": "user", "content": [{"type": "text", "text": "q1"}]})
    t.append_message({"role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "read",
                                                         "arguments": {}}], "stopReason": "tool_use"})
    t.append_message({"role": "toolResult", "toolCallId": "c", "toolName": "read", "content": "data"})
    t.append_message({"role": "assistant", "content": [{"type": "text", "text": "a1"}]})
    t.append_message({"role": "assistant", "content": [{"type": "text", "text": "partial"}], "stopReason": "error"})
    t.append_custom("memory_flush", {"message": {"role": "user", "content": "flush prompt"}})
    assert [(d.role, d.text) for d in recent_dialogue(t.path, 15)] == [("user", "q1"), ("assistant", "a1")]
