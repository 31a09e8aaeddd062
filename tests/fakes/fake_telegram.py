"""A fake Telegram Bot API on 127.0.0.1: getMe, getUpdates (long poll, 409 for a second poller),
sendMessage (rejects unbalanced Markdown like Telegram), sendChatAction, getFile and file download.

Drive it from a test (`push_message`, `sent`) or by hand: `cd tests && python -m fakes.fake_telegram --port 18810`
then `curl -XPOST localhost:18810/_fake/push -d '{"chat_id": 1, "text": "hi"}'`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
from typing import Any

from fakes.fake_platform import FakePlatform, json_body, serve_forever

BOT_ID = 777000
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def markdown_ok(text: str) -> bool:
    """Telegram's legacy Markdown parser, as far as it matters: * and _ outside code must pair up."""
    prose = _CODE.sub("", text)
    if prose.count("`") % 2:
        return False
    return prose.count("*") % 2 == 0 and prose.count("_") % 2 == 0


class FakeTelegram(FakePlatform):
    def __init__(self, token: str = "123:TEST", username: str = "hermit_bot", *, retry_after: float = 0.0,
                 max_poll_wait: float = 0.5) -> None:
        super().__init__(retry_after=retry_after)
        self.token = token
        self.username = username
        self.updates: list[dict[str, Any]] = []
        self.files: dict[str, bytes] = {}
        self.max_poll_wait = max_poll_wait  # caps the client's long-poll timeout so tests stay fast
        self.confirmed = 0  # highest offset a poller has sent: updates below it are gone
        self._next_update = 1
        self._next_message = 100
        self._new_update = asyncio.Event()
        self._poll: asyncio.Future[None] | None = None  # the pending getUpdates, cancelled by a newer one

    # -- test side ----------------------------------------------------------------------------------

    def push_message(self, *, chat_id: int, text: str = "", from_id: int | None = None,
                     chat_type: str = "private", first_name: str = "Ann", reply_to_bot: bool = False,
                     topic_id: int | None = None, photo: bytes | None = None,
                     document: tuple[str, bytes] | None = None, username: str | None = None) -> int:
        """Queue a user's message as an update; returns its message_id."""
        self._next_message += 1
        mid = self._next_message
        sender = {"id": from_id if from_id is not None else chat_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            sender["username"] = username
        msg: dict[str, Any] = {"message_id": mid, "date": int(time.time()), "from": sender,
                               "chat": {"id": chat_id, "type": chat_type}}
        key = "caption" if (photo or document) else "text"
        msg[key] = text
        ents = [{"type": "mention", "offset": len(text[:m.start()].encode("utf-16-le")) // 2,
                 "length": len(m.group(0).encode("utf-16-le")) // 2} for m in re.finditer(r"@\w+", text)]
        if ents:
            msg["caption_entities" if key == "caption" else "entities"] = ents
        if topic_id is not None:
            msg["message_thread_id"], msg["is_topic_message"] = topic_id, True
            msg["reply_to_message"] = {"message_id": topic_id, "from": sender, "chat": msg["chat"]}
        if reply_to_bot:
            msg["reply_to_message"] = {"message_id": mid - 1, "from": {"id": BOT_ID, "is_bot": True},
                                       "chat": msg["chat"], "text": "earlier answer"}
        if photo is not None:
            fid = f"photo{mid}"
            self.files[fid] = photo
            msg["photo"] = [{"file_id": fid + "s", "width": 90, "height": 90, "file_size": 10},
                            {"file_id": fid, "width": 800, "height": 600, "file_size": len(photo)}]
            self.files[fid + "s"] = photo[:10]
        if document is not None:
            fid = f"doc{mid}"
            self.files[fid] = document[1]
            msg["document"] = {"file_id": fid, "file_name": document[0], "mime_type": "application/octet-stream",
                               "file_size": len(document[1])}
        self.updates.append({"update_id": self._next_update, "message": msg})
        self._next_update += 1
        self._new_update.set()
        return mid

    def sent(self) -> list[dict[str, Any]]:
        return self.done("sendMessage")

    # -- server side --------------------------------------------------------------------------------

    def routes(self, app: Any) -> None:
        app.router.add_post(r"/bot{token}/{method}", self._method)
        app.router.add_get(r"/file/bot{token}/{path:.+}", self._file)
        app.router.add_post("/_fake/push", self._push)
        app.router.add_get("/_fake/calls", self._calls)

    def rate_limited(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"ok": False, "error_code": 429, "description": "Too Many Requests: retry "
                                  f"after {self.retry_after}", "parameters": {"retry_after": self.retry_after}},
                                 status=429)

    async def _method(self, request: Any) -> Any:
        from aiohttp import web

        method = request.match_info["method"]
        body = json_body(await request.read())
        if request.match_info["token"] != self.token:
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)
        fault = await self.fault_or_none(method, request, body)
        if fault is not None:
            return fault
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)
        status, result = await handler(body)
        if status != 200:
            self.record(method, body, faulted=str(status))
            return web.json_response({"ok": False, "error_code": status, "description": result}, status=status)
        self.record(method, body)
        return web.json_response({"ok": True, "result": result})

    async def _api_getMe(self, body: dict[str, Any]) -> tuple[int, Any]:  # noqa: N802 - Bot API name
        return 200, {"id": BOT_ID, "is_bot": True, "first_name": "Hermit", "username": self.username}

    async def _api_getUpdates(self, body: dict[str, Any]) -> tuple[int, Any]:  # noqa: N802
        offset = int(body.get("offset") or 0)
        if self._poll is not None and not self._poll.done():
            # Like Telegram: a newer getUpdates terminates the pending one with 409.
            self._poll.cancel()
        self.confirmed = max(self.confirmed, offset)
        self.updates = [u for u in self.updates if u["update_id"] >= self.confirmed]
        me: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._poll = me
        wait = min(float(body.get("timeout") or 0), self.max_poll_wait)
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            ready = [u for u in self.updates if u["update_id"] >= offset]
            if ready or asyncio.get_running_loop().time() >= deadline:
                if me.cancelled():
                    return 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
                self._poll = None
                return 200, ready
            self._new_update.clear()
            # Not shielded: a shielded wait left a task pending on `_new_update` every 50 ms of an idle poll, which
            # the loop's close destroyed ("Task was destroyed but it is pending! … Event.wait()" at worker exit).
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._new_update.wait(), 0.05)
            if me.cancelled():
                return 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"

    async def _api_sendMessage(self, body: dict[str, Any]) -> tuple[int, Any]:  # noqa: N802
        text = str(body.get("text", ""))
        if not text:
            return 400, "Bad Request: message text is empty"
        if len(text) > 4096:
            return 400, "Bad Request: message is too long"
        if body.get("parse_mode") == "Markdown" and not markdown_ok(text):
            return 400, "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 3"
        self._next_message += 1
        return 200, {"message_id": self._next_message, "chat": {"id": body.get("chat_id")}, "text": text}

    async def _api_sendChatAction(self, body: dict[str, Any]) -> tuple[int, Any]:  # noqa: N802
        return 200, True

    async def _api_getFile(self, body: dict[str, Any]) -> tuple[int, Any]:  # noqa: N802
        fid = str(body.get("file_id"))
        if fid not in self.files:
            return 400, "Bad Request: invalid file_id"
        return 200, {"file_id": fid, "file_path": f"files/{fid}.bin", "file_size": len(self.files[fid])}

    async def _file(self, request: Any) -> Any:
        from aiohttp import web

        fid = request.match_info["path"].removeprefix("files/").removesuffix(".bin")
        if request.match_info["token"] != self.token or fid not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[fid], content_type="application/octet-stream")

    async def _push(self, request: Any) -> Any:
        from aiohttp import web

        body = json_body(await request.read())
        return web.json_response({"message_id": self.push_message(**body)})

    async def _calls(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response([c.__dict__ for c in self.calls])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=18810)
    ap.add_argument("--token", default="123:TEST")
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(FakeTelegram(args.token, max_poll_wait=25.0), args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
