"""A Slack edit delivered before its message still decides the text the message is handed on with.

Slack retries an event its delivery failed for (HTTP mode answers 500 until auth.test has answered, at every
start), and events are not ordered: a message sent just before a restart came back a minute later, after the edit
its sender made meanwhile. The edit found no message in the gateway and changed nothing, and the message then ran
with its first text — a PIN pasted and at once edited out was answered and kept. (reaudit16: edits out of order.)

Real parts: SlackChannel in Socket Mode against the fake Slack on 127.0.0.1; a queue stands in for the gateway.
"""

from __future__ import annotations

from pathlib import Path

from channelhelpers import run
from fakes.fake_slack import BOT_USER
from test_channel_slack import socket_mode

PIN = "4711"


def _edit(ts: str, user: str, text: str) -> dict[str, object]:
    prev = {"type": "message", "user": user, "text": f"<@{BOT_USER}> my PIN is {PIN}", "ts": ts}
    return {"type": "message", "subtype": "message_changed", "channel": "C1", "channel_type": "channel",
            "hidden": True, "event_ts": "1.1", "previous_message": prev,
            "message": {**prev, "text": text, "edited": {"user": user}}}


def test_an_edit_delivered_before_its_message_decides_its_text(tmp_path: Path) -> None:
    async def main() -> None:
        async with socket_mode(tmp_path) as (fake, _ch, sink):
            ev, eid = fake.message(f"<@{BOT_USER}> my PIN is {PIN}", user="U2", channel="C1", kind="app_mention")
            await fake.push(_edit(ev["ts"], "U2", f"<@{BOT_USER}> never mind"), "EvEdit1")
            assert (await sink.next()).change == "edited"  # nothing waits for it in the gateway yet
            await fake.push(ev, eid)  # the message's delivery, retried
            got = await sink.next()
            assert (got.change, got.text, got.mentioned) == (None, "never mind", True)
    run(main)


def test_an_early_edit_of_another_channels_message_or_by_someone_else_changes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with socket_mode(tmp_path) as (fake, _ch, sink):
            ev, eid = fake.message(f"<@{BOT_USER}> my PIN is {PIN}", user="U2", channel="C1", kind="app_mention")
            elsewhere = {**_edit(ev["ts"], "U2", "from C2"), "channel": "C2"}  # the same ts in another channel
            await fake.push(elsewhere, "EvEdit1")
            await fake.push(_edit(ev["ts"], "U3", "from U3"), "EvEdit2")
            for _ in range(2):
                assert (await sink.next()).change == "edited"
            await fake.push(ev, eid)
            got = await sink.next()
            assert got.text == f"my PIN is {PIN}"
    run(main)
