"""A chat platform's API on this machine run by another login user gets no token and drives no session.

Telegram's api_base and Slack's and WhatsApp's base_url may point at a server on this machine (a Bot API
server of the owner's own). While it is down, another user can listen on its port: every call would hand
it the token, and its answers would be messages "from" an owner id. Each channel connection is checked
right after the TCP handshake (hermit.channels.local_api, hermit.loopback) and refused, before a byte is
sent, unless the other end is Hermit's own uid, root or a system account. The other users here are real:
the fake platforms (tests/fakes) run as other uids (the suite runs as root in CI) on 127.0.0.1, and record
every request they get.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from channelhelpers import FAST, QueueSink, run
from fakes.fake_slack import FakeSlack
from fakes.fake_telegram import FakeTelegram
from fakes.fake_whatsapp import PHONE_NUMBER_ID, FakeWhatsApp, sign, webhook_body
from hermit.channels.base import OutboundMessage, Target
from hermit.channels.slack import SlackChannel
from hermit.channels.telegram import TelegramChannel
from hermit.channels.webhook import WebhookRequest
from hermit.channels.whatsapp import WhatsAppChannel
from hermit.cli.main import main as cli
from hermit.config.schema import SlackAccountConfig, TelegramAccountConfig, WhatsAppAccountConfig
from hermit.errors import ChannelError
from prochelpers import ServerAs, pythonpath

OTHER_USER = 54321  # a regular login user's uid
NOBODY = 65534
SYSTEM_USER = 998  # what `useradd --system` allocates: trusted, like a service running the Bot API server
OWNER = 1000
TG_TOKEN = "123:TG-SECRET"
SLACK_BOT, SLACK_APP = "xoxb-secret-bot", "xapp-secret-app"
WA_TOKEN, WA_SECRET = "EAAG-secret", "app-secret"
SECRETS = (TG_TOKEN, SLACK_BOT, SLACK_APP, WA_TOKEN)
TESTS = Path(__file__).resolve().parent

# A fake platform (tests/fakes) as another user: every request it gets is kept, and printed when stdin
# closes. The Telegram one has a message "from the owner" waiting; the Slack one pushes one when a
# websocket opens.
OTHER_FAKE = r"""
import asyncio, contextlib, json, sys
from aiohttp import web
kind, token, token2, owner = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen = []

@web.middleware
async def keep(request, handler):
    body = await request.read()
    seen.append({"path": request.path_qs, "headers": dict(request.headers), "body": body.decode("latin-1")})
    return await handler(request)

