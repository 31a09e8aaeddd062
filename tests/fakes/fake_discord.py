"""A fake Discord on 127.0.0.1 for discord.py: the REST routes it calls (users/@me, oauth2/applications/@me,
channel messages, typing, DM channels) and a gateway websocket (HELLO, heartbeat ACKs, READY with one guild
holding a text channel and a thread, then MESSAGE_CREATE dispatches on demand).

discord.py has no base-URL option, so `patch_discord(fake)` points `discord.http.Route.BASE` and
`discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY` here (and `unpatch` restores them). JSON answers carry
`Content-Type: application/json` exactly: discord.py does not parse it with a charset suffix.
By hand: `cd tests && python -m fakes.fake_discord --port 18813`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from datetime import UTC, datetime
from typing import Any

from fakes.fake_platform import FakePlatform, json_body, serve_forever

BOT_ID = "900000000000000001"
APP_ID = "900000000000000002"
GUILD_ID = "800000000000000001"
TEXT_CHANNEL = "800000000000000010"
THREAD = "800000000000000020"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def user(uid: str, name: str, bot: bool = False) -> dict[str, Any]:
    return {"id": uid, "username": name, "discriminator": "0", "global_name": name, "avatar": None, "bot": bot}


class FakeDiscord(FakePlatform):
    def __init__(self, token: str = "discord-test-token", *, more_tokens: tuple[str, ...] = (),
                 retry_after: float = 0.0) -> None:
        super().__init__(retry_after=retry_after)
        self.token = token
        self.tokens = {token, *more_tokens}  # several bots (accounts) on one fake
        self.identified = 0
        self._sockets: list[Any] = []
        self._socket_token: dict[int, str] = {}  # id(socket) -> the token it identified with
        self._seq = 1
        self._next_id = 700000000000000000
        # GET /channels/{id} (a channel discord.py does not cache) answers 404 Unknown Channel; while this event is
        # set to an unset one, the answer is held until it is set (a lookup Discord is slow to answer).
        self.channel_lookups_held: asyncio.Event | None = None
        # What each channel holds now, by channel id then message id (GET /channels/{id}/messages reads it): `say`
        # adds, `delete` removes.
        self.messages: dict[str, dict[str, dict[str, Any]]] = {}
        # A RESUME after a dropped socket answered as Discord does when the session is gone (op 9, not resumable):
        # discord.py then IDENTIFYs afresh, and the events sent meanwhile are lost to it.
        self.refuse_resume = False
        # Threads READY does not list (archived): GET /channels/{id} serves them, `unarchive` announces one.
        self.archived_threads: dict[str, dict[str, Any]] = {}

    def _snowflake(self) -> str:
        self._next_id += 1
        return str(self._next_id)

    # -- test side ----------------------------------------------------------------------------------

    async def say(self, text: str, *, author: str = "600000000000000001", channel_id: str | None = None,
                  guild: bool = False, thread: bool = False, mention_bot: bool = False,
                  reply_to_bot: bool = False, bot_token: str | None = None) -> str:
        """Dispatch MESSAGE_CREATE from a user (to the bot with `bot_token`, default every bot); a DM unless
        `guild`/`thread`. Returns the message id."""
        want = bot_token
        await self.wait_for(lambda: any(want is None or t == want for t in self._socket_token.values()))
        mid = self._snowflake()
        if thread:
            channel_id = channel_id or THREAD
        elif guild:
            channel_id = channel_id or TEXT_CHANNEL
        else:
            channel_id = channel_id or f"5{author[1:]}"  # the DM channel with this user
        msg: dict[str, Any] = {
            "id": mid, "channel_id": channel_id, "author": user(author, "ann"), "content": text,
            "timestamp": _now(), "edited_timestamp": None, "tts": False, "mention_everyone": False,
            "mentions": [user(BOT_ID, "hermit", bot=True)] if mention_bot else [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": False, "type": 19 if reply_to_bot else 0}
        if guild or thread:
            msg["guild_id"] = GUILD_ID
        if reply_to_bot:
            ref: dict[str, Any] = {
                "id": self._snowflake(), "channel_id": channel_id, "author": user(BOT_ID, "hermit", bot=True),
                "content": "earlier", "timestamp": _now(), "edited_timestamp": None, "tts": False,
                "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": False, "type": 0}
            msg["message_reference"] = {"message_id": ref["id"], "channel_id": channel_id}
            msg["referenced_message"] = ref
        self.messages.setdefault(channel_id, {})[mid] = msg
        await self._dispatch("MESSAGE_CREATE", msg, bot_token)
        return mid

    async def delete(self, mid: str, *, tell: bool = True, bot_token: str | None = None) -> None:
        """Delete a message on the platform; `tell=False`: no MESSAGE_DELETE reaches the bots (one sent while their
        socket was down, which a failed resume never replays)."""
        for channel_id, held in self.messages.items():
            msg = held.pop(mid, None)
            if msg is not None and tell:
                data = {"id": mid, "channel_id": channel_id, **({"guild_id": msg["guild_id"]} if "guild_id" in msg
                                                                  else {})}
                await self._dispatch("MESSAGE_DELETE", data, bot_token)

    async def edit(self, mid: str, content: str, *, tell: bool = True, bot_token: str | None = None) -> None:
        """Its author edits a message; `tell=False`: no MESSAGE_UPDATE reaches the bots (see `delete`)."""
        for held in self.messages.values():
            if (msg := held.get(mid)) is not None:
                msg.update(content=content, edited_timestamp=_now())
                if tell:
                    await self._dispatch("MESSAGE_UPDATE", dict(msg), bot_token)

    def archive_thread(self, thread_id: str, name: str = "old-plans") -> None:
        """A public thread of the text channel that READY does not list (archived: discord.py does not cache it)."""
        self.archived_threads[thread_id] = self._thread(thread_id, name, archived=True)

    async def unarchive(self, thread_id: str, bot_token: str | None = None) -> None:
        """THREAD_UPDATE for an archived thread a message unarchives (Discord sends it before that message)."""
        await self.wait_for(lambda: any(bot_token is None or t == bot_token for t in self._socket_token.values()))
        thread = {**self.archived_threads[thread_id]}
        thread["thread_metadata"] = {**thread["thread_metadata"], "archived": False}
        await self._dispatch("THREAD_UPDATE", thread, bot_token)

    async def drop_gateway(self) -> None:
        """Close the gateway socket abnormally, as a network failure would."""
        for ws in list(self._sockets):
            await ws.close(code=4000, message=b"unknown error")

    def sent(self, bot_token: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.done("create_message") if bot_token is None or m["bot_token"] == bot_token]

    # -- server side ---------------------------------------------------------------------------------

    def routes(self, app: Any) -> None:
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_get("/api/v10/users/{user_id}", self._user)
        app.router.add_post("/api/v10/users/@me/channels", self._dm_channel)
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._create_message)
        app.router.add_get("/api/v10/channels/{channel_id}", self._channel)
        app.router.add_get("/api/v10/channels/{channel_id}/messages", self._history)
        app.router.add_post("/api/v10/channels/{channel_id}/typing", self._typing)

    @staticmethod
    def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Any:
        from aiohttp import web

        return web.Response(body=json.dumps(obj).encode(), status=status,
                            headers={"Content-Type": "application/json", **(headers or {})})

    def rate_limited(self, request: Any) -> Any:
        # discord.py treats a 429 without `Via` as a Cloudflare ban, so the fake sends it like Discord does.
        return self._json({"message": "You are being rate limited.", "retry_after": self.retry_after,
                           "global": False}, 429, {"Via": "1.1 google", "X-RateLimit-Scope": "user"})

    def _authorised(self, request: Any) -> bool:
        return request.headers.get("Authorization", "") in {f"Bot {t}" for t in self.tokens}  # a bot's, as Discord wants

    async def _guarded(self, route: str, request: Any) -> tuple[Any | None, Any]:
        body = json_body(await request.read()) if request.can_read_body else {}
        fault = await self.fault_or_none(route, request, body)
        if fault is not None:
            return fault, body
        if not self._authorised(request):
            self.record(route, body, faulted="401")
            return self._json({"message": "401: Unauthorized", "code": 0}, 401), body
        return None, body

    async def _me(self, request: Any) -> Any:
        stop, _ = await self._guarded("me", request)
        if stop is not None:
            return stop
        self.record("me", {})
        return self._json({**user(BOT_ID, "hermit", bot=True), "verified": True, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: Any) -> Any:
        stop, _ = await self._guarded("application", request)
        return stop or self._json({"id": APP_ID, "name": "Hermit", "icon": None, "description": "",
                                   "bot_public": False, "bot_require_code_grant": False,
                                   "owner": user("600000000000000009", "owner"), "verify_key": "00", "flags": 0,
                                   "summary": "", "team": None})

    async def _user(self, request: Any) -> Any:
        stop, _ = await self._guarded("user", request)
        uid = request.match_info["user_id"]
        return stop or self._json(user(uid, f"user{uid[-3:]}"))

    async def _channel(self, request: Any) -> Any:
        stop, _ = await self._guarded("channel", request)
        if stop is not None:
            return stop
        self.record("channel", {"channel_id": request.match_info["channel_id"]})
        if self.channel_lookups_held is not None:
            await self.channel_lookups_held.wait()
        if (thread := self.archived_threads.get(request.match_info["channel_id"])) is not None:
            return self._json(thread)
        return self._json({"message": "Unknown Channel", "code": 10003}, 404)

    async def _history(self, request: Any) -> Any:
        """GET /channels/{id}/messages: newest first, as Discord sends them, `after`/`before` exclusive."""
        stop, _ = await self._guarded("history", request)
        if stop is not None:
            return stop
        cid = request.match_info["channel_id"]
        q = request.query
        self.record("history", {"channel_id": cid, **dict(q)})
        limit = min(int(q.get("limit", "50")), 100)
        ids = sorted(self.messages.get(cid, {}), key=int)
        if "after" in q:
            ids = [i for i in ids if int(i) > int(q["after"])][:limit]
        else:
            ids = [i for i in ids if "before" not in q or int(i) < int(q["before"])][-limit:]
        return self._json([self.messages[cid][i] for i in reversed(ids)])

    async def _dm_channel(self, request: Any) -> Any:
        stop, body = await self._guarded("dm_channel", request)
        if stop:
            return stop
        rid = str(body.get("recipient_id"))
        self.record("dm_channel", body)
        return self._json({"id": f"5{rid[1:]}", "type": 1, "recipients": [user(rid, "ann")],
                           "last_message_id": None})

    async def _create_message(self, request: Any) -> Any:
        stop, body = await self._guarded("create_message", request)
        if stop:
            return stop
        content = str(body.get("content", ""))
        if len(content) > 2000:
            self.record("create_message", body, faulted="400")
            return self._json({"message": "Invalid Form Body", "code": 50035}, 400)
        cid = request.match_info["channel_id"]
        bot = request.headers.get("Authorization", "").removeprefix("Bot ")
        self.record("create_message", {**body, "channel_id": cid, "bot_token": bot})
        return self._json({"id": self._snowflake(), "channel_id": cid, "author": user(BOT_ID, "hermit", bot=True),
                           "content": content, "timestamp": _now(), "edited_timestamp": None, "tts": False,
                           "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [],
                           "embeds": [], "pinned": False, "type": 0})

    async def _typing(self, request: Any) -> Any:
        from aiohttp import web

        stop, body = await self._guarded("typing", request)
        if stop:
            return stop
        self.record("typing", {"channel_id": request.match_info["channel_id"]})
        return web.Response(status=204)

    async def _dispatch(self, event: str, data: Any, bot_token: str | None = None) -> None:
        self._seq += 1
        for ws in list(self._sockets):
            if bot_token is not None and self._socket_token.get(id(ws)) != bot_token:
                continue
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": self._seq, "d": data}))

    def _guild(self) -> dict[str, Any]:
        text = {"id": TEXT_CHANNEL, "type": 0, "name": "general", "position": 0, "guild_id": GUILD_ID,
                "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None,
                "last_message_id": None, "rate_limit_per_user": 0}
        thread = self._thread(THREAD, "planning", archived=False)
        return {"id": GUILD_ID, "name": "Team", "icon": None, "owner_id": "600000000000000009", "roles": [],
                "emojis": [], "stickers": [], "features": [], "member_count": 2, "members": [],
                "channels": [text], "threads": [thread], "unavailable": False, "large": False,
                "verification_level": 0, "default_message_notifications": 0, "explicit_content_filter": 0,
                "mfa_level": 0, "premium_tier": 0, "preferred_locale": "en-US", "nsfw_level": 0,
                "system_channel_flags": 0, "afk_timeout": 300, "voice_states": [], "presences": []}

    @staticmethod
    def _thread(thread_id: str, name: str, *, archived: bool) -> dict[str, Any]:
        return {"id": thread_id, "type": 11, "name": name, "parent_id": TEXT_CHANNEL, "guild_id": GUILD_ID,
                "owner_id": "600000000000000001", "message_count": 0, "member_count": 1,
                "rate_limit_per_user": 0, "last_message_id": None, "flags": 0,
                "thread_metadata": {"archived": archived, "auto_archive_duration": 1440,
                                    "archive_timestamp": _now(), "locked": False}}

    async def _gateway(self, request: Any) -> Any:
        from aiohttp import WSMsgType, web

        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}))
        self._sockets.append(ws)
        try:
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                msg = json.loads(frame.data)
                op = msg.get("op")
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
                elif op == 6 and self.refuse_resume:
                    self.record("resume_refused", {})
                    await ws.send_str(json.dumps({"op": 9, "d": False, "s": None, "t": None}))
                elif op in (2, 6):  # IDENTIFY, or RESUME answered with a fresh session
                    if op == 2 and msg["d"].get("token") not in self.tokens:
                        await ws.close(code=4004, message=b"Authentication failed.")
                        break
                    self._socket_token[id(ws)] = str(msg["d"].get("token", ""))
                    self.identified += 1
                    self.record("identify" if op == 2 else "resume", {"intents": msg["d"].get("intents")})
                    self._seq += 1
                    ready = {"v": 10, "user": user(BOT_ID, "hermit", bot=True), "guilds": [self._guild()],
                             "session_id": f"session{self.identified}", "private_channels": [],
                             "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
                             "application": {"id": APP_ID, "flags": 0}}
                    await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": self._seq, "d": ready}))
        finally:
            with contextlib.suppress(ValueError):
                self._sockets.remove(ws)
            self._socket_token.pop(id(ws), None)
        return ws


def patch_discord(fake: FakeDiscord) -> tuple[Any, Any, Any]:
    """Point discord.py at the fake; returns what `unpatch` needs to restore.

    The fake's READY carries its guild whole and no GUILD_CREATE follows, but discord.py waits
    `guild_ready_timeout` (2 s) after READY for more before it is ready — on every connect and reconnect. The
    clients made while patched wait 0 s: the queue they would wait on is empty, so ready comes at once."""
    import discord
    import discord.gateway
    import discord.http
    import yarl

    old = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY, discord.Client.__init__)
    discord.http.Route.BASE = f"{fake.base_url}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"ws://127.0.0.1:{fake.port}/gateway")
    init = old[2]

    def ready_at_once(self: Any, *args: Any, **options: Any) -> None:
        options.setdefault("guild_ready_timeout", 0.0)
        init(self, *args, **options)

    discord.Client.__init__ = ready_at_once  # type: ignore[method-assign]
    return old


def unpatch(old: tuple[Any, Any, Any]) -> None:
    import discord
    import discord.gateway
    import discord.http

    discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY, init = old
    discord.Client.__init__ = init  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=18813)
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(FakeDiscord(), args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
