"""Re-audit of the bus's deletes (gateway/bus.py): what a stranger's delete events cost everyone else.

Deletes are taken from anyone (no admission: a delete is never answered) and each that finds nothing is
remembered for its message coming later (out of order). A stranger's flood of made-up ids, in their own DM,
evicted the remembered delete a group member's late message needed: that deleted message was answered. And each
delete was looked for by parsing the whole transcript, as many at once as the event loop's threads: a
non-admitted member deleting in a group held every thread the owner's turns need.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from gatewayhelpers import RecordingChannel, make_bus, runtime
from hermit.channels.base import InboundMessage
from hermit.gateway.bus import DELETES_KEPT, Admission
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key
from hermit.sessions.transcript import Transcript
from hermit.testing.scripted import Reply

GROUP = group_session_key("main", "telegram", "g1")


def m(text: str, mid: str, sender: str, peer: str, kind: str = "dm", **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind=kind, peer_id=peer, sender_id=sender,
                          text=text, message_id=mid, **kw)


def admit(msg: InboundMessage, agent_id: str) -> Admission:
    return Admission(msg.sender_id != "stranger", reason="not allowed")


def test_a_strangers_flood_of_deletes_does_not_evict_a_members_remembered_delete(tmp_path: Path) -> None:
    asked: list[ModelRequest] = []

    def model(req: ModelRequest) -> Reply:
        asked.append(req)
        return "ok"

    bus = make_bus(runtime(tmp_path, model), RecordingChannel(), admit=admit)

    async def main() -> str:
        await bus.publish(m("", "77", "u7", "g1", "group", change="deleted"))  # before its message: remembered
        for i in range(DELETES_KEPT):
            await bus.publish(m("", f"x{i}", "stranger", "stranger", change="deleted"))
        outcome = await bus.publish(m("my PIN is 4711", "77", "u7", "g1", "group", mentioned=True))
        await bus.drain(20)
        return outcome

    assert asyncio.run(main()) == "ignored"
    assert not asked


def test_deletes_that_name_nothing_are_looked_for_one_at_a_time_without_parsing(tmp_path: Path, monkeypatch: Any) -> None:
    bus = make_bus(rt := runtime(tmp_path, lambda req: "ok"), RecordingChannel(), admit=admit)

    async def history() -> None:
        for i in range(12):
            await bus.publish(m("x" * 2000, f"b{i}", "u7", "g1", "group", mentioned=True))
            await bus.drain(20)

    asyncio.run(history())
    group = {rt.store.transcript_path(rt.store.get(GROUP).session_id)}  # type: ignore[union-attr]
    parsed: list[Path] = []
    real_open, real_get = Transcript.open.__func__, rt.store.get  # type: ignore[attr-defined]
    inside, most, second = [0], [0], threading.Event()
    guard = threading.Lock()

    def opening(cls: Any, path: Path, *a: Any, **k: Any) -> Transcript:
        if path in group:
            parsed.append(path)
        return real_open(cls, path, *a, **k)  # type: ignore[no-any-return]

    def getting(key: str) -> Any:
        if key != GROUP:
            return real_get(key)
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            if inside[0] > 1:
                second.set()
        try:
            second.wait(1)  # a second look at once, if the bus lets one run beside this one
            return real_get(key)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(Transcript, "open", classmethod(opening))
    monkeypatch.setattr(rt.store, "get", getting)

    async def flood() -> None:
        await asyncio.gather(*(bus.publish(m("", f"nope{i}", "stranger", "g1", "group", change="deleted"))
                               for i in range(4)))

    asyncio.run(flood())
    assert parsed == []
    assert most[0] == 1
