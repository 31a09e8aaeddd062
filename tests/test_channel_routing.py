"""The routing example of docs/channels.md, loaded as written: Telegram and WhatsApp reach the personal agent, Slack the
work agent, through the real adapters (against fake platforms), the real access control and the real router."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx

from channelhelpers import QueueSink, run, serve_asgi
from fakes.fake_slack import BOT_USER, TEAM, FakeSlack
from fakes.fake_telegram import FakeTelegram
from fakes.fake_whatsapp import FakeWhatsApp, sign, text_message, webhook_body
from hermit.agent.routing import RouteInput, Router
from hermit.channels.access import AccessControl
from hermit.channels.base import ChannelDeps, InboundMessage
from hermit.channels.pairing import PairingStore
from hermit.channels.platforms import accounts, platform
from hermit.channels.webhook import asgi_app
from hermit.config import StatePaths, load_config

README = Path(__file__).resolve().parents[1] / "docs" / "channels.md"
ENV = {"TELEGRAM_BOT_TOKEN": "123:TEST", "WHATSAPP_ACCESS_TOKEN": "EAAG-test", "WHATSAPP_APP_SECRET": "app-secret",
       "WHATSAPP_VERIFY_TOKEN": "v", "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_APP_TOKEN": "xapp-test"}


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"```yaml\n# routing example[^\n]*\n(.*?)```", text, re.S)
    assert m, "the routing example is missing from docs/channels.md"
    return m.group(1)


def create_channel(name: str, account_id: str, cfg: Any, deps: ChannelDeps) -> Any:
    """The channel the gateway builds for `name` (the platform its adapter declares)."""
    return platform(name).create(deps, account_id, cfg)


def route(router: Router, access: AccessControl, msg: InboundMessage) -> tuple[str, str]:
    """As the gateway routes (gateway/supervisor.py route_with): owners are known before access is checked."""
    owner = msg.peer_kind == "dm" and access.is_owner(msg.channel, msg.account_id, msg.sender_id,
                                                      msg.sender_username)
    r = router.resolve(RouteInput(msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.thread_id,
                                  msg.topic_id, msg.guild_id, msg.team_id, sender_is_owner=owner))
    return r.agent_id, r.session_key


def test_readme_routing_example_personal_on_telegram_and_whatsapp_work_on_slack(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(readme_example(), encoding="utf-8")
    loaded = load_config(StatePaths(tmp_path))
    router = Router.from_config(loaded)
    access = AccessControl(loaded.config.channels, PairingStore(tmp_path))

    async def main() -> None:
        tg, slack, wa = await FakeTelegram().start(), await FakeSlack().start(), await FakeWhatsApp().start()
        bases = {"telegram": {"api_base": tg.base_url}, "slack": {"base_url": slack.base_url + "/api"},
                 "whatsapp": {"base_url": wa.base_url}}
        deps = ChannelDeps(tmp_path, ENV, time.time, inbox_dir=tmp_path / "workspace" / "inbox")
        sink = QueueSink()
        channels = [create_channel(name, acc, cfg.model_copy(update=bases[name]), deps)
                    for name, acc, cfg in accounts(loaded.config.channels)]
        for ch in channels:
            await ch.start(sink)
        [whatsapp] = [c for c in channels if c.name == "whatsapp"]
        try:
            async with serve_asgi(asgi_app(whatsapp.webhook_routes())) as base, httpx.AsyncClient() as c:
                tg.push_message(chat_id=42, text="remind me to call mum")
                body = json.dumps(webhook_body(text_message("15551234567", "hi from whatsapp", "wamid.1"),
                                               text_message("15550000000", "stranger", "wamid.2"))).encode()
                r = await c.post(base + "/hooks/whatsapp/personal/", content=body,
                                 headers=sign("app-secret", body))
                assert r.status_code == 200
                ev, eid = slack.message(f"<@{BOT_USER}> status of the release?", channel="C42",
                                        kind="app_mention")
                await slack.push(ev, eid)
                got = {(m.channel, m.sender_id): m for m in [await sink.next() for _ in range(4)]}
        finally:
            for ch in channels:
                await ch.stop()
            for fake in (tg, slack, wa):
                await fake.stop()

        telegram_dm = got[("telegram", "42")]  # the owner ("tg:42" in the example)
        assert route(router, access, telegram_dm) == ("personal", "agent:personal:main")
        assert access.check("telegram", "personal", "dm", "42", "42").allowed
        friend = access.check("telegram", "personal", "dm", "99", "99")
        assert not friend.allowed and friend.reply is not None  # a pairing code; once approved, a contact:
        contact = InboundMessage("telegram", "personal", "dm", "99", "99", "hi")
        assert route(router, access, contact) == ("personal", "agent:personal:telegram:personal:dm:99")
        whatsapp_dm = got[("whatsapp", "15551234567")]  # the owner ("+1 555 123 4567" in the example)
        assert route(router, access, whatsapp_dm) == ("personal", "agent:personal:main")
        assert access.check("whatsapp", "personal", "dm", "15551234567", "15551234567").allowed
        stranger = access.check("whatsapp", "personal", "dm", "15550000000", "15550000000")
        assert not stranger.allowed and stranger.reply is None  # allowlist: silence, never a code
        mention = got[("slack", "U1")]
        assert route(router, access, mention) == ("work", f"agent:work:slack:group:C42@{TEAM}")
        assert access.check("slack", "work", "group", "C42", "U1", mentioned=mention.mentioned).allowed
        assert loaded.agent("work").workspace != loaded.agent("personal").workspace

    run(main)
