"""A fake Slack on 127.0.0.1: Web API (auth.test, apps.connections.open, chat.postMessage, conversations.history and
conversations.replies over the messages pushed) and a Socket Mode websocket that sends `hello`, delivers events as
envelopes and redelivers the unacked ones on reconnect. `delete`/`edit` change a pushed message without telling
anyone (as while the gateway is away), `drop_sockets` closes the Socket Mode connections.

`sign()` and `event_body()` build signed HTTP Events API requests. By hand:
`cd tests && python -m fakes.fake_slack --port 18811`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import parse_qsl

from fakes.fake_platform import FakePlatform, json_body, serve_forever

BOT_USER = "UBOT"
TEAM = "T0001"


def sign(secret: str, ts: int, body: bytes) -> dict[str, str]:
    """The headers Slack sends with an HTTP event."""
    mac = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={mac}",
            "Content-Type": "application/json"}


def event_body(event: dict[str, Any], event_id: str, team: str = TEAM) -> dict[str, Any]:
    return {"token": "legacy", "team_id": team, "api_app_id": "A1", "type": "event_callback",
            "event_id": event_id, "event_time": int(time.time()), "event": event}


class FakeSlack(FakePlatform):
    def __init__(self, bot_token: str = "xoxb-test", app_token: str = "xapp-test", *,
                 retry_after: float = 0.0, team: str = TEAM) -> None:
        super().__init__(retry_after=retry_after)
        self.bot_token, self.app_token = bot_token, app_token
        self.team = team  # the workspace this fake is: auth.test names it, pushed events carry it
        self.unacked: dict[str, dict[str, Any]] = {}  # envelope_id -> envelope
        self.acks: list[str] = []
        self.connections = 0
        self._sockets: list[Any] = []
        self._next = 0
        self.history: dict[str, dict[str, dict[str, Any]]] = {}  # channel -> ts -> message, as history lists it

    def keep(self, event: dict[str, Any]) -> None:
        """A message event's message, as history lists it (push does this; an HTTP-mode test calls it)."""
        if event.get("type") in ("message", "app_mention") and not event.get("subtype"):
            self.history.setdefault(str(event["channel"]), {})[str(event["ts"])] = {
                k: v for k, v in event.items() if k in ("user", "text", "ts", "thread_ts", "team")} | {"type": "message"}

    def delete(self, channel: str, ts: str) -> None:
        """Deleted on Slack, with no event sent."""
        del self.history[channel][ts]

    def edit(self, channel: str, ts: str, text: str) -> None:
        """Edited on Slack, with no event sent."""
        m = self.history[channel][ts]
        self._next += 1
        m["text"], m["edited"] = text, {"user": m["user"], "ts": f"{int(time.time())}.{self._next:06d}"}

    async def drop_sockets(self) -> None:
        for ws in list(self._sockets):
            await ws.close()

    async def refresh(self) -> None:
        """Slack's planned rotation: a `disconnect` frame on each connection (the client closes and reconnects)."""
        for ws in list(self._sockets):
            await ws.send_str(json.dumps({"type": "disconnect", "reason": "refresh_requested"}))

    # -- test side ----------------------------------------------------------------------------------

    def message(self, text: str, *, user: str = "U1", channel: str = "D1", channel_type: str = "im",
                kind: str = "message", thread_ts: str | None = None) -> tuple[dict[str, Any], str]:
        """An event and a fresh event id."""
        self._next += 1
        ts = f"{int(time.time())}.{self._next:06d}"
        ev: dict[str, Any] = {"type": kind, "user": user, "text": text, "channel": channel, "ts": ts,
                              "event_ts": ts}
        if kind == "message":
            ev["channel_type"] = channel_type
        if thread_ts:
            ev["thread_ts"] = thread_ts
        return ev, f"Ev{self._next:04d}"

    async def push(self, event: dict[str, Any], event_id: str, *, drop_after_send: bool = False) -> str:
        """Deliver an event over Socket Mode; with drop_after_send the socket dies before any ack."""
        self._next += 1
        env_id = f"env-{self._next}"
        envelope = {"envelope_id": env_id, "type": "events_api", "accepts_response_payload": False,
                    "retry_attempt": 0, "payload": event_body(event, event_id, self.team)}
        self.unacked[env_id] = envelope
        self.keep(event)
        await self.wait_for(lambda: bool(self._sockets))
        ws = self._sockets[-1]
        await ws.send_str(json.dumps(envelope))
        if drop_after_send:
            await ws.close()
        return env_id

    def posted(self) -> list[dict[str, Any]]:
        return self.done("chat.postMessage")

    # -- server side ---------------------------------------------------------------------------------

    def routes(self, app: Any) -> None:
        app.router.add_post("/api/{method}", self._method)
        app.router.add_get("/socket", self._socket)

    async def _method(self, request: Any) -> Any:
        from aiohttp import web

        method = request.match_info["method"]
        raw = await request.read()
        form = request.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded")
        body = dict(parse_qsl(raw.decode())) if form else json_body(raw)
        fault = await self.fault_or_none(method, request, body)
        if fault is not None:
            return fault
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        want = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != want:
            self.record(method, body, faulted="invalid_auth")
            return web.json_response({"ok": False, "error": "invalid_auth"})
        self.record(method, body)
        if method == "auth.test":
            return web.json_response({"ok": True, "user_id": BOT_USER, "team_id": self.team, "user": "hermit"})
        if method == "apps.connections.open":
            return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket"})
        if method == "chat.postMessage":
            if len(str(body.get("text", ""))) > 40_000:
                return web.json_response({"ok": False, "error": "msg_too_long"})
            return web.json_response({"ok": True, "channel": body.get("channel"), "ts": f"{time.time():.6f}"})
        if method in ("conversations.history", "conversations.replies"):
            return web.json_response(self._conversation(method, body))
        return web.json_response({"ok": False, "error": "unknown_method"})

    def _conversation(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """Slack's paging: history newest first (top-level messages and thread parents), a thread's replies oldest
        first (its parent, then the replies); `oldest`/`latest` inclusive as asked; `cursor` an offset here."""
        def key(ts: str) -> tuple[int, int]:
            a, _, b = ts.partition(".")
            return int(a), int(b)

        if "channel" not in body or (method == "conversations.replies" and "ts" not in body):
            return {"ok": False, "error": "invalid_arguments"}
        stored = self.history.get(str(body["channel"]))
        if stored is None:
            return {"ok": False, "error": "channel_not_found"}
        lo, hi = key(str(body.get("oldest") or "0.0")), key(str(body.get("latest") or "9999999999.0"))
        if method == "conversations.replies":
            ms = [m for m in stored.values() if m["ts"] == body["ts"] or m.get("thread_ts") == body["ts"]]
            ms.sort(key=lambda m: key(m["ts"]))
        else:
            ms = [m for m in stored.values() if not m.get("thread_ts") or m["thread_ts"] == m["ts"]]
            ms.sort(key=lambda m: key(m["ts"]), reverse=True)
        ms = [m for m in ms if lo <= key(m["ts"]) <= hi]
        start, limit = int(body.get("cursor") or 0), int(body.get("limit") or 100)
        page, more = ms[start:start + limit], start + limit < len(ms)
        return {"ok": True, "messages": page, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    async def _socket(self, request: Any) -> Any:
        from aiohttp import WSMsgType, web

        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1}))
        for envelope in list(self.unacked.values()):  # Slack redelivers what was never acked
            envelope["retry_attempt"] += 1
            await ws.send_str(json.dumps(envelope))
        self._sockets.append(ws)
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    env_id = str(json.loads(frame.data).get("envelope_id", ""))
                    self.acks.append(env_id)
                    self.unacked.pop(env_id, None)
                    self.record("ack", env_id)
        finally:
            with contextlib.suppress(ValueError):
                self._sockets.remove(ws)
        return ws


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=18811)
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(FakeSlack(), args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
