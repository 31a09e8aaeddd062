"""`chat.history {sessionKey, sessionId}` gives a transcript only as a session of the chat the page names.

A transcript whose first line (the session header, which carries its chat's key) was damaged — a torn write,
a full disk — names no chat until the store reopens it as a current session and appends a header repair. Such
a transcript was shown as a past session of ANY chat the page named: another chat's (a group's, a contact's)
conversation came back labelled as the main session's. A transcript that names no chat is now shown only as
the named chat's own current session (an older transcript of it), never under another chat's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hermit.sessions.store import SessionStore
from test_webapp_past_sessions import CONFIG, MAIN, model, sessions_dir, texts
from webappclient import Clock, Web, connected, served

GROUP = "agent:main:telegram:group:-100777"


@pytest.fixture
def web_home(tmp_path: Path) -> Iterator[tuple[Web, Path]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    with served(home, CONFIG, model, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token), \
            connected(client, token, "tab1") as web:
        yield web, home


def test_a_transcript_that_names_no_chat_is_never_shown_as_another_chats(web_home: tuple[Web, Path]) -> None:
    web, home = web_home
    web.turn("hello")
    store = SessionStore(sessions_dir(home), cwd=home / "workspace", fsync=False)
    record = store.get_or_create(GROUP).record
    store.open_transcript(record).append_message(
        {"role": "user", "content": [{"type": "text", "text": "the group's own words"}], "timestamp": 1})
    path = store.transcript_path(record.session_id)
    lines = path.read_bytes().split(b"\n", 1)
    path.write_bytes(b'{"type": "sess' + b"\n" + lines[1])  # line 1 torn: the transcript names no chat now

    res = web.call("chat.history", sessionKey=MAIN, sessionId=record.session_id)
    assert "error" in res and res["error"]["code"] == "bad_params", res
    assert "the group's own words" not in str(res)
    # The main session's own history is untouched.
    assert texts(web.ok("chat.history", sessionKey=MAIN)) == ["hello", "echo: hello"]
