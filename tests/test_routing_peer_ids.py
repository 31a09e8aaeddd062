"""A binding's peer id matches however it was written, by the rules `owners` follow: a contact named the way
Hermit's own pairing reply shows them (`+1555…` on WhatsApp) reaches the agent the binding names, not the
default agent and its notes; an id no message can carry is named by the doctor's bindings check."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from channelhelpers import QueueSink, run, serve_asgi
from fakes.fake_whatsapp import FakeWhatsApp, sign, text_message, webhook_body
from hermit.agent.routing import RouteInput, Router, binding_problems
from hermit.channels.access import AccessControl
from hermit.channels.base import ChannelDeps, InboundMessage
from hermit.channels.pairing import PairingStore
from hermit.channels.platforms import accounts, platform
from hermit.channels.webhook import asgi_app
from hermit.config import StatePaths, load_config
from hermit.config.load import build_config
from hermit.gateway.supervisor import route_with

CONFIG = """
agents:
  list:
    - {id: personal, default: true}
    - {id: family}
channels:
  whatsapp:
    accounts:
      personal: {phone_number_id: "1065550100", dm_policy: allowlist, allow_from: ["+1 555 123 4567"]}
  slack:
    accounts:
      work: {mode: socket, group_policy: open}
bindings:
  # as the pairing reply shows a WhatsApp number
  - {match: {channel: whatsapp, peer: {kind: dm, id: "+15551234567"}}, agent_id: family}
  # a Slack channel id pasted in lower case
  - {match: {channel: slack, peer: {kind: group, id: "c0123abc"}}, agent_id: family}
"""
ENV = {"WHATSAPP_ACCESS_TOKEN": "EAAG-test", "WHATSAPP_APP_SECRET": "app-secret", "WHATSAPP_VERIFY_TOKEN": "v"}


def test_a_contact_bound_by_the_number_the_pairing_reply_shows_reaches_the_bound_agent(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(CONFIG, encoding="utf-8")
    loaded = load_config(StatePaths(tmp_path))
    route = route_with(Router.from_config(loaded), AccessControl(loaded.config.channels, PairingStore(tmp_path)))

    async def main() -> InboundMessage:
        wa = await FakeWhatsApp().start()
        [(name, account_id, cfg)] = [a for a in accounts(loaded.config.channels) if a[0] == "whatsapp"]
        deps = ChannelDeps(tmp_path, ENV, time.time, inbox_dir=tmp_path / "inbox")
        channel: Any = platform(name).create(deps, account_id, cfg.model_copy(update={"base_url": wa.base_url}))
        sink = QueueSink()
        await channel.start(sink)
        try:
            async with serve_asgi(asgi_app(channel.webhook_routes())) as base, httpx.AsyncClient() as c:
                body = json.dumps(webhook_body(text_message("15551234567", "hi", "wamid.1"))).encode()
                r = await c.post(base + "/hooks/whatsapp/personal/", content=body, headers=sign("app-secret", body))
                assert r.status_code == 200
                return await sink.next()
        finally:
            await channel.stop()
            await wa.stop()

    msg = run(main)
    assert msg.peer_id == "15551234567"  # the adapter's form: digits, no '+'
    routed = route(msg)
    assert routed.agent_id == "family"
    assert routed.session_key == "agent:family:whatsapp:personal:dm:15551234567"
    slack = route(InboundMessage("slack", "work", "group", "C0123ABC", "U1", "hi", mentioned=True, team_id="T1"))
    assert (slack.agent_id, slack.session_key) == ("family", "agent:family:slack:group:C0123ABC@T1")
    assert binding_problems(loaded.config.bindings, ["personal", "family"], loaded.config.channels) == []


def router(tmp_path: Path, bindings: list[dict[str, Any]]) -> Router:
    raw = {"agents": {"list": [{"id": "main"}, {"id": "bound"}]}, "bindings": bindings}
    return Router.from_config(build_config(raw, StatePaths(tmp_path)))


@pytest.mark.parametrize(("channel", "kind", "written", "delivered"), [
    ("whatsapp", "dm", "+1 (555) 123-4567", "15551234567"),
    ("whatsapp", "dm", "wa:+15551234567", "15551234567"),
    ("telegram", "dm", "tg:42", "42"),
    ("telegram", "dm", " 42 ", "42"),
    ("telegram", "group", "telegram:-100777", "-100777"),
    ("discord", "dm", "<@123456>", "123456"),
    ("discord", "group", "<#998877>", "998877"),
    ("slack", "dm", "<@u42>", "U42"),
    ("slack", "group", "<#c024be91l|general>", "C024BE91L"),
    ("slack", "group", "Slack:C024BE91L", "C024BE91L"),
])
def test_a_peer_id_matches_in_every_form_owners_accept(tmp_path: Path, channel: str, kind: Literal["dm", "group"],
                                                       written: str, delivered: str) -> None:
    r = router(tmp_path, [{"match": {"channel": channel, "peer": {"kind": kind, "id": written}}, "agent_id": "bound"}])
    route = r.resolve(RouteInput(channel, "default", kind, delivered))
    assert (route.agent_id, route.matched_by) == ("bound", "peer")
    # the session key carries the platform's id (a Slack one with its workspace), never the binding's spelling
    assert route.session_key.endswith(delivered + ("@account.default" if channel == "slack" else ""))
    # another peer of the same kind is still not it
    assert r.resolve(RouteInput(channel, "default", kind, delivered + "0")).agent_id == "main"


def test_the_doctor_names_peer_ids_no_message_carries(tmp_path: Path) -> None:
    bindings = [
        {"match": {"channel": "whatsapp", "peer": {"kind": "dm", "id": "+15551234567"}}, "agent_id": "bound"},
        {"match": {"channel": "whatsapp", "peer": {"kind": "dm", "id": "15551234567"}}, "agent_id": "main"},
        {"match": {"channel": "whatsapp", "peer": {"kind": "group", "id": "120363"}}, "agent_id": "bound"},
        {"match": {"channel": "telegram", "peer": {"kind": "dm", "id": "@ann_smith"}}, "agent_id": "bound"},
        {"match": {"channel": "telegram", "peer": {"kind": "group", "id": "777"}}, "agent_id": "bound"},
        {"match": {"channel": "slack", "peer": {"kind": "group", "id": "#general"}}, "agent_id": "bound"},
        {"match": {"channel": "whatsapp", "peer": {"kind": "dm", "id": "+1 555 CALL ME"}}, "agent_id": "bound"},
        {"match": {"channel": "discord", "peer": {"kind": "dm", "id": "tg:42"}}, "agent_id": "bound"},
    ]
    cfg = build_config({"agents": {"list": [{"id": "main"}, {"id": "bound"}]}, "bindings": bindings},
                       StatePaths(tmp_path))
    problems = binding_problems(cfg.config.bindings, ["main", "bound"], cfg.config.channels)
    text = "\n".join(problems)
    # the same number written two ways is one match: the second binding never applies
    assert "bindings[1] has the same match as bindings[0]" in text
    assert "bindings[2] matches whatsapp group '120363', which no message carries" in text
    assert "bindings[3] matches telegram dm '@ann_smith', which no message carries" in text
    assert "never a username" in text
    assert "bindings[4] matches telegram group '777'" in text and "-1001234567890" in text
    assert "bindings[5] matches slack group '#general'" in text and "C0123456789" in text
    assert "bindings[6] matches whatsapp dm '+1 555 CALL ME'" in text and "letters" in text
    assert "bindings[7] matches discord dm 'tg:42'" in text and "names telegram" in text
    assert len(problems) == 7
