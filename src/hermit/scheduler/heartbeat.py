"""The heartbeat (SPEC §16): when a periodic wake-up may call the model, and what of its reply reaches a channel.

A heartbeat turn runs in the agent's main session with the heartbeat prompt, flagged `heartbeat` so it
never resets the session, never triggers the memory flush and leaves the session's last activity alone.
It is skipped without any model call outside `active_hours` (the agent's timezone), when HEARTBEAT.md is
missing or holds only blank lines, headings, empty list items and HTML comments, and while the main
session is busy. A heading is `#` followed by a blank (`#TODO call the bank` is a task, as in Markdown).
`HEARTBEAT_OK` at the start or end of the reply is stripped (agent/heartbeat_reply.py), with simple HTML or Markdown wrapped around
it (`<b>HEARTBEAT_OK</b>`, `**HEARTBEAT_OK**`); what remains is dropped when it is at most
`ack_max_chars` long (an acknowledgement), and otherwise delivered as an alert — unless the very same
alert was delivered to that target within the last 24 hours (`AlertMemory`, kept in the state dir so a
restart does not re-send it), or the target is not an owner of the agent and the owner did not opt in
(`heartbeat.share_alerts_with_target`; SPEC §18: main-session text reaches only the owner).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hermit.agent.heartbeat_reply import DEFAULT_ACK_MAX_CHARS as DEFAULT_ACK_MAX_CHARS
from hermit.agent.heartbeat_reply import HEARTBEAT_TOKEN as HEARTBEAT_TOKEN
from hermit.agent.heartbeat_reply import strip_heartbeat_token as strip_heartbeat_token
from hermit.channels.base import Target
from hermit.config.load import AgentConfig, LoadedConfig
from hermit.config.paths import not_own_note
from hermit.config.schema import ActiveHoursConfig, ChannelsConfig, HeartbeatConfig
from hermit.durable import write_atomic
from hermit.errors import HermitError
from hermit.scheduler.schedule import Zone
from hermit.scheduler.targets import let_in_again, not_let_in, not_the_owner, peer_kind_of, resolve_target
from hermit.sessions.keys import main_session_key
from hermit.textfile import FileTooLarge, NotRegularFile, decode_text, read_regular_stat

if TYPE_CHECKING:  # (the host runs agent turns: `hermit doctor`'s job checks load neither)
    from hermit.scheduler.host import SchedulerHost

HEARTBEAT_FILE = "HEARTBEAT.md"
MAX_HEARTBEAT_BYTES = 1_000_000  # a checklist; what the prompt shows of it is cut far sooner (20,000 characters)
# The original's rule: the same alert text is not sent to the same place again within a day.
DUPLICATE_WINDOW = timedelta(hours=24)
# Why a beat was skipped while the owner's turn held the main session (the schedule tries again soon).
BUSY = "main session busy"

log = logging.getLogger("hermit.scheduler")

# A heading needs a blank after its #s (CommonMark), so "#TODO …" or "#hashtag" is content.
_EMPTY_LINE = re.compile(r"^\s*(#+(\s.*)?|[-*+]\s*(\[[ xX]?\])?\s*|<!--.*-->\s*)?$")


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


class HeartbeatFileError(HermitError):
    """HEARTBEAT.md is there but is no checklist to follow: not a regular file, too large, unreadable, or not the
    owner's alone."""


def read_heartbeat_file(workspace: Path) -> str | None:
    """HEARTBEAT.md's text (None when there is none), read as the prompt reads the instruction files
    (workspace.read_bootstrap): never waiting on a FIFO (this runs in the gateway's event loop), within a size
    cap, and only a file the owner alone may write — it decides whether turns run. HeartbeatFileError else."""
    path = workspace / HEARTBEAT_FILE
    try:
        data, st = read_regular_stat(path, MAX_HEARTBEAT_BYTES)
    except FileNotFoundError:
        return None
    except NotRegularFile as e:
        if e.kind == "a directory":
            return None
        raise HeartbeatFileError(f"{path} is {e.kind}, not a regular file: the heartbeat does not read it",
                                 f"replace it with a Markdown checklist (rm {path}, then write the file)") from None
    except FileTooLarge as e:
        raise HeartbeatFileError(f"{path} is too large for a checklist ({e.size:,} bytes; at most {e.limit:,})",
                                 "keep only the checks each heartbeat should run") from None
    except OSError as e:
        raise HeartbeatFileError(f"cannot read {path}: {e.strerror or e}", "check its permissions") from None
    if (why := not_own_note(st)) is not None:
        raise HeartbeatFileError(f"{path} {why}, so what it says is not the owner's word: no heartbeat runs on it",
                                 f"if what it says is yours, make it yours alone: chown $(id -u) {path} && "
                                 f"chmod 600 {path}")
    return decode_text(data).text


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


