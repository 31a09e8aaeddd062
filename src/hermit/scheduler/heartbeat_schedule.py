"""When each agent's next heartbeat is due, kept across gateway restarts (SPEC §16).

The schedule counts from the agent's last heartbeat, kept per agent in `<state>/cron/heartbeat-last.json` (0600):
when a beat starts, its time is written there before the turn, so a gateway killed mid-turn does not beat again at
once when it comes back. A gateway that starts finds the next beat due at `last + every`: at once (one beat, never
one per missed slot) when that has passed while it was down, asleep or crash-looping; at the next slot otherwise,
so a restart soon after a beat does not beat twice. An agent with no record yet starts its schedule when the
gateway first starts (that time is written too), so a gateway restarted more often than the interval still beats.
A beat skipped because the owner's turn holds the main session does not count: the record keeps the beat before
it, and the beat is tried again BUSY_RETRY later instead of a whole interval later.

A file that cannot be read is taken as empty (logged: at worst one beat comes early or the schedule starts again);
one that cannot be written is logged and the schedule lives in memory until the next restart."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path

from hermit.durable import write_atomic

log = logging.getLogger("hermit.scheduler")

BEAT_TIMES_FILE = "heartbeat-last.json"
# After a beat skipped for a busy main session (the owner's turn), the next try: soon, not a whole interval later.
BUSY_RETRY = timedelta(minutes=1)


class BeatTimes:
    """Each agent's last heartbeat (or the start of its schedule), by agent id, in one small JSON file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._data: dict[str, datetime] | None = None
        self._said_unsaved = False

    def _load(self) -> dict[str, datetime]:
        if self._data is not None:
            return self._data
        self._data = {}
        if self.path is None:
            return self._data
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return self._data
        except (OSError, ValueError) as e:
            log.warning("cannot read %s (%s); heartbeat schedules start again from now", self.path, e)
            return self._data
        for agent_id, entry in raw.items() if isinstance(raw, dict) else ():
            try:
                at = datetime.fromisoformat(entry["last"])
            except (TypeError, KeyError, ValueError):
                continue
            if at.tzinfo is not None:
                self._data[agent_id] = at
        return self._data

    def last(self, agent_id: str) -> datetime | None:
        return self._load().get(agent_id)

    def set(self, agent_id: str, at: datetime | None) -> None:
        """Record `at` as the agent's last beat (None forgets it) and save the file."""
        data = self._load()
        if at is None:
            data.pop(agent_id, None)
        else:
            data[agent_id] = at
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            text = json.dumps({k: {"last": v.isoformat()} for k, v in sorted(data.items())}, indent=1) + "\n"
            write_atomic(self.path, text, mode=0o600, keep_mode=False)
        except OSError as e:
            if not self._said_unsaved:
                log.warning("cannot save %s (%s); a restart starts the heartbeat schedules again", self.path, e)
                self._said_unsaved = True

    def next_due(self, agent_id: str, every: timedelta, now: datetime) -> datetime:
        """When the agent's next beat is due as a gateway starts (or its heartbeat is turned on): `last + every`,
        which may be now or past (due at once); with no record, or one in the future (the clock was set back),
        the schedule starts now and that is recorded."""
        last = self.last(agent_id)
        if last is None or last > now:
            self.set(agent_id, now)
            return now + every
        return last + every
