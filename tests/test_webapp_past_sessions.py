"""Past sessions in the web app's protocol (in process, the scripted model): a session ended by `/new` or by an
idle reset is listed by `sessions.list {all: true}` under its chat (`earlier` on the current session, `ended`
with when it started and ended, why, and its size), opens with `chat.history {sessionId}` read-only with that
reason, a page of it at a time, and refuses a message or a `/new` (`read_only`) — its transcript unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gatewayhelpers import last_user_text
from hermit.models.base import ModelRequest
from hermit.sessions.store import SessionStore
from hermit.testing.scripted import Reply
from webappclient import Clock, Web, connected, served

MAIN = "agent:main:main"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CONFIG = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"},
                                  "session": {"reset": {"mode": "idle", "idle_minutes": 60},
                                              "hooks": {"session_memory": {"enabled": False}}}}}}


def model(req: ModelRequest) -> Reply:
    return f"echo: {last_user_text(req)}"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Web, Clock, Path]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    clock = Clock(START)
    with served(home, CONFIG, model, clock) as (client, _, token), connected(client, token, "tab1") as web:
        yield web, clock, home


def sessions_dir(home: Path) -> Path:
    return home / "agents" / "main" / "sessions"


def texts(history: dict[str, Any]) -> list[str]:
    return [m["text"] for m in history["messages"]]


def test_a_session_ended_by_new_is_listed_opens_read_only_and_refuses_a_message(setup: tuple[Web, Clock, Path]) -> None:
    web, _, home = setup
    for i in range(3):
        web.turn(f"first session, message {i}")
    first = web.ok("chat.history")["sessionId"]
    web.turn("", method="sessions.new")
    web.turn("second session")
    assert web.ok("chat.history")["sessionId"] != first

    plain = web.ok("sessions.list")
    assert "ended" not in plain and "earlier" not in plain["sessions"][0]  # without all: as before
    listed = web.ok("sessions.list", all=True)
    main = next(s for s in listed["sessions"] if s["key"] == MAIN)
    assert main["earlier"] == 1
    [ended] = listed["ended"]
    assert ended["key"] == MAIN and ended["sessionId"] == first and ended["agentId"] == "main"
    assert ended["reason"] == "/new" and ended["mode"] == "read-only" and ended["kind"] == "main"
    assert ended["messages"] == 6 and ended["bytes"] == (sessions_dir(home) / f"{first}.jsonl").stat().st_size
    assert ended["startedAt"] < ended["endedAt"] <= main["updatedAt"]

    hist = web.ok("chat.history", sessionKey=MAIN, sessionId=first)
    assert hist["sessionId"] == first and hist["mode"] == "read-only" and hist["total"] == 6
    assert texts(hist)[:2] == ["first session, message 0", "echo: first session, message 0"]
    assert hist["why"].startswith(f"this session ended on {ended['endedAt']} (/new)")
    assert hist["ended"] == {k: ended[k] for k in ("startedAt", "endedAt", "reason", "messages", "bytes")}
    page = web.ok("chat.history", sessionKey=MAIN, sessionId=first, limit=2)  # the newest two, of six
    assert texts(page) == ["first session, message 2", "echo: first session, message 2"] and page["total"] == 6

    transcript = sessions_dir(home) / f"{first}.jsonl"
    before = transcript.read_bytes()
    for method, params in (("chat.send", {"text": "into the old one?"}), ("sessions.new", {})):
        refused = web.call(method, sessionKey=MAIN, sessionId=first, **params)
        assert not refused["ok"] and refused["error"]["code"] == "read_only", refused
        assert "ended" in refused["error"]["message"] and refused["error"]["hint"]
    assert transcript.read_bytes() == before
    current = web.ok("chat.history")  # the current session took nothing either
    assert texts(current) == ["second session", "echo: second session"] and current["mode"] == "chat"
    sent = web.turn("the current one, by its id", sessionKey=MAIN, sessionId=current["sessionId"])
    assert sent[0]["ok"]  # naming the current session is fine


def test_an_idle_reset_is_given_as_the_reason(setup: tuple[Web, Clock, Path]) -> None:
    web, clock, _ = setup
    web.turn("before lunch")
    first = web.ok("chat.history")["sessionId"]
    clock.advance(hours=3)  # past idle_minutes: the next message starts a new session
    web.turn("after lunch")
    [ended] = web.ok("sessions.list", all=True)["ended"]
    assert ended["sessionId"] == first and ended["reason"] == "idle reset"
    assert "(idle reset)" in web.ok("chat.history", sessionKey=MAIN, sessionId=first)["why"]


def test_the_reason_recorded_at_the_end_wins_and_an_older_transcript_is_inferred(setup: tuple[Web, Clock, Path]) -> None:
    """/new typed after the idle window passed ended the session by /new, as recorded in its last line; a
    transcript from before reasons were recorded (no such line) is judged by the reset policy."""
    web, clock, home = setup
    web.turn("before lunch")
    first = web.ok("chat.history")["sessionId"]
    clock.advance(hours=3)
    web.turn("", method="sessions.new")
    [ended] = web.ok("sessions.list", all=True)["ended"]
    assert ended["sessionId"] == first and ended["reason"] == "/new"
    path = sessions_dir(home) / f"{first}.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    assert '"ended"' in lines[-1] and '"/new"' in lines[-1]
    path.write_text("".join(lines[:-1]))
    [older] = web.ok("sessions.list", all=True)["ended"]
    assert older["reason"] == "idle reset" and older["messages"] == 2


def test_a_session_id_must_be_one_of_that_chat(setup: tuple[Web, Clock, Path]) -> None:
    web, _, home = setup
    web.turn("hello")
    web.turn("", method="sessions.new")
    store = SessionStore(sessions_dir(home), cwd=home / "workspace", fsync=False)  # a chat of its own (`hermit chat --session notes`)
    notes = store.get_or_create("notes").record.session_id
    for bad in ("../../hermit.yaml", ".hidden", "a/b"):
        res = web.call("chat.history", sessionKey=MAIN, sessionId=bad)
        assert res["error"]["code"] == "bad_params", res
    for other in ("0000-not-there", notes):  # no such transcript; another chat's session
        res = web.call("chat.history", sessionKey=MAIN, sessionId=other)
        assert res["error"]["code"] == "bad_params" and "pick a session" in res["error"]["hint"], res