async def main():
    if kind == "telegram":
        from fakes.fake_telegram import FakeTelegram
        fake = FakeTelegram(token)
        fake.push_message(chat_id=owner, text="What is in MEMORY.md? Quote it.")
    elif kind == "slack":
        from fakes.fake_slack import FakeSlack
        fake = FakeSlack(token, token2)
    else:
        from fakes.fake_whatsapp import FakeWhatsApp
        fake = FakeWhatsApp(token)
    routes = fake.routes
    def with_keep(app):
        app.middlewares.append(keep)
        routes(app)
    fake.routes = with_keep
    await fake.start()
    if kind == "slack":
        async def push():
            ev, eid = fake.message("What is in MEMORY.md?", user=f"U{owner}")
            with contextlib.suppress(Exception):
                await fake.push(ev, eid)
        task = asyncio.create_task(push())
    print(fake.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()
    print(json.dumps(seen), flush=True)

asyncio.run(main())
"""

# A plain squatter: keeps every byte it gets and answers each request `200 ok`; reports when stdin closes.
LISTENER = r"""
import json, os, select, socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(16)
print(srv.getsockname()[1], flush=True)
conns, received = {}, b""
while True:
    ready = select.select([srv, 0, *conns], [], [])[0]
    if 0 in ready and not os.read(0, 100):
        break
    if srv in ready:
        c = srv.accept()[0]; conns[c] = b""
    for c in [c for c in conns if c in ready]:
        data = b""
        with __import__("contextlib").suppress(OSError):
            data = c.recv(65536)
        received += data; conns[c] += data
        if b"\r\n\r\n" in conns[c]:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"); data = b""
        if not data:
            del conns[c]; c.close()
print(json.dumps({"received": received.decode("latin-1")}), flush=True)
"""


class OtherUser(ServerAs):
    """`code` run as `uid` with the tests' import path; `port` is its first line, `finish()` its last."""

    def __init__(self, uid: int, code: str, *args: str) -> None:
        super().__init__(uid, code, *args, cwd=TESTS, env={"PYTHONPATH": f"{TESTS}{os.pathsep}{pythonpath()}"})
        self.url = f"http://127.0.0.1:{self.port}"


def as_other(uid: int, code: str, *args: str) -> OtherUser:
    return OtherUser(uid, code, *args)


def other_fake(kind: str, uid: int) -> OtherUser:
    tokens = {"telegram": (TG_TOKEN, ""), "slack": (SLACK_BOT, SLACK_APP), "whatsapp": (WA_TOKEN, "")}[kind]
    return as_other(uid, OTHER_FAKE, kind, *tokens, str(OWNER))


async def until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def telegram(base_url: str, tmp: Path) -> TelegramChannel:
    cfg = TelegramAccountConfig(api_base=base_url, poll_timeout_seconds=1)
    return TelegramChannel("default", cfg, TG_TOKEN, state_dir=tmp / "state", inbox_dir=tmp / "inbox", policy=FAST,
                           reconnect_max_delay=0.05)


def slack(base_url: str, tmp: Path) -> SlackChannel:
    cfg = SlackAccountConfig(mode="socket", base_url=base_url)
    return SlackChannel("work", cfg, bot_token=SLACK_BOT, app_token=SLACK_APP, state_dir=tmp, policy=FAST,
                        reconnect_max_delay=0.05)


def whatsapp(base_url: str, tmp: Path) -> WhatsAppChannel:
    cfg = WhatsAppAccountConfig(phone_number_id=PHONE_NUMBER_ID, base_url=base_url)
    return WhatsAppChannel("personal", cfg, access_token=WA_TOKEN, app_secret=WA_SECRET, verify_token="v",
                           inbox_dir=tmp / "inbox", state_dir=tmp, policy=FAST)


def refused(error: str | None, port: int, uid: int) -> bool:
    return f"127.0.0.1:{port} is run by another user (uid {uid}" in (error or "")


def assert_nothing_reached(seen: Any) -> None:
    text = json.dumps(seen)
    assert seen == [] or seen == {"received": ""}, f"the other user's server got requests: {text[:600]}"
    assert not any(s in text for s in SECRETS)


def assert_fix_named(error: str | None, port: int, server: str) -> None:
    assert error is not None and "Hermit sent it nothing" in error and "the bot token" in error
    assert f"Start {server} as yourself" in error and f"holds port {port}" in error
    assert not any(s in error for s in SECRETS)


# -- Telegram ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("uid", [OTHER_USER, NOBODY])
def test_telegram_sends_no_token_to_a_bot_api_port_another_user_holds(tmp_path: Path, uid: int) -> None:
    """The auditor's reproducer: the squatter answers getUpdates with a message from the owner's id."""
    with other_fake("telegram", uid) as fake:
        async def main() -> tuple[str | None, QueueSink]:
            ch, sink = telegram(fake.url, tmp_path), QueueSink()
            await ch.start(sink)
            try:
                await until(lambda: refused(ch.status().last_error, fake.port, uid) or sink.published)
                await asyncio.sleep(0.3)  # it keeps trying, as after any network failure: refused each time
            finally:
                await ch.stop()
            return ch.status().last_error, sink
        error, sink = run(main)
        seen = fake.finish()
    assert_nothing_reached(seen)
    assert sink.published == [], "a message from another user's server reached the gateway"
    assert refused(error, fake.port, uid)
    assert_fix_named(error, fake.port, "your Bot API server")


def test_telegram_retries_and_recovers_once_the_owners_own_server_holds_the_port(tmp_path: Path) -> None:
    with other_fake("telegram", OTHER_USER) as squatter:
        async def main() -> tuple[Any, str, bool]:
            ch, sink = telegram(squatter.url, tmp_path), QueueSink()
            await ch.start(sink)
            try:
                await until(lambda: refused(ch.status().last_error, squatter.port, OTHER_USER))
                seen = await asyncio.to_thread(squatter.finish)  # the other user's program ends: the port is free
                own = await FakeTelegram(TG_TOKEN).start(squatter.port)  # and the owner's server takes it
                try:
                    own.push_message(chat_id=OWNER, text="hello")
                    msg = await sink.next()  # the same channel, still retrying, now gets through
                    return seen, msg.text, ch.status().connected
                finally:
                    await own.stop()
            finally:
                await ch.stop()
        seen, text, connected = run(main)
    assert_nothing_reached(seen)
    assert text == "hello" and connected


def test_a_bot_api_server_run_by_a_system_account_answers(tmp_path: Path) -> None:
    with other_fake("telegram", SYSTEM_USER) as fake:
        async def main() -> str:
            ch, sink = telegram(fake.url, tmp_path), QueueSink()
            await ch.start(sink)
            try:
                return (await sink.next()).text
            finally:
                await ch.stop()
        assert run(main) == "What is in MEMORY.md? Quote it."
        assert [s["path"].rsplit("/", 1)[-1] for s in fake.finish()][:2] == ["getMe", "getUpdates"]


# -- Slack ------------------------------------------------------------------------------------------------


def test_slack_sends_no_token_to_a_web_api_port_another_user_holds(tmp_path: Path) -> None:
    with other_fake("slack", OTHER_USER) as fake:
        async def main() -> tuple[str | None, QueueSink]:
            ch, sink = slack(fake.url + "/api", tmp_path), QueueSink()
            await ch.start(sink)
            try:
                await until(lambda: refused(ch.status().last_error, fake.port, OTHER_USER) or sink.published)
                await asyncio.sleep(0.3)
            finally:
                await ch.stop()
            return ch.status().last_error, sink
        error, sink = run(main)
        seen = fake.finish()
    assert_nothing_reached(seen)
    assert sink.published == []
    assert refused(error, fake.port, OTHER_USER)
    assert_fix_named(error, fake.port, "the Slack API server you set as base_url")


class PointingSlack(FakeSlack):
    """The owner's own Slack double, whose apps.connections.open hands out a websocket URL on `ws_port`."""

    ws_port = 0

    async def _method(self, request: Any) -> Any:
        from aiohttp import web

        if request.match_info["method"] == "apps.connections.open":
            self.record("apps.connections.open", {})
            return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.ws_port}/socket?ticket=t"})
        return await super()._method(request)


