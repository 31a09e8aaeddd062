"""A job or heartbeat aimed at a group by its name is a group's delivery, let in only as a group (reaudit16b).

Telegram's sendMessage takes a public group's or channel's `@username` as its chat_id, and Slack's chat.postMessage a
channel's `#name`: aimed as `telegram:@family` or `slack:#general` (a DM by default), such a job was judged as a DM
to a person (targets.peer_kind_of), so with `dm_policy: open` it delivered to a group that is not under `groups`
(or with `group_policy: disabled`) — after the owner took it off, too — and a main-session job's refusal named it a
DM. Now the name makes it a group: skipped until the group is let in.

Through the real scheduler over real job and run-log files; schedhelpers' MemoryChannel is the channel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.scheduler.targets import not_let_in, peer_kind_of
from test_cron_revoked import HOUR, Live, cfg


@pytest.mark.parametrize(("channel", "to"), [("telegram", "@family_news"), ("slack", "#general")])
def test_a_group_named_by_its_name_is_a_group(tmp_path: Path, channel: str, to: str) -> None:
    assert peer_kind_of(channel, "dm", to) == "group"
    loaded = build_config({"agents": {"defaults": {"memory_search": {"provider": "none"}}},
                           "channels": {channel: {"accounts": {"default": {
                               "owners": ["U1" if channel == "slack" else "1"], "dm_policy": "open",
                               **({"bot_token": "xoxb-1", "app_token": "xapp-1"} if channel == "slack" else {})}}}}},
                          StatePaths(tmp_path / "home"))
    why = not_let_in(loaded, channel, None, "dm", to)
    assert str(why) == f"the {channel} group {to} (not listed under channels.{channel}.accounts.default.groups)", why


def test_a_job_to_a_telegram_group_by_its_username_is_skipped_when_not_let_in(tmp_path: Path) -> None:
    home = tmp_path / "home"
    live = Live(home, cfg(home, dm_policy="open"))
    live.service.jobs.add({"id": "news", "message": "post the family plan", "schedule": HOUR,
                           "delivery": {"mode": "announce", "channel": "telegram", "to": "@family_news"}})

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            await live.tick_at(1)
            live.loaded = cfg(home, dm_policy="open", groups=["@family_news"])
            await live.tick_at(2)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert [t.peer_id for t, _ in live.channel.sent] == ["@family_news"]
    runs = live.runs("news")
    assert [(r["status"], r["delivered"]) for r in runs] == [("skipped", False), ("ok", True)]
    assert "the telegram group @family_news (not listed under" in runs[0]["error"], runs[0]
