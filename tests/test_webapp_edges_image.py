"""Opening a session with photos is cheap (in process, the scripted model): `chat.history {imageRefs: true}` names
each photo of the owner's own turns by the SHA-256 of its bytes, with its type and size, and sends none of them;
`chat.image {sessionKey, sha256}` brings one — only an image of a user turn of that session's own transcript
(current or ended), only of the owner's own sessions (a group's, a contact's: refused), only on a signed-in
socket. hello-ok says the gateway does this (`imageRefs`) and names each agent's main session (`mainSessions`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hermit.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from hermit.sessions.store import SessionStore
from webappclient import PHOTO_CONFIG as CONFIG
from webappclient import Clock, Web, b64, connected, served, sha
from webappclient import answer_ok as answer

MAIN = "agent:main:main"
CLI = "notes"  # a session of the owner's own, named at the CLI
GROUP = "agent:main:telegram:group:-100321"


def jpeg(n: int, size: int = 50_000) -> bytes:
    return b"\xff\xd8\xff" + bytes([n]) * size




def photos_in(store: SessionStore, key: str, photos: list[bytes], origin: str | None = None) -> str:
    """A session of `key` whose user turns carry `photos` (one each); its session id."""
    opened = store.get_or_create(key, origin_channel=origin)
    t = store.open_transcript(opened.record)
    for n, raw in enumerate(photos):
        t.append_message(UserMessage(f"photo {n} of {key}", (ImagePart("image/jpeg", b64(raw)),)).to_dict())
        t.append_message(AssistantMessage((TextPart(f"seen {n}"),), model="m", provider="p").to_dict())
    return opened.record.session_id


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Web, SessionStore, TestClient, str]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    with served(home, CONFIG, answer, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token), \
            connected(client, token, "phone1") as w:
        yield w, SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False), client, token


def sent(w: Web, method: str, **params: Any) -> tuple[dict[str, Any], int]:
    """A request's response and how many characters its frame had."""
    res = w.call(method, **params)
    return res, len(json.dumps(res))


def test_history_names_the_photos_and_chat_image_brings_each_one(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    photos = [jpeg(n) for n in range(4)]
    photos_in(store, MAIN, photos)
    res, size = sent(w, "chat.history", imageRefs=True)
    assert res["ok"], res
    named = [m["images"] for m in res["payload"]["messages"] if m["role"] == "user"]
    assert named == [[{"mediaType": "image/jpeg", "sha256": sha(p), "size": len(p)}] for p in photos]
    assert size < 5_000 and b64(photos[0])[:200] not in json.dumps(res)  # names, not photos
    for p in photos:
        got = w.ok("chat.image", sessionKey=MAIN, sha256=sha(p))
        assert got == {"sha256": sha(p), "mediaType": "image/jpeg", "data": b64(p)}
    # The old way (a page loaded before chat.image): every photo, each time.
    old, old_size = sent(w, "chat.history", images=True)
    assert [m["images"][0]["data"] for m in old["payload"]["messages"] if m["role"] == "user"] == [b64(p) for p in photos]
    assert old_size > 4 * len(b64(photos[0]))
    assert "images" not in json.dumps(w.ok("chat.history"))  # asked for none: none named


def test_chat_image_answers_only_for_an_image_of_that_sessions_own_turns(
        web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    mine, elsewhere, members = jpeg(1), jpeg(2), jpeg(3)
    photos_in(store, MAIN, [mine])
    photos_in(store, CLI, [elsewhere])
    group_id = photos_in(store, GROUP, [members], origin="telegram")
    # The assistant's own message may carry an image part: not a photo of the owner's turns, not sent.
    t = store.open_transcript(store.get(MAIN))  # type: ignore[arg-type]
    said = jpeg(4)
    t.append_message({"role": "assistant", "content": [{"type": "image", "mimeType": "image/jpeg", "data": b64(said)}],
                      "model": "m", "provider": "p", "stopReason": "stop", "timestamp": 0})

    def refused(code: str, **params: Any) -> None:
        res = w.call("chat.image", **params)
        assert not res["ok"] and res["error"]["code"] == code, res
        assert "data" not in json.dumps(res)

    refused("not_found", sessionKey=MAIN, sha256=sha(elsewhere))  # another session's photo, named under this one
    refused("not_found", sessionKey=MAIN, sha256=sha(members))  # a group member's photo
    refused("not_found", sessionKey=MAIN, sha256=sha(said))
    refused("not_found", sessionKey=MAIN, sha256="0" * 64)
    refused("read_only", sessionKey=GROUP, sha256=sha(members))  # a group's session: not the owner's own
    refused("read_only", sessionKey=GROUP, sessionId=group_id, sha256=sha(members))
    refused("bad_params", sessionKey=MAIN, sha256=sha(mine).upper())  # not a hash as chat.history names them
    refused("bad_params", sessionKey="agent:nobody:main", sha256=sha(mine))
    assert w.ok("chat.image", sessionKey=CLI, sha256=sha(elsewhere))["data"] == b64(elsewhere)
    assert w.ok("chat.image", sha256=sha(mine))["data"] == b64(mine)  # no key: the web chat's own session
    # A group's history names no photo either.
    assert "images" not in json.dumps(w.ok("chat.history", sessionKey=GROUP, imageRefs=True))


def test_an_ended_sessions_photos_come_named_by_its_session_id(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    old = jpeg(7)
    ended = photos_in(store, MAIN, [old])
    w.turn("/new", method="sessions.new", sessionKey=MAIN)
    current = w.ok("chat.history", imageRefs=True)
    assert current["sessionId"] != ended and "images" not in json.dumps(current)
    shown = w.ok("chat.history", sessionId=ended, imageRefs=True)
    assert shown["mode"] == "read-only" and shown["messages"][0]["images"][0]["sha256"] == sha(old)
    assert w.ok("chat.image", sessionId=ended, sha256=sha(old))["data"] == b64(old)
    res = w.call("chat.image", sha256=sha(old))  # not in the current session's transcript
    assert not res["ok"] and res["error"]["code"] == "not_found"
    res = w.call("chat.image", sessionId="nosuch", sha256=sha(old))
    assert not res["ok"] and res["error"]["code"] == "bad_params"


def test_a_socket_that_did_not_sign_in_gets_no_photo(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, client, token = web
    photo = jpeg(9)
    photos_in(store, MAIN, [photo])
    request = {"type": "req", "id": "x", "method": "chat.image", "params": {"sessionKey": MAIN, "sha256": sha(photo)}}
    with client.websocket_connect("ws://localhost/ws") as ws:  # chat.image first: no connect
        ws.send_text(json.dumps(request))
        frame = json.loads(ws.receive_text())
        assert not frame["ok"] and b64(photo)[:100] not in json.dumps(frame)
    with client.websocket_connect("ws://localhost/ws") as ws:  # a wrong token
        ws.send_text(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": "x" * 40}}))
        frame = json.loads(ws.receive_text())
        assert not frame["ok"] and frame["error"]["code"] == "unauthorized"
    assert w.ok("chat.image", sha256=sha(photo))["data"] == b64(photo)  # the owner's socket: yes


def test_hello_says_image_refs_and_names_each_agents_main_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    with served(home, CONFIG, answer, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token), \
            client.websocket_connect("ws://localhost/ws") as ws:
        hello = Web(ws).ok("connect", token=token, clientId="c1")
    assert hello["imageRefs"] is True
    assert hello["mainSessions"] == {"main": hello["mainSession"]} == {"main": MAIN}
