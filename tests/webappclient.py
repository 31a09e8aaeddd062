"""The web app's protocol in process, for tests that need no browser: a gateway (supervisor.Gateway) on a state
dir with a scripted model, served by Starlette's TestClient, and `Web`, one signed-in WebSocket that sends
requests and collects what comes back."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.gateway.state import ensure_token
from hermit.gateway.supervisor import Gateway
from hermit.models.base import ModelProfile, ModelRequest
from hermit.testing.scripted import FunctionModel, Reply


class Web:
    """One connected WebSocket: `call` sends a request and returns its response frame; the events that came
    meanwhile are kept in `events`."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.n = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        rid = f"q{self.n}"
        self.ws.send_text(json.dumps({"type": "req", "id": rid, "method": method, "params": params}))
        while True:
            f = json.loads(self.ws.receive_text())
            if f.get("type") == "res" and f.get("id") == rid:
                return dict(f)
            if f.get("type") == "event":
                self.events.append(f)

    def ok(self, method: str, **params: Any) -> dict[str, Any]:
        res = self.call(method, **params)
        assert res["ok"], res
        return dict(res["payload"])

    def turn(self, text: str, method: str = "chat.send", **params: Any) -> list[dict[str, Any]]:
        """chat.send (or sessions.new), then every frame up to its chat.done (or its refusal)."""
        self.n += 1
        rid = f"m{self.n}"
        if method == "chat.send":
            params = {"text": text, **params}
        self.ws.send_text(json.dumps({"type": "req", "id": rid, "method": method, "params": params}))
        frames = []
        while True:
            f = json.loads(self.ws.receive_text())
            frames.append(f)
            if f.get("type") == "res" and f.get("id") == rid and not f["ok"]:
                return frames
            if f.get("event") == "chat.done" and f["payload"]["replyTo"] == rid:
                return frames

    def event(self, name: str, match: Callable[[dict[str, Any]], bool] = lambda p: True) -> dict[str, Any]:
        """The next event `name` whose payload `match`es (events that came before are looked at first)."""
        while True:
            for i, f in enumerate(self.events):
                if f.get("event") == name and match(f["payload"]):
                    del self.events[: i + 1]
                    return dict(f["payload"])
            self.events.clear()
            f = json.loads(self.ws.receive_text())
            if f.get("type") == "event":
                self.events.append(f)


class Clock:
    """Time that moves one second each time it is read, and jumps when told (`advance`)."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


# The photo tests' shared setup: a home with no memory search and no /new note, a model that answers "ok".
PHOTO_CONFIG = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"},
                                        "session": {"hooks": {"session_memory": {"enabled": False}}}}}}


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def answer_ok(req: ModelRequest) -> Reply:
    return "ok"


@contextmanager
def served(home: Path, config: dict[str, Any], model: Callable[[ModelRequest], Reply],
           clock: Callable[[], datetime], profile: ModelProfile | None = None) -> Iterator[tuple[TestClient, Gateway, str]]:
    """A gateway on `home` (hermit.yaml's content as `config`) with one agent answering through `model` (of
    `profile`: one that reads images, say)."""
    loaded = build_config(config, StatePaths(home))
    rt = AgentRuntime(loaded.agent(), FunctionModel(model, profile=profile), clock=clock, fsync=False, home=home)
    token = ensure_token(home)
    gw = Gateway(loaded, home, {}, {"main": rt}, token, host="127.0.0.1", port=0, channels=[], service_factories=[])
    asyncio.run(gw.webchat.start(gw.bus))
    with TestClient(gw.app, base_url="http://localhost") as client:
        yield client, gw, token


@contextmanager
def connected(client: TestClient, token: str, client_id: str) -> Iterator[Web]:
    with client.websocket_connect("ws://localhost/ws") as ws:
        web = Web(ws)
        assert web.ok("connect", token=token, clientId=client_id)["type"] == "hello-ok"
        yield web
