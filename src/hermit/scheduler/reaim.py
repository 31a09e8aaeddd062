"""A job aimed at a new audience starts afresh: what its runs kept for the old one is retired.

An isolated job's runs read and write as the audience `cron:<jobId>` (memory/policy/audience.py): the notes
they add to a daily log and the files of their room (tools/rooms.py) are kept for the job's next runs.
That audience means "whoever the job's replies reach". A job that announced to the owner (the cron tool's
`owner_only` jobs: the model writes their message from what the main session knows) and is then aimed at a
group or a contact would otherwise hand its next runs — whose replies now go there — what the earlier runs
kept for the owner: "note the locker code 4821", quoted into the group. So when the owner gives a job
another target or agent (`hermit cron edit --announce`, the web app), or removes it (an id can be given
again), its notes become owner-only (their blocks keep the job's session, so they stay labelled as the job's
words, never the owner's) and its room is moved aside to `rooms/retired/`, where no session looks. The job's
next run starts with nothing but its message, shared notes, and what it writes from then on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from datetime import datetime
from pathlib import Path

from hermit.config.load import LoadedConfig
from hermit.durable import write_atomic
from hermit.locks import locked
from hermit.memory.policy.audience import OWNER, audience_of_session, block_audience, is_private_path
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.policy.provenance import MARKER, OPEN_RE, open_line, origin_blocks
from hermit.sessions.keys import cron_session_key
from hermit.textfile import decode_text, read_regular
from hermit.tools.room_journal import finish_held
from hermit.tools.rooms import room_audience, room_slug

RETIRED_ROOMS = "retired"


def retire_job_audience(loaded: LoadedConfig, agent_id: str, job_id: str, now: datetime) -> list[str]:
    """Make what job `job_id`'s isolated runs kept owner-only: its notes' blocks in the agent's memory files
    and its room. Returns what was retired (memory files changed, the room moved). OSError when a file or
    the room cannot be changed (the caller says so: the next run must not read them)."""
    agent = loaded.agent(agent_id)
    key = cron_session_key(job_id)
    audience = audience_of_session(key)
    # The room first: a run in flight adds a note only while its turn's room is where it was (tools/rooms.py
    # Room.still_held), so a note added before the move is in the files the next step retires, and one after is refused.
    room = _retire_room(agent.sessions_dir.parent / "rooms", room_audience(key), now)
    done = [f"{rel} (notes made owner-only)" for rel in _retire_notes(agent.workspace, audience)]
    if room is not None:
        done.append(f"{room} (its room, moved aside)")
    return done


def _memory_files(workspace: Path) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    root = workspace / "memory"
    for folder, dirs, files in os.walk(root):  # symlinked folders are not entered
        rel_dir = Path(folder).relative_to(workspace).as_posix()
        dirs[:] = [d for d in dirs if not is_private_path(f"{rel_dir}/{d}/")]
        for name in files:
            rel = f"{rel_dir}/{name}"
            if name.lower().endswith(".md") and not is_private_path(rel):
                out.append((rel, Path(folder) / name))
    return out


def _retired(text: str, audience: str) -> str | None:
    """`text` with the open markers of `audience`'s blocks saying audience="owner", or None if it has none."""
    if MARKER not in text:
        return None
    lines = text.split("\n")
    changed = False
    for b in origin_blocks(text):
        line = lines[b.start - 1]
        if block_audience(b.origin) == audience and OPEN_RE.match(line.strip()):
            lines[b.start - 1] = open_line(dataclasses.replace(b.origin, audience=OWNER))
            changed = True
    return "\n".join(lines) if changed else None


def _retire_notes(workspace: Path, audience: str) -> list[str]:
    changed: list[str] = []
    needle = f'audience="{audience}"'
    for rel, path in _memory_files(workspace):
        with contextlib.suppress(FileNotFoundError):
            first = decode_text(read_regular(path)).text
            if needle not in first and 'session="cron:' not in first:  # (blocks written before audiences)
                continue
            with memory_writes_locked(workspace, path):
                text = decode_text(read_regular(path)).text
                new = _retired(text, audience)
                if new is not None:
                    write_atomic(path, new)
                    changed.append(rel)
    return changed


def _retire_room(base: Path, audience: str, now: datetime) -> str | None:
    slug = room_slug(audience)
    room = base / slug
    if not room.is_dir():
        return None
    with locked(base / f".{slug}.lock"):
        # A merge a stopped Hermit left: finished into this room before it goes, never into the next one of its
        # name (the job's new audience), and nothing kept for its chat is told to that one.
        finish_held(base, slug, moving_to=None)
        if not room.is_dir():
            return None
        retired = base / RETIRED_ROOMS
        retired.mkdir(mode=0o700, exist_ok=True)
        dest = retired / f"{slug}.{now.strftime('%Y%m%dT%H%M%S%f')}"
        os.rename(room, dest)
    return f"rooms/{RETIRED_ROOMS}/{dest.name}"
