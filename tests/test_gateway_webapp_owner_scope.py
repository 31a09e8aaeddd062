"""The web app decides which agent and which session the owner's words reach, and what approving a contact means,
as routing does (audit F3–F5), through a real Gateway (its bus, router, access control, console) and the
WebSocket protocol:

- a DM session is the owner's own only when an owner's DM is routed to that very agent and session: a contact
  who happens to own *another* account (bound to another agent) stays a contact, read-only (F3);
- a message for a session named at the CLI (`notes`, in several agents) runs in the agent the page named (F4);
- pairing.approve says what the config really gives the contact, as `hermit pairing approve` does: a config
  that shares the main session with contacts is named, never "they never reach your main session" (F5).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agenthelpers import fixed_clock
from gatewayhelpers import RecordingChannel, last_user_text
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.cli.main import main
from hermit.config import StatePaths, load_config
from hermit.config.load import LoadedConfig
from hermit.gateway.history import chat_history
from hermit.gateway.state import ensure_token
from hermit.gateway.supervisor import Gateway
from hermit.testing.scripted import FunctionModel
from test_gateway_webapp import Web as WebSocketClient


class Web(WebSocketClient):
    def turn(self, text: str, **params: Any) -> tuple[dict[str, Any], str]:  # type: ignore[override]
        """chat.send; its response and, when queued, the reply streamed up to chat.done."""
        self.n += 1
        rid = f"m{self.n}"
        self.ws.send_text(json.dumps({"type": "req", "id": rid, "method": "chat.send",
                                      "params": {"text": text, **params}}))
        res: dict[str, Any] = {}
        streamed = ""
        while True:
            f = json.loads(self.ws.receive_text())
            if f.get("type") == "res" and f.get("id") == rid:
                res = f
                if not f["ok"]:
                    return res, streamed
            elif f.get("event") == "chat.delta" and f["payload"]["replyTo"] == rid:
                streamed += f["payload"]["text"]
            elif f.get("event") == "chat.done" and f["payload"]["replyTo"] == rid:
                return res, streamed


def setup(home: Path, yaml: str, agents: tuple[str, ...]) -> tuple[LoadedConfig, dict[str, AgentRuntime]]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(yaml, encoding="utf-8")
    loaded = load_config(StatePaths(home))
    rts = {a: AgentRuntime(loaded.agent(a), FunctionModel(lambda req, a=a: f"agent {a}: {last_user_text(req)}"),
                           clock=fixed_clock, fsync=False, home=home) for a in agents}
    return loaded, rts


@contextmanager
def web_app(gw: Gateway, home: Path) -> Iterator[Web]:
    token = ensure_token(home)
    with TestClient(gw.app, base_url="http://localhost") as client, client.websocket_connect("ws://localhost/ws") as ws:
        web = Web(ws)
        assert web.ok("connect", token=token, clientId="tab1")["type"] == "hello-ok"
        yield web


def dm(account: str, peer: str, text: str) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id=account, peer_kind="dm", peer_id=peer, sender_id=peer,
                          text=text, message_id=text)


F3 = """
agents:
  defaults: {timezone: Europe/Berlin, memory_search: {provider: none}, session: {dm_scope: per-channel-peer}}
  list: [{id: main, default: true}, {id: family}]
channels:
  telegram:
    accounts:
      personal: {owners: ["42"], dm_policy: allowlist, allow_from: ["77"]}
      familybot: {owners: ["77"]}
bindings:
  - {match: {channel: telegram, account_id: familybot}, agent_id: family}
"""


def test_a_contact_who_owns_another_account_is_still_a_contact_in_the_web_app(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded, rts = setup(home, F3, ("main", "family"))
    personal, familybot = RecordingChannel("telegram", "personal"), RecordingChannel("telegram", "familybot")
    gw = Gateway(loaded, home, {}, rts, ensure_token(home), host="127.0.0.1", port=0,
                 channels=[personal, familybot], service_factories=[])

    async def messages() -> None:
        for c in (personal, familybot, gw.webchat):
            await c.start(gw.bus)
        # 77 writes to the personal bot (a contact there, agent main) and to the family bot (its owner, agent
        # family); 42 owns the personal bot.
        assert await gw.bus.publish(dm("personal", "77", "hi from 77 on personal")) == "queued"
        assert await gw.bus.publish(dm("familybot", "77", "hi from 77 on familybot")) == "queued"
        assert await gw.bus.publish(dm("personal", "42", "hi from 42")) == "queued"
        assert await gw.bus.drain(20)

    asyncio.run(messages())
    contact, own77, own42 = "agent:main:telegram:dm:77", "agent:family:telegram:dm:77", "agent:main:telegram:dm:42"
    rts["family"].store.get_or_create("agent:family:telegram:dm:42")  # 42's DMs never reach agent family
    assert rts["main"].sandboxed(contact)
    with web_app(gw, home) as web:
        listed = {s["key"]: s for s in web.ok("sessions.list")["sessions"]}
        assert {k: (s["agentId"], s["mode"], s.get("owner")) for k, s in listed.items() if ":dm:" in k} == {
            contact: ("main", "read-only", None), own77: ("family", "chat", True), own42: ("main", "chat", True),
            "agent:family:telegram:dm:42": ("family", "read-only", None)}
        assert web.ok("chat.history", sessionKey=contact)["mode"] == "read-only"
        refused, _ = web.turn("the owner typing into 77's contact session", sessionKey=contact)
        assert refused["error"]["code"] == "read_only"
        assert web.call("sessions.new", sessionKey=contact)["error"]["code"] == "read_only"
        # The owner's own DMs stay continuable, each in its agent.
        for key, agent in ((own77, "family"), (own42, "main")):
            res, streamed = web.turn(f"more for {key}", sessionKey=key)
            assert res["ok"] and streamed == f"agent {agent}: more for {key}"
    assert [m["text"] for m in chat_history(rts["main"].store, contact, 10)["messages"]] == [
        "hi from 77 on personal", "agent main: hi from 77 on personal"]  # untouched
    assert personal.messages("77")[-1].text == "agent main: hi from 77 on personal"  # nothing more reached 77


F4 = """
agents:
  defaults: {timezone: Europe/Berlin, memory_search: {provider: none}}
  list: [{id: main, default: true}, {id: work}]
