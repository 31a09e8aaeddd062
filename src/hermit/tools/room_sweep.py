"""Every room whole before anything looks at the rooms: what a stopped Hermit left, finished at once.

A merge killed part-way (room_journal.py) is finished by its room's next use — which may be days later, while the
owner's own tools see the rooms folder meanwhile: an owner's command on the host, `hermit backup`'s archive, a
copy made by hand. So a gateway finishes every room's left merge when it starts (cli/gateway.py), before any turn
runs, and `hermit backup` before it walks the state dir: `finish_left` takes each room's lock without waiting (a
room another live Hermit holds is that Hermit's to finish: it is merging into it now), carries out what its carry
folder holds (or drops it when its room is gone), and removes the staging folders of processes that died before
their merge began (nothing was touched). What happened is kept for each chat and said by its next exec or file
tool, once (room_journal.told).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from hermit.errors import HermitError
from hermit.locks import LockFile
from hermit.tools.room_journal import finish_held
from hermit.tools.room_unpack import sweep_staging

log = logging.getLogger("hermit.rooms")
CARRY_SUFFIX = ".carry"


def finish_left(rooms_dir: Path) -> list[str]:
    """Finish every merge a stopped Hermit left in `rooms_dir` (an agent's rooms folder). Returns the rooms (slugs)
    whose merge was finished now."""
    try:
        names = sorted(os.listdir(rooms_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:  # never stops a start: each room's next use still finishes its own
        log.warning("the rooms folder %s could not be read (%s): a merge a stopped Hermit left is finished by its "
                    "room's next use", rooms_dir, e.strerror or e)
        return []
    with contextlib.suppress(OSError):
        sweep_staging(rooms_dir)
    finished: list[str] = []
    for name in names:
        if not (name.startswith(".") and name.endswith(CARRY_SUFFIX)):
            continue
        slug = name[1:-len(CARRY_SUFFIX)]
        if not slug or slug.startswith("."):
            continue
        try:
            lock = LockFile.try_acquire(rooms_dir / f".{slug}.lock")
        except (OSError, HermitError) as e:
            log.warning("room %s: a merge left part-way was not finished now (%s); its next use finishes it",
                        slug, e)
            continue
        if lock is None:  # a live Hermit holds the room: merging into it now, it finishes its own
            continue
        with lock:
            try:
                if finish_held(rooms_dir, slug):
                    finished.append(slug)
            except (OSError, HermitError) as e:
                log.warning("room %s: a merge left part-way could not be finished now (%s); its next use "
                            "tries again", slug, e)
    if finished:
        log.info("finished the merge a stopped Hermit left in %d room(s) of %s", len(finished), rooms_dir)
    return finished


def finish_agents(rooms_dirs: list[Path]) -> list[str]:
    """`finish_left` for each agent's rooms folder."""
    return [slug for d in rooms_dirs for slug in finish_left(d)]
