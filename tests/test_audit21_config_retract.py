"""A config's life, take-backs (audit s21 t3): a delete or an edit after a settings change looked only in the
session the config routes the chat to now, so the words taken back stayed in the session they were said in (an
ex-owner's PIN in the owner's main session, read by the owner's model every turn). Now the chat's earlier sessions are
looked in too (gateway/retract_deleted.earlier_routes). The real in-process gateway of test_gateway_live_config
against the fake Telegram (edits are how Telegram users take words back; bots get no deletes)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import RecordingChannel, allow_all, runtime
from hermit.channels.base import InboundMessage
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus, Routed
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions.keys import dm_session_key, main_session_key
from test_audit21_config_sessions import sessions, set_session
from test_gateway_live_config import CONTACT, EX_OWNER, OWNER, REPLY, gateway, replace_file, until

PIN = "4711-2290"


def edit(fake: FakeTelegram, mid: int, chat: int, text: str) -> None:
    fake.updates.append({"update_id": fake._next_update, "edited_message": {
        "message_id": mid, "date": int(time.time()), "edit_date": int(time.time()), "text": text,
        "from": {"id": chat, "is_bot": False, "first_name": "Ann"}, "chat": {"id": chat, "type": "private"}}})
    fake._next_update += 1
    fake._new_update.set()


def test_an_ex_owners_edit_after_demotion_takes_the_pin_out_of_the_main_session(tmp_path: Path) -> None:
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER, EX_OWNER], allow=[EX_OWNER]) as s:
            before = len(s.texts(EX_OWNER))
            mid = s.telegram.push_message(chat_id=EX_OWNER, text=f"my PIN is {PIN}")
            await until(lambda: len(s.texts(EX_OWNER)) > before, "the answer")
            replace_file(s.config, s.config.read_text().replace(f'"{OWNER}", "{EX_OWNER}"', f'"{OWNER}"'))
            edit(s.telegram, mid, EX_OWNER, "my PIN is (removed)")
            assert await s.say(EX_OWNER, "after the edit") == ["noted"]
            assert await s.say(OWNER, "owner-next") == ["noted"]
            owner_req = next(json.dumps(r.body) for r in s.provider.requests if "owner-next" in json.dumps(r.body))
            assert PIN not in owner_req, "the ex-owner's taken-back PIN still reaches the owner's model"

    asyncio.run(main())


def test_an_owners_edit_after_dm_scope_changed_takes_the_pin_out_of_main(tmp_path: Path) -> None:
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[]) as s:
            before = len(s.texts(OWNER))
            mid = s.telegram.push_message(chat_id=OWNER, text=f"my PIN is {PIN}")
            await until(lambda: len(s.texts(OWNER)) > before, "the answer")
            set_session(s, "{dm_scope: per-channel-peer}")
            edit(s.telegram, mid, OWNER, "my PIN is (removed)")
            assert await s.say(OWNER, "after the edit") == ["noted"]
            main_text = next(t for n, t in sessions(s).items() if "my PIN is" in t)
            assert '"edited"' in main_text.replace(" ", ""), "no edited entry in the main session"

    asyncio.run(main())


def test_a_contacts_edit_never_reaches_the_owners_message_of_the_same_id(tmp_path: Path) -> None:
    """The earlier sessions looked in are this chat's only: a contact's edit naming the id of the owner's message
    in the main session changes nothing there (its line names the owner's chat)."""
    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[CONTACT]) as s:
            before = len(s.texts(OWNER))
            mid = s.telegram.push_message(chat_id=OWNER, text=f"my PIN is {PIN}")
            await until(lambda: len(s.texts(OWNER)) > before, "the answer")
            edit(s.telegram, mid, CONTACT, "my PIN is (removed)")  # the contact's own chat, the owner's id
            assert await s.say(CONTACT, "contact-next") == ["noted"]
            assert await s.say(OWNER, "owner-next") == ["noted"]
            owner_req = next(json.dumps(r.body) for r in s.provider.requests if "owner-next" in json.dumps(r.body))
            assert PIN in owner_req and "(removed)" not in owner_req

    asyncio.run(main())


def test_a_delete_after_the_chat_moved_to_another_session_is_retracted_where_it_was_said(tmp_path: Path) -> None:
    """The delete path (Discord, Slack, WhatsApp send deletes): the bus over a real runtime, its routing switched
    as a config edit switches it (the sender an owner, then a contact)."""
    said: list[str] = []

    def model(req: ModelRequest) -> str:
        said.append(json.dumps([m.content for m in req.messages], default=str))
        return "noted"

    rt = runtime(tmp_path / "home", model)
    owner = [True]

    def route(m: InboundMessage) -> Routed:
        if owner[0]:
            return Routed("main", main_session_key("main"))
        return Routed("main", dm_session_key("main", m.channel, m.peer_id, account_id=m.account_id))

    bus = Bus(AgentHost({"main": rt}), route=route, admit=allow_all,
              channels={("telegram", "default"): RecordingChannel()}, chunk=split_chunks)

    def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
        return InboundMessage("telegram", "default", "dm", "5005", "5005", text, message_id=mid, **kw)

    async def go() -> None:
        assert await bus.publish(dm(f"my PIN is {PIN}", "7")) == "queued"
        assert await bus.drain(20)
        owner[0] = False  # removed from owners: the chat's messages go to a contact's session now
        await bus.publish(dm("", "7", change="deleted"))
        assert await bus.drain(20)

    asyncio.run(go())
    record = rt.session(main_session_key("main"))
    assert record is not None
    text = rt.store.transcript_path(record.session_id).read_text()
    assert PIN not in text and '"retracted"' in text.replace(" ", "")