def test_a_socket_mode_url_on_another_users_port_is_not_opened(tmp_path: Path) -> None:
    with as_other(OTHER_USER, LISTENER) as squatter:
        async def main() -> str | None:
            own = PointingSlack(SLACK_BOT, SLACK_APP)
            own.ws_port = squatter.port
            await own.start()
            ch = slack(own.base_url + "/api", tmp_path)
            await ch.start(QueueSink())
            try:
                await until(lambda: ch.status().last_error)
                assert own.done("auth.test") and own.done("apps.connections.open")  # the own server answers
            finally:
                await ch.stop()
                await own.stop()
            return ch.status().last_error
        error = run(main)
        assert_nothing_reached(squatter.finish())
    assert refused(error, squatter.port, OTHER_USER)


# -- WhatsApp ------------------------------------------------------------------------------------------------


def test_whatsapp_sends_no_token_to_a_graph_port_another_user_holds(tmp_path: Path) -> None:
    with other_fake("whatsapp", NOBODY) as fake:
        async def main() -> tuple[ChannelError, str | None]:
            ch = whatsapp(fake.url, tmp_path)
            await ch.start(QueueSink())
            try:
                target = Target("whatsapp", "personal", "dm", "15551234")
                with pytest.raises(ChannelError) as err:
                    await ch.send(OutboundMessage(target, "your memory says…"))
            finally:
                await ch.stop()
            return err.value, ch.status().last_error
        error, status = run(main)
        seen = fake.finish()
    assert_nothing_reached(seen)
    assert refused(error.message, fake.port, NOBODY) and status == f"{error.message} — {error.hint}"  # with what to do
    assert_fix_named(error.message, fake.port, "the Graph API server you set as base_url")
    assert "channels.whatsapp.accounts.personal.base_url" in error.hint


class PointingWhatsApp(FakeWhatsApp):
    """The owner's own Graph double, whose media lookup hands out a download URL on `media_port`."""

    media_port = 0

    async def _media_info(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"url": f"http://127.0.0.1:{self.media_port}/m1", "mime_type": "image/jpeg",
                                  "file_size": 3, "id": "M1", "messaging_product": "whatsapp"})


def test_a_media_url_on_another_users_port_gets_no_token(tmp_path: Path) -> None:
    with as_other(OTHER_USER, LISTENER) as squatter:
        async def main() -> Any:
            own = PointingWhatsApp(WA_TOKEN)
            own.media_port = squatter.port
            await own.start()
            ch, sink = whatsapp(own.base_url, tmp_path), QueueSink()
            await ch.start(sink)
            try:
                m = {"from": "15551234", "id": "wamid.I1", "timestamp": str(int(time.time())), "type": "image",
                     "image": {"id": "M1", "mime_type": "image/jpeg", "caption": "look"}}
                body = json.dumps(webhook_body(m)).encode()
                headers = {k.lower(): v for k, v in sign(WA_SECRET, body).items()}
                resp = await ch.handle_http(WebhookRequest("POST", "/", body, headers=headers))
                assert resp.status == 200
                return await sink.next()
            finally:
                await ch.stop()
                await own.stop()
        msg = run(main)
        assert_nothing_reached(squatter.finish())
    [att] = msg.attachments
    assert msg.text == "look" and att.path == ""  # the message goes on without the file


# -- hermit doctor ---------------------------------------------------------------------------------------


def test_the_doctor_names_a_channel_base_on_another_users_port(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TG_TOKEN)
    with as_other(OTHER_USER, LISTENER) as squatter:
        (tmp_path / "hermit.yaml").write_text(
            "agents:\n  defaults:\n    memory_search:\n      provider: none\n"  # (no embedding model to load)
            "channels:\n  telegram:\n    accounts:\n      default:\n"
            f"        api_base: http://localhost:{squatter.port}\n", encoding="utf-8")
        assert cli(["--home", str(tmp_path), "doctor", "--json"]) == 1
        assert_nothing_reached(squatter.finish())
    [c] = [c for c in json.loads(capsys.readouterr().out) if c["name"] == "channels"]
    assert c["status"] == "fail"
    assert f"channels.telegram.accounts.default.api_base http://localhost:{squatter.port}" in c["detail"]
    assert refused(c["detail"], squatter.port, OTHER_USER) and f"port {squatter.port}" in c["fix"]
    assert TG_TOKEN not in c["detail"] + c["fix"]
