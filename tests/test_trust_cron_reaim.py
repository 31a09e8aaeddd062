"""A job re-aimed from the owner to a group never hands the group what it kept for the owner (trust audit A,
item 2).

The cron tool made a job announcing to the owner ("note the locker code 4821 for me"); its isolated run added
the code to today's log (a block of audience `cron:<jobId>`) and left a file in its room. The owner then aimed
the job at a group (`hermit cron edit --announce`): its next run read both back and its reply went to the group.
Each run has a fresh session, but the notes and the room are the audience's, and that audience is the job's
whatever its target. Now a new target (or agent, or removal) retires them: the notes become owner-only, the
room moves aside.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hermit.memory.policy.audience import OWNER, line_audiences
from hermit.messages import ToolResultMessage, UserMessage
from hermit.models.base import ModelRequest
from hermit.scheduler import CronJobs
from hermit.testing.scripted import Reply
from schedhelpers import Rig, rig, tick_once

NOW = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
LOG = "memory/2026-06-01.md"
OWNER_DM = {"mode": "announce", "channel": "telegram", "to": "1000"}
GROUP = {"mode": "announce", "channel": "telegram", "to": "-100", "peer_kind": "group"}


def reply(req: ModelRequest) -> Reply:
    """The job's model: the first run keeps what it was told, a later one reads back what is there."""
    last = req.messages[-1]
    if isinstance(last, UserMessage) and "KEEP" in last.text:
        return {"tool_calls": [
            {"name": "write", "arguments": {"path": LOG, "content": "- locker code 4821", "append": True}},
            {"name": "write", "arguments": {"path": "scratch.txt", "content": "bank: ING, account ending 7781"}}]}
    if isinstance(last, UserMessage) and "RECALL" in last.text:
        return {"tool_calls": [{"name": "read", "arguments": {"path": LOG}},
                               {"name": "read", "arguments": {"path": "scratch.txt"}}]}
    if isinstance(last, ToolResultMessage):
        return "Results: " + " | ".join(str(m.content) for m in req.messages if isinstance(m, ToolResultMessage))
    return "ok"


def kept_for_the_owner(tmp_path: Path) -> tuple[Rig, str, Path]:
    home = tmp_path / "home"
    r = rig(home, NOW, reply, owners=("1000",), access={"groups": ["-100"]})  # the group re-aimed at is let in
    by_model = CronJobs(home, r.loaded, clock=r.clock, fsync=False, for_model=True)
    job = by_model.add({"name": "locker", "message": "KEEP: note the locker code 4821 for me",
                        "schedule": {"kind": "every", "every_ms": 3_600_000}, "delivery": OWNER_DM})["job"]
    assert job["delivery"]["owner_only"]
    tick_once(r.service, r.clock, NOW + timedelta(hours=1, seconds=1))
    [(to, text)] = r.channel.sent
    assert to.peer_id == "1000" and "added a note" in text and "created scratch.txt" in text
    return r, job["id"], home


def test_a_job_re_aimed_at_a_group_does_not_read_back_what_it_kept_for_the_owner(tmp_path: Path) -> None:
    r, job_id, home = kept_for_the_owner(tmp_path)
    owner = CronJobs(home, r.loaded, clock=r.clock, fsync=False)
    out = owner.update(job_id, {"message": "RECALL: post the weekly reminder", "delivery": GROUP})
    assert out["job"]["delivery"] == GROUP  # the owner's choice: no owner_only left
    assert any(LOG in x for x in out["retired"]) and any("rooms/retired/" in x for x in out["retired"])
    tick_once(r.service, r.clock, NOW + timedelta(hours=2, seconds=2))
    [(to, text)] = r.channel.sent[1:]
    assert to.peer_kind == "group" and to.peer_id == "-100"
    assert "4821" not in text and "7781" not in text and "not found" in text
    # The note is still there for the owner, labelled as the job's (never the owner's own words).
    log = (r.loaded.agent().workspace / LOG).read_text()
    assert "4821" in log and 'session="cron:' in log
    assert line_audiences(log, LOG)[log.split("\n").index("- locker code 4821")] == OWNER


def test_a_retime_keeps_what_the_job_kept_and_the_model_cannot_re_aim_it(tmp_path: Path) -> None:
    r, job_id, home = kept_for_the_owner(tmp_path)
    owner = CronJobs(home, r.loaded, clock=r.clock, fsync=False)
    out = owner.update(job_id, {"message": "RECALL it", "schedule": {"kind": "every", "every_ms": 7_200_000}})
    assert "retired" not in out
    by_model = CronJobs(home, r.loaded, clock=r.clock, fsync=False, for_model=True)
    try:
        by_model.update(job_id, {"delivery": GROUP})
    except Exception as e:  # noqa: BLE001 - JobError, checked by its text
        assert "delivers replies only to an owner" in str(e)
    else:
        raise AssertionError("the cron tool re-aimed a job at a group")
    tick_once(r.service, r.clock, NOW + timedelta(hours=3, seconds=2))
    [(to, text)] = r.channel.sent[1:]
    assert to.peer_id == "1000" and "4821" in text and "7781" in text  # same audience: the owner's job still


def test_a_removed_jobs_id_given_again_starts_with_nothing(tmp_path: Path) -> None:
    r, job_id, home = kept_for_the_owner(tmp_path)
    owner = CronJobs(home, r.loaded, clock=r.clock, fsync=False)
    owner.remove(job_id)
    owner.add({"id": job_id, "message": "RECALL", "schedule": {"kind": "every", "every_ms": 3_600_000},
               "delivery": GROUP})
    tick_once(r.service, r.clock, NOW + timedelta(hours=2, seconds=2))
    [(to, text)] = r.channel.sent[1:]
    assert to.peer_id == "-100" and "4821" not in text and "7781" not in text
