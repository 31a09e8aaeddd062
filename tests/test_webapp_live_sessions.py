"""Every tab showing a session follows it (in process, the scripted model): the gateway tells a page
`session.changed` when the session it shows (the last chat.history it loaded) differs from what it has —
whoever wrote it: another tab through the gateway, or another process (`hermit chat` on the same session)
appending to its transcript — once per change, `busy` while a turn runs there; a page showing another session
hears only `sessions.changed` (its list, for an unread mark); a page showing an ended session nothing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gatewayhelpers import last_user_text
from hermit.gateway.webchat_api import WebchatApi
from hermit.messages import AssistantMessage, TextPart, UserMessage
from hermit.models.base import ModelRequest
from hermit.sessions.store import SessionStore
from hermit.testing.scripted import Reply
from webappclient import Clock, Web, connected, served

MAIN = "agent:main:main"
CONFIG = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"},
                                  "session": {"hooks": {"session_memory": {"enabled": False}}}}}}


GATE = threading.Event()  # a "slow" turn waits for it: the test sees the turn running


def model(req: ModelRequest) -> Reply:
    text = last_user_text(req)
    if "slow" in text:
        assert GATE.wait(10)
    return f"echo: {text}"


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, str, Path]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    monkeypatch.setattr(WebchatApi, "watch_interval", 0.05)
    with served(home, CONFIG, model, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token):
        yield client, token, home


def quiet(web: Web, seconds: float = 0.4) -> list[dict[str, Any]]:
    """The events that came within `seconds` (a request's answer marks the end: nothing hangs)."""
    time.sleep(seconds)
    web.events.clear()
    web.ok("sessions.list")
    return [f for f in web.events if f["event"] in ("session.changed", "sessions.changed")]


def test_a_turn_from_another_tab_is_told_to_the_tab_showing_that_session(
        gateway: tuple[TestClient, str, Path]) -> None:
    client, token, _ = gateway
    with connected(client, token, "tab-a") as a, connected(client, token, "tab-b") as b, \
            connected(client, token, "tab-c") as c:
        first = a.ok("chat.history")
        assert first["version"] == "" and first["busy"] is False  # no session yet
        b.turn("from tab b")
        changed = a.event("session.changed", lambda p: not p["busy"] and p["version"])
        assert changed["sessionKey"] == MAIN and changed["agentId"] == "main"
        hist = a.ok("chat.history")
        assert [m["text"] for m in hist["messages"]] == ["from tab b", "echo: from tab b"]
        assert hist["version"] == changed["version"]
        assert [f for f in quiet(a) if f["event"] == "session.changed"] == []  # told once, then nothing new
        # c shows no session: it hears the list's change — waited for as an event, not looked for among what came
        # within a fixed pause (the watcher looks in its own time, later still on a busy machine).
        assert c.event("sessions.changed") == {}


def test_a_transcript_written_by_another_process_is_told_too(gateway: tuple[TestClient, str, Path]) -> None:
    client, token, home = gateway
    with connected(client, token, "tab-a") as a:
        a.turn("hello")
        before = a.ok("chat.history")["version"]
        assert not [f for f in quiet(a) if f["event"] == "session.changed"]
        store = SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False)
        transcript = store.open_transcript(store.get(MAIN))  # what `hermit chat` on this session does
        transcript.append_message(UserMessage("typed at the terminal").to_dict())
        transcript.append_message(AssistantMessage((TextPart("answered at the terminal"),)).to_dict())
        changed = a.event("session.changed")
        assert changed["version"] != before and changed["busy"] is False
        assert a.ok("chat.history")["messages"][-1]["text"] == "answered at the terminal"


def test_a_tab_on_another_or_an_ended_session_is_not_told_its_changes(gateway: tuple[TestClient, str, Path]) -> None:
    client, token, _ = gateway
    with connected(client, token, "tab-a") as a, connected(client, token, "tab-b") as b:
        a.turn("the first session")
        old = a.ok("chat.history")["sessionId"]
        a.turn("", method="sessions.new")
        b.ok("chat.history", sessionKey=MAIN, sessionId=old)  # b reads the ended session
        quiet(b)
        a.turn("the second session")
        assert [f for f in quiet(b) if f["event"] == "session.changed"] == []
        assert b.ok("chat.history", sessionKey=MAIN, sessionId=old)["messages"][0]["text"] == "the first session"


def test_a_turn_running_elsewhere_is_said_busy_then_its_reply(gateway: tuple[TestClient, str, Path]) -> None:
    client, token, _ = gateway
    GATE.clear()
    with connected(client, token, "tab-a") as a, connected(client, token, "tab-b") as b:
        a.ok("chat.history")
        b.ws.send_text(json.dumps({"type": "req", "id": "slow1", "method": "chat.send",
                                   "params": {"text": "a slow question"}}))
        running = a.event("session.changed", lambda p: p["busy"])
        deadline = time.monotonic() + 10
        while not (shown := a.ok("chat.history"))["messages"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the turn has started; its message is written a moment later
        assert [m["text"] for m in shown["messages"]] == ["a slow question"] and shown["busy"]  # the reply to come
        GATE.set()
        done = a.event("session.changed", lambda p: not p["busy"])
        assert done["version"] != running["version"]
        assert a.ok("chat.history")["messages"][-1]["text"] == "echo: a slow question"
