"""The heartbeat (SPEC §16): when a periodic wake-up may call the model, and what of its reply reaches a channel.

A heartbeat turn runs in the agent's main session with the heartbeat prompt, flagged `heartbeat` so it
never resets the session, never triggers the memory flush and leaves the session's last activity alone.
It is skipped without any model call outside `active_hours` (the agent's timezone), when HEARTBEAT.md is
missing or holds only blank lines, headings, empty list items and HTML comments, and while the main
session is busy. `HEARTBEAT_OK` at the start or end of the reply is stripped; what remains is dropped
when it is at most `ack_max_chars` long (an acknowledgement), and otherwise delivered as an alert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time
from pathlib import Path
from typing import Literal

from hermit.agent.context import is_silent
from hermit.channels.base import Target
from hermit.config.load import AgentConfig
from hermit.config.schema import ActiveHoursConfig, HeartbeatConfig
from hermit.scheduler.host import SchedulerHost
from hermit.scheduler.schedule import Zone
from hermit.sessions.keys import main_session_key

HEARTBEAT_FILE = "HEARTBEAT.md"
HEARTBEAT_TOKEN = "HEARTBEAT_OK"
DEFAULT_ACK_MAX_CHARS = 300

_EMPTY_LINE = re.compile(r"^\s*(#.*|[-*+]\s*(\[[ xX]?\])?\s*|<!--.*-->\s*)?$")
_TOKEN_EDGE = re.compile(rf"^\W*{HEARTBEAT_TOKEN}\W*|\W*{HEARTBEAT_TOKEN}\W*$")


@dataclass(frozen=True)
class HeartbeatOutcome:
    status: Literal["skipped", "ok", "alert", "error"]
    reason: str = ""  # why skipped, or the error
    delivered: bool = False
    text: str = ""  # the alert text

    def to_dict(self, at: datetime) -> dict[str, object]:
        out: dict[str, object] = {"at": at.isoformat(), "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.status == "alert":
            out["delivered"] = self.delivered
        return out


def heartbeat_file_is_empty(text: str) -> bool:
    """Only blank lines, Markdown headings, empty list items and one-line HTML comments: nothing to do."""
    without_comments = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    return all(_EMPTY_LINE.match(line) for line in without_comments.splitlines())


def read_heartbeat_file(workspace: Path) -> str | None:
    try:
        return (workspace / HEARTBEAT_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return None


def _minutes(hh_mm: str) -> int:
    hours, minutes = hh_mm.split(":")
    return int(hours) * 60 + int(minutes)


def within_active_hours(local: datetime | time, hours: ActiveHoursConfig | None) -> bool:
    """start <= now < end in local time; start > end spans midnight; start == end means all day."""
    if hours is None:
        return True
    now = local.hour * 60 + local.minute
    start, end = _minutes(hours.start), _minutes(hours.end)
    if start == end:
        return True
    if start < end:
        return start <= now < end
    return now >= start or now < end


def strip_heartbeat_token(reply: str, ack_max_chars: int) -> str | None:
    """The alert text to deliver, or None when the reply is an acknowledgement (or silent)."""
    text = reply.strip()
    if not text or is_silent(text):
        return None
    if HEARTBEAT_TOKEN not in text:
        return text
    stripped = text
    while True:  # "HEARTBEAT_OK" may wrap the reply on both sides
        shorter = _TOKEN_EDGE.sub("", stripped, count=1).strip()
        if shorter == stripped:
            break
        stripped = shorter
    if stripped == text:  # the token only in the middle: a real message that mentions it
        return text
    return stripped if len(stripped) > ack_max_chars else None


def heartbeat_target(cfg: HeartbeatConfig) -> Target | None:
    t = cfg.target
    return Target(t.channel, t.account, t.peer_kind, t.to) if t is not None else None


async def run_heartbeat(agent: AgentConfig, host: SchedulerHost, now: datetime, zone: Zone) -> HeartbeatOutcome:
    """One heartbeat for `agent`: the checks that avoid a model call, the turn, the alert delivery."""
    cfg = agent.settings.heartbeat
    if not within_active_hours(now.astimezone(zone.tz), cfg.active_hours):
        return HeartbeatOutcome("skipped", "outside active hours")
    text = read_heartbeat_file(agent.workspace)
    if text is None or heartbeat_file_is_empty(text):
        return HeartbeatOutcome("skipped", f"{HEARTBEAT_FILE} is empty")
    key = main_session_key(agent.id)
    if host.busy(key):
        return HeartbeatOutcome("skipped", "main session busy")
    result = await host.run_turn(agent.id, key, cfg.prompt, heartbeat=True)
    alert = strip_heartbeat_token(result.reply, cfg.ack_max_chars) if result.delivered else None
    if alert is None:
        return HeartbeatOutcome("ok")
    target = heartbeat_target(cfg)
    if target is None:
        return HeartbeatOutcome("alert", "no heartbeat.target configured: kept in the transcript", text=alert)
    await host.deliver(target, alert)
    return HeartbeatOutcome("alert", delivered=True, text=alert)
