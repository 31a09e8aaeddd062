"""A re-aim killed part-way never hands the job's new audience what it kept for the old one (audit 22, t8).

`hermit cron edit --announce` (or the web app) saved the job's new target first and retired what its runs kept for
the old audience after (scheduler/reaim.py: the notes made owner-only, the room moved aside). A Hermit killed between
the two left the job aimed at the group with its notes and room as they were: its next run read "locker code 4821"
back and posted it to the group. Now the retire runs before the new aim is saved too (under the job file's lock):
killed anywhere, either the job keeps its old aim, or what it kept is retired — never the new aim with the old notes.

Real files, a real CronJobs; the crash harness kills a forked child before each write step (tests/crashharness.py).
"""

from __future__ import annotations

from pathlib import Path

import crashharness as ch
from hermit.memory.policy.audience import OWNER, line_audiences
from hermit.scheduler import CronJobs
from hermit.sessions.keys import cron_session_key
from hermit.tools.rooms import room_audience, room_slug
from test_trust_cron_reaim import GROUP, LOG, kept_for_the_owner


def _state(home: Path, job_id: str, r: object) -> dict[str, object]:
    loaded = r.loaded  # type: ignore[attr-defined]
    job = CronJobs(home, loaded, fsync=False).get(job_id)
    room = home / "agents" / "main" / "rooms" / room_slug(room_audience(cron_session_key(job_id)))
    log = (loaded.agent().workspace / LOG).read_text()
    line = log.split("\n").index("- locker code 4821")
    return {"aimed_at_group": job.delivery.to == GROUP["to"],
            "room_files": sorted(p.name for p in room.iterdir()) if room.is_dir() else [],
            "note_owner_only": line_audiences(log, LOG)[line] == OWNER}


def test_a_re_aim_killed_at_any_step_never_leaves_the_new_aim_with_the_old_notes(tmp_path: Path) -> None:
    r, job_id, home = kept_for_the_owner(tmp_path)
    before = _state(home, job_id, r)
    assert not before["aimed_at_group"] and before["room_files"] == ["scratch.txt"] and not before["note_owner_only"]

    def op() -> None:
        CronJobs(home, r.loaded, clock=r.clock, fsync=True).update(job_id, {"delivery": GROUP})

    sweep = ch.sweep(home, op)
    after = _state(home, job_id, r)
    assert after == {"aimed_at_group": True, "room_files": [], "note_owner_only": True}, after
    leaks = []
    for k, label in sweep.each(limit=60):
        ch.kill(op, k, label)
        got = _state(home, job_id, r)
        if got["aimed_at_group"] and (got["room_files"] or not got["note_owner_only"]):
            leaks.append(f"{ch.describe(k, label)}: {got}")
    print(f"{len(sweep.steps)} steps")
    assert not leaks, "\n".join(leaks)
