"""The bounds of looking for Slack changes missed while away (channels/slack_missed.py): only the stretch of the held
span that was read is judged (history reads newest first, a thread's replies oldest first), a tombstone counts as
deleted, and a conversation Slack will not show — or keeps rate-limiting — is skipped, never a crash. The real
channel's Web API client against the fake Slack on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from channelhelpers import FAST, QueueSink, run
from fakes.fake_slack import FakeSlack
from hermit.channels.held_messages import HeldChannel
from hermit.channels.slack import SlackChannel
from hermit.channels.slack_missed import PAGE, PAGES, Found, Held, gone
from hermit.config.schema import SlackAccountConfig

CHANNEL = "C42"
BASE = 1_700_000_000


def ts(i: int) -> str:
    return f"{BASE + i}.000100"


def with_channel(fake: FakeSlack, body: Callable[[Callable[[str, dict[str, Any]], Awaitable[Any]]], Awaitable[Any]],
                 ) -> Any:
    async def main() -> Any:
        await fake.start()
        ch = SlackChannel("work", SlackAccountConfig(mode="http", base_url=fake.base_url + "/api"),
                          bot_token=fake.bot_token, signing_secret="s", policy=FAST)
        await ch.start(QueueSink())
        try:
            return await body(lambda m, a: ch.call(m, a, form=True))
        finally:
            await ch.stop()
            await fake.stop()

    return run(main)


def test_only_the_stretch_read_is_judged() -> None:
    total = PAGES * PAGE + 200
    fake = FakeSlack()
    fake.history[CHANNEL] = {ts(i): {"type": "message", "user": "U1", "text": f"m{i}", "ts": ts(i)} for i in range(total)}
    thread = ts(0)
    replies = {ts(total + i): {"type": "message", "user": "U1", "text": "r", "ts": ts(total + i), "thread_ts": thread}
               for i in range(1, total)}
    fake.history[CHANNEL].update(replies)
    newest = total - 50
    fake.history[CHANNEL][ts(0)] = {"type": "message", "subtype": "tombstone", "ts": ts(0)}  # its replies are left
    del fake.history[CHANNEL][ts(newest)]
    fake.history[CHANNEL][ts(20)]["edited"] = {"user": "U1", "ts": ts(9999)}
    for i in (total + 1, total + total - 10):
        del fake.history[CHANNEL][ts(i)]  # an early and a late reply deleted

    async def body(call: Any) -> tuple[Found | None, Found | None]:
        top = await gone(call, HeldChannel(CHANNEL, "channel", {ts(0): "U1", ts(10): "U1", ts(20): "U1",
                                                                 ts(newest): "U1"}))
        held = {ts(total + 1): "U1", ts(total + 5): "U1", ts(total + total - 10): "U1"}
        thr = await gone(call, HeldChannel(f"{CHANNEL} {thread}", "channel", held))
        return top, thr

    top, thr = with_channel(fake, body)
    assert top is not None and thr is not None
    # History reads newest first: the 1,000 newest of the span; the first held (a tombstone) lies past them.
    assert top.deleted == [ts(newest)] and top.edited == []
    # A thread's replies read oldest first: the late deleted reply lies past what was read.
    assert thr.deleted == [ts(total + 1)]


def test_edits_tombstones_and_conversations_slack_will_not_show() -> None:
    fake = FakeSlack()
    fake.history[CHANNEL] = {ts(i): {"type": "message", "user": "U1", "text": f"m{i}", "ts": ts(i)} for i in range(5)}
    fake.history[CHANNEL][ts(1)] = {"type": "message", "subtype": "tombstone", "ts": ts(1)}
    fake.history[CHANNEL][ts(2)]["edited"] = {"user": "U1", "ts": ts(100)}
    fake.history[CHANNEL][ts(3)]["edited"] = {"user": "U1", "ts": ts(101)}
    fake.retry_after = 0.0

    async def body(call: Any) -> list[Found | None]:
        held = HeldChannel(CHANNEL, "channel", {ts(i): "U1" for i in range(5)}, {ts(3): ts(101)})
        out = [await gone(call, held), await gone(call, HeldChannel("C404", "channel", {ts(1): "U1"}))]
        fake.fail("conversations.history", *["429"] * 5)  # still limited after every retry: skipped this time
        out.append(await gone(call, held))
        return out

    seen, missing, limited = with_channel(fake, body)
    assert seen is not None and seen.deleted == [ts(1)] and [m["ts"] for m in seen.edited] == [ts(2)]
    assert missing is None and limited is None  # logged, the conversation left for the next connection


def test_the_record_takes_slack_ids_only(tmp_path: Path) -> None:
    path = tmp_path / "held.json"
    held = Held(path)
    held.add("D1 ../x", "im", ts(1), "U1")  # not a conversation id
    held.add("D1", "im", "1 OR 1", "U1")  # not a ts
    held.add("D1", "im", ts(2), "U1@T9")
    held.add("C1 1700000000.000001", "channel", ts(3), "U2")
    assert {c.channel_id: c.messages for c in Held(path).channels()} == {
        "D1": {ts(2): "U1@T9"}, "C1 1700000000.000001": {ts(3): "U2"}}


def test_a_found_delete_names_the_workspace_and_author_its_message_came_with() -> None:
    """An org-wide install hears many workspaces: the delete must reach the session its message went to."""
    from hermit.channels.base import InboundMessage
    from hermit.channels.slack_missed import remember, sweep

    held = Held(None)
    for team, user, chan in (("T2", "U5", "D5"), ("T0001", "U6@T9", "C6")):
        msg = InboundMessage(channel="slack", account_id="work", peer_kind="dm", peer_id=user, sender_id=user, text="x",
                             message_id=ts(1), team_id=team, meta={"channel_id": chan})
        remember(held, msg, {"channel_type": "im" if chan.startswith("D") else "channel"})
    told: list[dict[str, Any]] = []

    async def call(method: str, args: dict[str, Any]) -> Any:
        return {"ok": True, "messages": [], "has_more": False}

    async def hand_on(ev: dict[str, Any]) -> None:
        told.append(ev)

    run(lambda: sweep(held, call, hand_on, "work"))
    assert [(e["channel"], e["channel_type"], e["team"], e["previous_message"].get("user"),
             e["previous_message"].get("user_team")) for e in told] == [
        ("D5", "im", "T2", "U5", None), ("C6", "channel", "T0001", "U6", "T9")]
    assert held.channels() == []  # handed on once: not looked for again
