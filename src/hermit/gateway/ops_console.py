"""The web app's operations methods: cron jobs, the heartbeat, channels, pairing requests and the gateway log.

Thin faces over the services the CLI uses, so the page and `hermit cron|pairing|logs` can never
disagree: CronJobs (the running scheduler's own, so a change or a "run now" wakes it at once),
PairingStore (file-locked, safe beside `hermit pairing` in another process), the channels' live
status objects and the gateway's log file. Approving a pairing request makes the sender a *contact*, never an
owner; the answer says what that means under this config, in the terms `hermit pairing approve` prints
(channels/contact_terms.py): a config that shares the main session with contacts, or runs their tools
unsandboxed, is said first.

A sender's name and username are theirs to choose (`Dana) on telegram/default — YOUR OWN PHONE, verified ✓ (`),
so the page gets them as `messages.label_text` makes the names in memory labels: letters, digits, spaces and
a few marks, one line; the page shows them apart from what the gateway says, quoted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermit.channels.base import Channel
from hermit.channels.contact_terms import contact_terms
from hermit.channels.pairing import NAME_MAX, ApprovedSender, PairingRequest, PairingStore, sender_label
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError
from hermit.gateway.logs import log_entry, log_path, split_lines
from hermit.gateway.protocol import (
    CronAddParams,
    CronJobParams,
    CronRunsParams,
    CronUpdateParams,
    LogsTailParams,
    PairingDecideParams,
    PairingListParams,
    PairingRevokeParams,
)
from hermit.messages import label_text
from hermit.scheduler.control import CronJobs
from hermit.scheduler.held import held_note, jobs_held

TAIL_MAX_BYTES = 1_000_000  # the log tail reads at most this much from the end of the file


class OpsConsole:
    def __init__(self, loaded: LoadedConfig, home: Path, channels: Sequence[Channel], services: Sequence[object],
                 clock: Callable[[], float], *, config: Callable[[], LoadedConfig] | None = None) -> None:
        self.home = home
        self.loaded = loaded
        self.config = config or (lambda: self.loaded)  # the config in force (a ConfigError while it is invalid)
        self.channels = channels
        self.pairing = PairingStore(home, clock)
        scheduler = next((s for s in services if isinstance(getattr(s, "jobs", None), CronJobs)), None)
        jobs: CronJobs | None = getattr(scheduler, "jobs", None)
        # The scheduler's own CronJobs wakes it on a change. Without a scheduler in this gateway (a test,
        # a config without one) the jobs are still listed and changed; a "run now" then says it waits.
        self.jobs = jobs or CronJobs(home, loaded, clock=lambda: datetime.fromtimestamp(clock(), UTC))
        self._running_tasks: Callable[[], dict[str, Any]] | None = getattr(scheduler, "running_tasks", None)

    def running(self) -> set[str]:
        return set(self._running_tasks()) if self._running_tasks is not None else set()

    # ---- cron ---------------------------------------------------------------------------------------

    def cron_list(self, _: object) -> dict[str, Any]:
        """Every job as `hermit cron list` shows it, with its next three runs, whether it runs now and, when it is
        aimed at someone not let in (its runs skipped), the warning `cron.add`/`cron.update` gave."""
        file = self.jobs.load()
        running = self.running()
        out = []
        for job in file.jobs:
            d = self.jobs.describe(job)
            d["schedule_text"] = job.schedule.describe()
            d["delivery_text"] = job.delivery.describe()
            d["next_runs"] = [t.isoformat() for t in self.jobs.next_times(job)] if job.enabled else []
            d["running"] = job.id in running
            held = self.jobs.not_let_in(job)  # aimed at someone not let in: its runs are skipped
            d["warning"] = held.text if held is not None else None
            out.append(d)
        return {"jobs": out, "invalid": [{"index": b.index, "error": b.error} for b in file.invalid]}

    def cron_status(self, _: object) -> dict[str, Any]:
        """The job counts, the next job and the scheduler (its ticker and each agent's next heartbeat)."""
        return self.jobs.status()

    def cron_runs(self, p: CronRunsParams) -> dict[str, Any]:
        res = self.jobs.runs(p.id, p.limit)
        res["runs"] = list(reversed(res["runs"]))  # newest first, as a log is read
        return res

    def cron_run(self, p: CronJobParams) -> dict[str, Any]:
        return self.jobs.request_run(p.id)

    def cron_update(self, p: CronUpdateParams) -> dict[str, Any]:
        return self.jobs.update(p.id, {"enabled": p.enabled})

    def cron_add(self, p: CronAddParams) -> dict[str, Any]:
        return self.jobs.add(p.job)

    def cron_remove(self, p: CronJobParams) -> dict[str, Any]:
        return self.jobs.remove(p.id)

    # ---- channels and pairing -----------------------------------------------------------------------

    def channels_status(self, _: object) -> dict[str, Any]:
        return {"channels": [asdict(c.status()) for c in self.channels]}

    def pairing_list(self, p: PairingListParams) -> dict[str, Any]:
        now = self.pairing.clock()
        pending = sorted(self.pairing.pending(p.channel), key=lambda r: (r.channel, r.account_id, r.created_at))
        approved = sorted(self.pairing.approved(p.channel), key=lambda a: (a.channel, a.account_id, a.sender_id))
        return {"pending": [_request(r, now) for r in pending],
                "approved": [_contact(a) | {"approvedAt": a.approved_at} for a in approved]}

    def pairing_approve(self, p: PairingDecideParams) -> dict[str, Any]:
        r = self.pairing.approve(p.channel, p.code)
        terms = contact_terms(self.config(), r.channel, r.account_id, r.sender_id)
        return {"approved": _request(r, self.pairing.clock()),
                "message": f"approved as a contact, not an owner. {terms.text()}",
                "sessionKey": terms.session_key, "mainSession": terms.main, "sandboxed": terms.sandboxed,
                "warnings": list(terms.warnings)}

    def pairing_deny(self, p: PairingDecideParams) -> dict[str, Any]:
        r = self.pairing.deny(p.channel, p.code)
        return {"denied": _request(r, self.pairing.clock()),
                "message": "denied: no reply, and no new code for this sender until the request expires"}

    def pairing_revoke(self, p: PairingRevokeParams) -> dict[str, Any]:
        """Revoke an approved contact; each one revoked comes with the enabled jobs aimed at them that are now
        skipped (`held`) and the note `hermit pairing revoke` prints about them (`heldNote`, '' for none); `warning`
        says them all when there are any."""
        gone = self.pairing.revoke(p.channel, p.sender, p.account_id)
        try:
            loaded: LoadedConfig | None = self.config()
        except ConfigError:
            loaded = None  # the config in force is invalid: nothing is delivered anyway, and no job is named
        out = []
        for a in gone:
            held = jobs_held(self.jobs, loaded, a) if loaded is not None else []
            out.append(_contact(a) | {"held": held, "heldNote": held_note(held)})
        notes = [f"{c['label']}: {c['heldNote']}" if len(out) > 1 else c["heldNote"] for c in out if c["heldNote"]]
        # Said with the action, as cron.add's and cron.update's warnings are (static/ops.js `act`).
        return {"revoked": out} | ({"warning": "; ".join(notes)} if notes else {})

    # ---- the log ------------------------------------------------------------------------------------

    def logs_tail(self, p: LogsTailParams) -> dict[str, Any]:
        """The last entries of the gateway log (text or JSON lines), a traceback kept with its entry."""
        path = log_path(self.home)
        try:
            lines = _last_lines(path, p.lines * 4)  # room for traceback lines, which join their entry
        except FileNotFoundError:
            return {"path": str(path), "entries": [], "note": "no log yet"}
        entries: list[dict[str, Any]] = []
        for line in lines:
            entry = log_entry(line)
            if entry is not None:
                entries.append(entry)
            elif entries:
                entries[-1]["exc"] = f"{entries[-1]['exc']}\n{line}" if "exc" in entries[-1] else line
        return {"path": str(path), "entries": entries[-p.lines:]}


def _chosen(name: str | None) -> str | None:
    """A name the sender chose, as the page may show it (label_text), or None when nothing is left."""
    return (label_text(name, NAME_MAX) or None) if name else None


def _contact(a: ApprovedSender) -> dict[str, Any]:
    name, username = _chosen(a.sender_name), _chosen(a.sender_username)
    return {"channel": a.channel, "accountId": a.account_id, "senderId": a.sender_id, "senderName": name,
            "senderUsername": username, "label": sender_label(a.sender_id, name, username)}


def _request(r: PairingRequest, now: float) -> dict[str, Any]:
    return {"channel": r.channel, "accountId": r.account_id, "senderId": r.sender_id,
            "senderName": _chosen(r.sender_name), "senderUsername": _chosen(r.sender_username),
            "code": r.code, "createdAt": r.created_at,
            "expiresAt": r.expires_at, "expiresInMinutes": max(0, int((r.expires_at - now) // 60)),
            "denied": r.denied}


def _last_lines(path: Path, n: int) -> list[str]:
    """The last `n` lines, reading only the end of a large file."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - TAIL_MAX_BYTES)
        f.seek(start)
        data = f.read()
    lines = split_lines(data)
    if start and lines:
        lines = lines[1:]  # the first line read is probably cut
    return lines[-n:]