"""


def test_a_cli_named_session_is_continued_in_the_agent_the_page_names(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loaded, rts = setup(home, F4, ("main", "work"))
    for rt in rts.values():  # `hermit --agent X chat --session notes` in both agents
        rt.store.get_or_create("notes")
    gw = Gateway(loaded, home, {}, rts, ensure_token(home), host="127.0.0.1", port=0, channels=[],
                 service_factories=[])
    asyncio.run(gw.webchat.start(gw.bus))
    with web_app(gw, home) as web:
        res, streamed = web.turn("the work plan", sessionKey="notes", agentId="work")
        assert res["ok"] and streamed == "agent work: the work plan"
        res, streamed = web.turn("a main thought", sessionKey="notes", agentId="main")
        assert res["ok"] and streamed == "agent main: a main thought"
        assert web.call("sessions.new", sessionKey="notes", agentId="ghost")["error"]["code"] == "bad_params"
    assert [m["text"] for m in chat_history(rts["work"].store, "notes", 10)["messages"]] == [
        "the work plan", "agent work: the work plan"]
    assert [m["text"] for m in chat_history(rts["main"].store, "notes", 10)["messages"]] == [
        "a main thought", "agent main: a main thought"]

    # The bus itself refuses a chosen key of one agent for another, and a bare key several agents hold.
    def chosen(key: str, agent: str | None) -> InboundMessage:
        return InboundMessage(channel="webchat", account_id="default", peer_kind="dm", peer_id="tab1",
                              sender_id="tab1", text="x", session_key=key, session_agent=agent)

    async def refused() -> list[str]:
        return [await gw.bus.publish(chosen("agent:main:main", "work")), await gw.bus.publish(chosen("notes", None))]

    assert asyncio.run(refused()) == ["ignored", "ignored"]


F5 = """
agents:
  defaults: {timezone: Europe/Berlin, memory_search: {provider: none}}
  list:
    - {id: main, default: true}
    - {id: family, session: {dangerously_share_main_session_with_contacts: true}}
channels:
  telegram:
    accounts:
      personal: {owners: ["42"]}
      familybot: {owners: ["77"]}
bindings:
  - {match: {channel: telegram, account_id: familybot}, agent_id: family}
"""


def test_approving_a_contact_in_the_web_app_says_what_the_config_gives_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    loaded, rts = setup(home, F5, ("main", "family"))
    personal, familybot = RecordingChannel("telegram", "personal"), RecordingChannel("telegram", "familybot")
    gw = Gateway(loaded, home, {}, rts, ensure_token(home), host="127.0.0.1", port=0,
                 channels=[personal, familybot], service_factories=[])

    async def strangers() -> None:
        for c in (personal, familybot, gw.webchat):
            await c.start(gw.bus)
        for account, peer in (("familybot", "555"), ("familybot", "556"), ("personal", "557")):
            assert await gw.bus.publish(dm(account, peer, f"hi from {peer}")) == "refused"  # a pairing code

    asyncio.run(strangers())

    def code(channel: RecordingChannel, peer: str) -> str:
        return channel.messages(peer)[0].text.split("pairing code: ")[1].split()[0]

    with web_app(gw, home) as web:
        shared = web.ok("pairing.approve", channel="telegram", code=code(familybot, "555"))
        own = web.ok("pairing.approve", channel="telegram", code=code(personal, "557"))
    assert "never reach your main session" not in shared["message"]
    assert "cannot reach your main session" not in shared["message"]
    assert "WARNING: agents family has session.dangerously_share_main_session_with_contacts: true, so they reach " \
           "your MAIN session" in shared["message"] and shared["warnings"]
    assert shared["mainSession"] is True and shared["sessionKey"] == "agent:family:main"
    assert (own["mainSession"], own["sandboxed"], own["warnings"]) == (False, True, [])
    assert "They cannot reach your main session, MEMORY.md or your owner-only notes" in own["message"]
    assert "own session (agent:main:telegram:personal:dm:557)" in own["message"]

    # `hermit pairing approve` states the same terms (one function computes them).
    assert main(["--home", str(home), "pairing", "approve", "telegram", code(familybot, "556")]) == 0
    out = capsys.readouterr().out
    assert "they reach your MAIN session" in out and "in your MAIN session (agent:family:main)" in out
    assert "cannot: reach your main session" not in out

    async def approved_again() -> str:
        out = await gw.bus.publish(dm("familybot", "555", "what is in MEMORY.md?"))
        assert await gw.bus.drain(20)
        return out

    assert asyncio.run(approved_again()) == "queued"  # as the message said: into agent family's main session
    assert [m["text"] for m in chat_history(rts["family"].store, "agent:family:main", 10)["messages"]][0] == \
        "what is in MEMORY.md?"
