"""The web chat WebSocket protocol (SPEC §15 frames) through Starlette's in-process ASGI client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from agenthelpers import load_offline
from gatewayhelpers import last_user_text, runtime
from hermit.gateway.protocol import MAX_FRAME_BYTES
from hermit.gateway.state import ensure_token
from hermit.gateway.supervisor import Gateway
from hermit.models.base import ModelRequest
from hermit.testing.scripted import Reply

WS = "ws://localhost/ws"  # a loopback Host: the gateway answers no other name (app.HostCheck)


def echo(req: ModelRequest) -> Reply:
    text = last_user_text(req)
    if text == "use a tool":
        if req.messages[-1].to_dict().get("role") == "toolResult":
            return "tool used"
        return {"tool_calls": [{"name": "read", "arguments": {"path": "MEMORY.md"}}]}
    return f"echo: {text}"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    token = ensure_token(tmp_path)
    rt = runtime(tmp_path, echo)
    gw = Gateway(load_offline(tmp_path), tmp_path, {}, {"main": rt}, token, host="127.0.0.1", port=0,
                 channels=[], service_factories=[])
    asyncio.run(gw.webchat.start(gw.bus))
    with TestClient(gw.app, base_url="http://localhost") as client:
        yield client, token


def req(rid: str, method: str, **params: Any) -> str:
    return json.dumps({"type": "req", "id": rid, "method": method, "params": params})


def connect(ws: Any, token: str) -> dict[str, Any]:
    ws.send_text(req("c1", "connect", token=token, clientId="tab1"))
    return json.loads(ws.receive_text())


def until_done(ws: Any) -> list[dict[str, Any]]:
    frames = []
    while True:
        f = json.loads(ws.receive_text())
        frames.append(f)
        if f.get("event") in ("chat.done",):
            return frames


def test_connect_send_stream_and_history(gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    with client.websocket_connect(WS) as ws:
        hello = connect(ws, token)
        assert hello["ok"] and hello["payload"]["type"] == "hello-ok" and hello["payload"]["clientId"] == "tab1"
        ws.send_text(req("m1", "chat.send", text="hello there"))
        frames = until_done(ws)
        assert frames[0] == {"type": "res", "id": "m1", "ok": True,
                             "payload": {"messageId": "m1", "sessionKey": "agent:main:main", "status": "queued"}}
        events = [f for f in frames if f["type"] == "event"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert "".join(e["payload"]["text"] for e in events if e["event"] == "chat.delta") == "echo: hello there"
        assert events[-1]["payload"] == {"replyTo": "m1", "turnId": events[-1]["payload"]["turnId"], "status": "done"}

        ws.send_text(req("m2", "chat.send", text="use a tool"))
        tools = [f["payload"] for f in until_done(ws) if f.get("event") == "chat.tool"]
        assert [(t["name"], t["status"]) for t in tools] == [("read", "running"), ("read", "done")]

        ws.send_text(req("h", "chat.history"))
        hist = json.loads(ws.receive_text())["payload"]
        assert [(m["role"], m["text"]) for m in hist["messages"]] == [
            ("user", "hello there"), ("assistant", "echo: hello there"), ("user", "use a tool"),
            ("assistant", "tool used")]
        assert [(t["name"], t["status"]) for t in hist["messages"][3]["tools"]] == [("read", "done")]

        ws.send_text(req("l", "sessions.list"))
        sessions = json.loads(ws.receive_text())["payload"]["sessions"]
        assert [(s["key"], s["main"]) for s in sessions] == [("agent:main:main", True)]

        old = hist["sessionId"]
        ws.send_text(req("n", "sessions.new"))
        until_done(ws)
        ws.send_text(req("h2", "chat.history"))
        fresh = json.loads(ws.receive_text())["payload"]
        assert fresh["sessionId"] != old and fresh["messages"] == []


def test_wrong_token_is_refused_and_others_keep_being_served(gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    with client.websocket_connect(WS) as good:
        assert connect(good, token)["ok"]
        with client.websocket_connect(WS) as bad:
            bad.send_text(req("c", "connect", token="not-the-token"))
            err = json.loads(bad.receive_text())
            assert err["ok"] is False and err["error"]["code"] == "unauthorized" and err["error"]["hint"]
            with pytest.raises(WebSocketDisconnect) as closed:
                bad.receive_text()
            assert closed.value.code == 4401
        good.send_text(req("m", "chat.send", text="still here?"))
        assert any(f.get("event") == "chat.delta" for f in until_done(good))


def test_first_frame_must_be_connect(gateway: tuple[TestClient, str]) -> None:
    client, _ = gateway
    with client.websocket_connect(WS) as ws:
        ws.send_text(req("x", "chat.send", text="hi"))
        err = json.loads(ws.receive_text())
        assert err["id"] == "x" and err["error"]["code"] == "not_connected"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 4400


def test_malformed_frames_and_unknown_methods_get_errors_and_the_socket_stays_open(
        gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    with client.websocket_connect(WS) as ws:
        connect(ws, token)
        cases = [("{not json", "bad_json"), ("[1, 2]", "bad_frame"),
                 (json.dumps({"type": "req", "method": "chat.send"}), "bad_frame"),
                 (req("u", "chat.explode"), "unknown_method"),
                 (req("p", "chat.send", text=""), "bad_params"),
                 (req("p2", "chat.send", text="hi", extra=1), "bad_params"),
                 (req("s", "chat.history", sessionKey="agent:ghost:main"), "bad_params"),
                 (req("c2", "connect", token=token), "already_connected")]
        for frame, code in cases:
            ws.send_text(frame)
            err = json.loads(ws.receive_text())
            assert err["ok"] is False and err["error"]["code"] == code, (frame, err)
            assert err["error"]["message"]
        ws.send_text(req("m", "chat.send", text="after the errors"))
        assert any(f.get("event") == "chat.done" for f in until_done(ws))


def test_a_one_megabyte_frame_closes_that_socket_only(gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    with client.websocket_connect(WS) as other:
        connect(other, token)
        with client.websocket_connect(WS) as ws:
            connect(ws, token)
            ws.send_text(req("big", "chat.send", text="x" * 1_000_000))
            err = json.loads(ws.receive_text())
            assert err["error"]["code"] == "frame_too_large" and f"{MAX_FRAME_BYTES:,}" in err["error"]["message"]
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
            assert closed.value.code == 1009
        other.send_text(req("m", "chat.send", text="fine"))
        assert any(f.get("event") == "chat.done" for f in until_done(other))


def test_a_foreign_origin_is_refused_and_the_same_origin_accepted(gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    with client.websocket_connect(WS, headers={"origin": "http://evil.example"}) as ws:
        err = json.loads(ws.receive_text())
        assert err["error"]["code"] == "origin_refused"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1008
    with client.websocket_connect(WS, headers={"origin": "http://localhost"}) as ws:
        assert connect(ws, token)["ok"]


def test_status_needs_the_token_and_the_page_is_served_with_a_strict_policy(
        gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    assert client.get("/status").status_code == 401
    assert client.get("/status", headers={"Authorization": "Bearer wrong"}).status_code == 401
    st = client.get("/status", headers={"Authorization": f"Bearer {token}"}).json()
    assert st["agents"] == ["main"] and st["bus"]["accepting"] is True
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert client.get("/static/markdown.js").status_code == 200


def test_deeply_nested_and_invalid_unicode_frames_get_errors_and_the_socket_stays_open(
        gateway: tuple[TestClient, str]) -> None:
    client, token = gateway
    deep = "[" * 100_000 + "]" * 100_000  # 200 KB, under the size cap: a RecursionError dropped the socket
    with client.websocket_connect(WS) as ws:
        connect(ws, token)
        inside = '{"type": "req", "id": "d", "method": "chat.send", "params": {"text": ' + "[" * 500 + "]" * 500 + "}}"
        for frame in (deep, inside):
            ws.send_text(frame)
            err = json.loads(ws.receive_text())
            assert err["ok"] is False and err["error"]["code"] == "bad_json", err
        ws.send_text('{"type": "req", "id": "s\\ud800", "method": "chat.explode"}')
        err = json.loads(ws.receive_text())
        assert err["id"] == "s\ufffd" and err["error"]["code"] == "unknown_method"
        ws.send_text(req("m", "chat.send", text="after the errors \ud800"))
        frames = until_done(ws)
        assert "".join(f["payload"]["text"] for f in frames if f.get("event") == "chat.delta") == \
            "echo: after the errors \ufffd"
