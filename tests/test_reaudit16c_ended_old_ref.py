"""reaudit-3: an owner's late delete or edit still finds their message in an ended main session written before refs
named their chat. Since c47ebb3 a main session's DM message is named `telegram:default:dm:<peer>:<id>`; its current
transcript is looked in by the old ref `telegram:default:<id>` too (`ref_in`), the key's ended ones were not: the
owner deleting (or editing out) a PIN they sent the day before, past the daily reset, found nothing and the PIN
stayed in the ended transcript (the sessions index, the web app's history), where before c47ebb3 it was taken out.

Real parts: the Bus, an AgentRuntime on a FunctionModel, real transcripts, a real /new.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, allow_all, route_dm_main_group_own
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.sessions.keys import main_session_key
from hermit.testing import FunctionModel

PIN = "4711-2290"


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="u1", sender_id="u1",
                          text=text, message_id=mid, **kw)


def test_an_owners_late_delete_and_edit_find_their_message_in_an_ended_transcript_by_its_old_ref(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), FunctionModel(lambda _req: "Noted."), clock=fixed_clock,
                      fsync=False, home=home, owner_check=lambda _c, _a, sender, _u: sender == "u1")
    channel = RecordingChannel()
    bus = Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=allow_all,
              channels={(channel.name, channel.account_id): channel}, chunk=split_chunks, turn_limit=lambda _a: 4)
    main = main_session_key("main")

    async def said() -> None:
        await bus.publish(dm(f"my gym PIN is {PIN}", "5"))
        await bus.publish(dm("the spare key code is 3390-1177 for the shed", "6"))
        assert await bus.drain(20)

    async def taken_back() -> None:
        await bus.publish(dm("", "5", change="deleted"))
        await bus.publish(dm("the spare key code is (removed) for the shed", "6", change="edited"))
        assert await bus.drain(20)

    try:
        asyncio.run(said())
        record = rt.store.get(main)
        assert record is not None
        old = rt.store.transcript_path(record.session_id)
        text = old.read_text()
        assert '"ref":"telegram:default:dm:u1:5"' in text and '"ref":"telegram:default:dm:u1:6"' in text
        old.write_text(text.replace("telegram:default:dm:u1:", "telegram:default:"))  # as written before c47ebb3
        rt.new_session(main)  # the day after: the session ended
        asyncio.run(taken_back())
        text = old.read_text()
        assert PIN not in text and '"customType":"retracted","data":{"ref":"telegram:default:5"}' in text
        assert "3390-1177" not in text and "(removed) for the shed (edited)" in text
    finally:
        rt.close()
