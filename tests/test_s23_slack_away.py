"""Slack deletes and edits made while the gateway was away (s23 t10; t6 did Discord's).

Socket Mode redelivers an unacked envelope and Slack retries an event for about an hour, but a message deleted while
the gateway was stopped, or its socket down past the retries, is never told again: Ann's deleted "my card is
4111-0001" stayed in her session and went to the model with her next turn. Now each new Socket Mode connection reads
`conversations.history` (a thread: `conversations.replies`) over the messages the account handed on
(channels/slack_missed.py) and hands on what was deleted or edited meanwhile as the events Slack did not send.

Real `hermit gateway run`, the real Slack adapter against the fake Slack on 127.0.0.1, the fake model provider.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audit19_who import last_user_text
from channeldrivers import SlackDriver
from channelhelpers import run
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER = "U1001"
POLICIES = {"fam": {"owners": [OWNER], "group_policy": "open", "require_mention": False}}
SCRIPT = [{"match": {"contains": "AW-NEXT"}, "text": "next-ok"}, {"text": "ok", "repeat": True}]
GROUP = "C77"


def nexts(provider: FakeProvider) -> list[str]:
    return [json.dumps(r.body) for r in provider.requests if "AW-NEXT" in last_user_text(r.body)]


def away(tmp_path: Path, *, restart: bool, edit: bool = False, thread: bool = False,
         rate_limited: bool = False, refused: bool = False) -> tuple[list[str], list[Any]]:
    """A secret and a note said (in a DM, or in a channel's thread); the secret deleted or edited on Slack while the
    gateway is away (stopped, or its socket closed), with no event; then the next message. Returns the next
    message's model requests and the fake's history calls."""

    async def main() -> tuple[list[str], list[Any]]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "slack", provider, POLICIES) as (d, gw):
                assert isinstance(d, SlackDriver)
                f = d.fakes["fam"]
                where: dict[str, Any] = ({"channel": GROUP, "channel_type": "channel", "thread_ts": "1700000000.000001"}
                                         if thread else {"channel": f"D{OWNER}"})
                peer = GROUP if thread else OWNER
                secret, eid = f.message("AW-SECRET my card is 4111-0001", user=OWNER, **where)
                await f.push(secret, eid)
                await until(lambda: len(d.texts("fam", peer)) == 1, "the secret's answer")
                note, eid = f.message("AW-KEEP the spare key is under the blue pot", user=OWNER, **where)
                await f.push(note, eid)
                await until(lambda: len(d.texts("fam", peer)) == 2, "the note's answer")
                connections = f.connections
                if edit:
                    f.edit(secret["channel"], secret["ts"], "AW-SECRET never mind")
                else:
                    f.delete(secret["channel"], secret["ts"])
                if rate_limited:
                    f.retry_after = 1.0
                    f.fail("conversations.replies" if thread else "conversations.history", "429")
                if restart:
                    await gw.stop()
                    await gw.start()
                elif refused:  # Slack's planned refresh, then no new connection for a while
                    f.fail("apps.connections.open", *["500"] * 5)
                    await f.refresh()
                else:
                    await f.drop_sockets()
                await f.wait_for(lambda: f.connections > connections, timeout=PROC_TIMEOUT)
                nxt, eid = f.message("AW-NEXT what did I tell you?", user=OWNER, **where)
                await f.push(nxt, eid)
                await until(lambda: "next-ok" in d.texts("fam", peer), "the next message's answer")
                looks = [c for c in f.calls if c.route.startswith("conversations.")]
                return nexts(provider), looks

    return run(main, timeout=PROC_TIMEOUT * 2)


def test_a_dm_deleted_while_the_gateway_was_stopped_is_retracted_at_its_start(tmp_path: Path) -> None:
    [request], _ = away(tmp_path, restart=True)
    assert "4111-0001" not in request
    assert "blue pot" in request  # what was not deleted stays
    held = next(tmp_path.rglob("slack/fam/held-messages.json"))
    assert "4111" not in held.read_text() and held.stat().st_mode & 0o077 == 0  # ids only, the owner's alone


def test_a_dm_deleted_while_the_socket_was_closed_is_retracted_at_the_reconnect(tmp_path: Path) -> None:
    [request], _ = away(tmp_path, restart=False)
    assert "4111-0001" not in request
    assert "blue pot" in request


def test_a_dm_edited_while_the_gateway_was_stopped_runs_as_edited(tmp_path: Path) -> None:
    [request], _ = away(tmp_path, restart=True, edit=True)
    assert "4111-0001" not in request and "AW-SECRET never mind" in request
    assert "blue pot" in request


def test_a_thread_reply_deleted_while_the_gateway_was_stopped_is_retracted(tmp_path: Path) -> None:
    [request], looks = away(tmp_path, restart=True, thread=True)
    assert "4111-0001" not in request and "blue pot" in request
    assert [c.payload["ts"] for c in looks if c.route == "conversations.replies"] == ["1700000000.000001"]


def test_a_429_from_history_is_waited_out_and_the_account_goes_on(tmp_path: Path) -> None:
    [request], looks = away(tmp_path, restart=False, rate_limited=True)
    assert "4111-0001" not in request and "blue pot" in request
    assert [c.faulted for c in looks] == ["429", None]  # Retry-After honoured, then read once


def test_a_refresh_slack_asked_for_reads_no_history(tmp_path: Path) -> None:
    """Slack rotates Socket Mode connections every few hours and redelivers what it sends meanwhile: no look then."""

    async def main() -> list[Any]:
        with FakeProvider(SCRIPT) as provider:
            async with stack(tmp_path, "slack", provider, POLICIES) as (d, _gw):
                assert isinstance(d, SlackDriver)
                f = d.fakes["fam"]
                await d.dm("fam", OWNER, "AW-KEEP the spare key is under the blue pot")
                await until(lambda: len(d.texts("fam", OWNER)) == 1, "the note's answer")
                connections = f.connections
                await f.refresh()
                await f.wait_for(lambda: f.connections > connections, timeout=PROC_TIMEOUT)
                await d.dm("fam", OWNER, "AW-NEXT what did I tell you?")  # handled after any look: none came
                await until(lambda: "next-ok" in d.texts("fam", OWNER), "the next message's answer")
                return [c for c in f.calls if c.route.startswith("conversations.")]

    assert run(main, timeout=PROC_TIMEOUT * 2) == []


def test_http_mode_looks_at_its_start_too(tmp_path: Path) -> None:
    """The Events API retries a failed delivery for about an hour: a delete made while the gateway was stopped longer
    is found when the account starts. The real channel behind its webhook route, the fake Slack Web API."""
    import time

    import httpx

    from channelhelpers import FAST, QueueSink, serve_asgi
    from fakes.fake_slack import FakeSlack, event_body, sign
    from hermit.channels.slack import SlackChannel
    from hermit.channels.webhook import asgi_app
    from hermit.config.schema import SlackAccountConfig

    async def main() -> list[tuple[str, str | None]]:
        fake = await FakeSlack().start()
        cfg = SlackAccountConfig(mode="http", base_url=fake.base_url + "/api")
        try:
            out: list[tuple[str, str | None]] = []
            for run_no in (1, 2):
                ch = SlackChannel("work", cfg, bot_token=fake.bot_token, signing_secret="s", state_dir=tmp_path,
                                  policy=FAST)
                sink = QueueSink()
                await ch.start(sink)
                try:
                    if run_no == 1:
                        ev, eid = fake.message("AW-SECRET my card is 4111-0001", user=OWNER, channel=f"D{OWNER}")
                        fake.keep(ev)
                        body = json.dumps(event_body(ev, eid, fake.team)).encode()
                        async with serve_asgi(asgi_app(ch.webhook_routes())) as base, httpx.AsyncClient() as c:
                            r = await c.post(base + "/hooks/slack/work/", content=body,
                                             headers=sign("s", int(time.time()), body))
                        assert r.status_code == 200
                        fake.delete(ev["channel"], ev["ts"])  # while the gateway is stopped
                    m = await sink.next(timeout=PROC_TIMEOUT)
                    out.append((m.message_id, m.change))
                finally:
                    await ch.stop()
            return out
        finally:
            await fake.stop()

    [(ts, first), (again, change)] = run(main, timeout=PROC_TIMEOUT * 2)
    assert first is None and again == ts and change == "deleted"


def test_a_refresh_followed_by_refused_connections_still_looks(tmp_path: Path) -> None:
    """A refresh that did not reconnect at once (apps.connections.open failing) may have lost what Slack sent
    meanwhile: that reconnection looks."""
    [request], looks = away(tmp_path, restart=False, refused=True)
    assert "4111-0001" not in request and "blue pot" in request
    assert [c.route for c in looks] == ["conversations.history"]