class AlertMemory:
    """The last alert delivered per agent and target (a hash of its text and when), in one small JSON file
    (`<state>/cron/heartbeat-alerts.json`, 0600) so that a restart does not re-send yesterday's alert.
    A file that cannot be read is treated as empty (at worst one alert is sent twice) and logged."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._data: dict[str, dict[str, str]] | None = None

    def _load(self) -> dict[str, dict[str, str]]:
        if self._data is None:
            self._data = {}
            if self.path is not None and self.path.exists():
                try:
                    raw = json.loads(self.path.read_text(encoding="utf-8"))
                    self._data = {k: v for k, v in raw.items() if isinstance(v, dict)} if isinstance(raw, dict) else {}
                except (OSError, ValueError) as e:
                    log.warning("cannot read %s (%s); duplicate alerts may be sent once", self.path, e)
        return self._data

    @staticmethod
    def _key(agent_id: str, target: Target) -> str:
        return f"{agent_id}|{target.channel}:{target.account_id}:{target.peer_id}"

    @staticmethod
    def _digest(text: str) -> str:
        return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()

    def sent_recently(self, agent_id: str, target: Target, text: str, now: datetime) -> datetime | None:
        """When this very alert was last delivered to `target`, if within DUPLICATE_WINDOW of `now`."""
        last = self._load().get(self._key(agent_id, target))
        if not last or last.get("sha256") != self._digest(text):
            return None
        try:
            at = datetime.fromisoformat(last["at"])
        except (KeyError, ValueError):
            return None
        return at if timedelta(0) <= now - at < DUPLICATE_WINDOW else None

    def remember(self, agent_id: str, target: Target, text: str, now: datetime) -> None:
        data = self._load()
        data[self._key(agent_id, target)] = {"sha256": self._digest(text), "at": now.isoformat()}
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self.path, json.dumps(data, indent=1) + "\n", mode=0o600, keep_mode=False)
        except OSError as e:
            log.warning("cannot save %s (%s); the alert may be sent again after a restart", self.path, e)


def withheld_from(loaded: LoadedConfig, agent: AgentConfig, target: Target | None) -> tuple[str, str] | None:
    """Why the agent's heartbeat alerts are not delivered to `target`, in words, and what to do about it; None
    when they may be delivered. Asked at every alert, against the config in force.

    They are main-session text (MEMORY.md, owner-only notes): withheld when the target reaches someone other than
    an owner of the agent (a group, a contact, another agent's owner) while `heartbeat.share_alerts_with_target`
    is off; and, opted in or not, when the target is not let in to talk to the assistant now (targets.not_let_in:
    a contact revoked with `hermit pairing revoke` or never approved, a group taken off `groups`, an owner on an
    account whose `dm_policy` is disabled), as a job's runs are skipped then — the owner's opt-in was for someone
    they have since cut off. Delivered again once they are let in. (Until s17 an alert that was not shared, to
    an owner, was never asked the second question: the old copy of the admission rules let owners in always.)"""
    if target is None:
        return None
    if not agent.settings.heartbeat.share_alerts_with_target:
        risk = not_the_owner(loaded, agent.id, target.channel, target.account_id, target.peer_kind, target.peer_id)
        if risk is not None:
            return (f"heartbeat alerts of agent {agent.id} are main-session text and "
                    f"{target.channel}:{target.account_id}:{target.peer_id} reaches {risk}, not only an owner of "
                    f"agent {agent.id}", WITHHELD_FIX if agent.is_default else WITHHELD_FIX + (
                        f" (in agent {agent.id}'s own agents.list entry: under agents.defaults it is the default "
                        "agent's only)"))
    who = not_let_in(loaded, target.channel, target.account_id, target.peer_kind, target.peer_id)
    if who is None:
        return None
    again = let_in_again(target.channel, target.account_id,
                         peer_kind_of(target.channel, target.peer_kind, target.peer_id), who)
    return (f"heartbeat alerts of agent {agent.id} go to {who}, who is not let in to talk to the assistant now",
            f"{again} and the alerts are delivered again; or point heartbeat.target at an owner of the agent")


# What to do about an alert withheld from someone who is not an owner, in the log, the heartbeat's status and
# `hermit doctor`.
WITHHELD_FIX = ("point heartbeat.target at an owner of the agent, or set heartbeat.share_alerts_with_target: "
                "true to send the alerts there anyway")


def heartbeat_target(cfg: HeartbeatConfig, channels: ChannelsConfig | None = None, agent_id: str = "") -> Target | None:
    """Where alerts go. With `channels`, checked against them (JobError naming the accounts that exist);
    an account left unset then means `default`, or the only account the channel has."""
    t = cfg.target
    if t is None:
        return None
    if channels is None:
        return Target(t.channel.lower(), t.account, t.peer_kind, t.to)
    named = t.account if "account" in t.model_fields_set else None
    r = resolve_target(channels, t.channel, named, what=f"heartbeat target of {agent_id or 'the agent'}")
    return Target(r.channel, r.account, t.peer_kind, t.to)


async def run_heartbeat(agent: AgentConfig, host: SchedulerHost, now: datetime, zone: Zone,
                        alerts: AlertMemory | None = None, loaded: LoadedConfig | None = None, *,
                        current: Callable[[], LoadedConfig] | None = None) -> HeartbeatOutcome:
    """One heartbeat for `agent`: the checks that avoid a model call, the turn, the alert delivery (not
    repeated within a day when `alerts` remembers the same text sent to the same target). With `loaded`
    (the config in force), a target naming no configured account fails before the model is called, and
    an alert for a target that is not an owner of the agent is not delivered unless the owner opted in
    (`withheld_from`): it stays in the transcript, the outcome says why, and the log has one warning.
    `current` gives the config in force again once the turn is done (the gateway's: hermit.yaml may have
    changed during the turn); the alert goes by that one, and by nothing while it is invalid."""
    cfg = agent.settings.heartbeat
    if not within_active_hours(now.astimezone(zone.tz), cfg.active_hours):
        return HeartbeatOutcome("skipped", "outside active hours")
    text = read_heartbeat_file(agent.workspace)
    if text is None or heartbeat_file_is_empty(text):
        return HeartbeatOutcome("skipped", f"{HEARTBEAT_FILE} is empty")
    # Raises before the model call when it names no account.
    target = heartbeat_target(cfg, loaded.config.channels if loaded is not None else None, agent.id)
    withheld = withheld_from(loaded, agent, target) if loaded is not None else None
    key = main_session_key(agent.id)
    if host.busy(key):
        return HeartbeatOutcome("skipped", BUSY)
    result = await host.run_turn(agent.id, key, cfg.prompt, heartbeat=True)
    alert = strip_heartbeat_token(result.reply, cfg.ack_max_chars) if result.delivered else None
    if alert is None:
        return HeartbeatOutcome("ok")
    if current is not None and target is not None:
        try:
            loaded = current()
            agent = loaded.agent(agent.id)
            target = heartbeat_target(agent.settings.heartbeat, loaded.config.channels, agent.id)
        except HermitError as e:
            log.warning("heartbeat alert of %s not delivered: %s", agent.id, e.message)
            return HeartbeatOutcome("alert", f"not delivered: {e.message}; kept in the transcript", text=alert)
        withheld = withheld_from(loaded, agent, target)
    if target is None:
        return HeartbeatOutcome("alert", "no heartbeat.target configured: kept in the transcript", text=alert)
    if withheld is not None:
        why, fix = withheld
        log.warning("heartbeat alert not delivered: %s — %s", why, fix)
        return HeartbeatOutcome("alert", f"not delivered: {why}; kept in the transcript — {fix}", text=alert)
    alerts = alerts or AlertMemory(None)
    earlier = alerts.sent_recently(agent.id, target, alert, now)
    if earlier is not None:
        return HeartbeatOutcome("alert", f"the same alert was sent at {earlier.isoformat()}: not sent again "
                                         "within 24 h", text=alert)
    await host.deliver(target, alert)
    alerts.remember(agent.id, target, alert, now)
    return HeartbeatOutcome("alert", delivered=True, text=alert)
