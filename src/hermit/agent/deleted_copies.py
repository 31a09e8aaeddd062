"""A deleted message's copies outside its transcript, for the agent runtime (agent/runtime.py): the notes its
session's turns and memory flush wrote (agent/flush.py `scrub_flush_notes`), and what /new saved of its session
when that session has ended (agent/session_memory_scrub.py `scrub_saved`). Both go by the copy rule its transcript's scrub
uses (sessions/scrub.py `Deleted.rule`: only what the deleted message alone brought into its session is a copy), so
a file never loses words the transcript keeps, such as the assistant's own earlier answer the user repeated."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import tzinfo
from pathlib import Path

from hermit.agent.flush import scrub_flush_notes
from hermit.agent.session_memory_scrub import scrub_saved
from hermit.errors import HermitError
from hermit.sessions.entries import MessageEntry
from hermit.sessions.scrub import Deleted, find_deleted

log = logging.getLogger("hermit.agent")


def scrub_turn_notes(workspace: Path, session_key: str, deleted: Deleted, changed: Callable[[], None]) -> None:
    """The notes `session_key`'s turns and flush wrote after the deleted message (its `note_calls`), scrubbed
    before its transcript is; `changed()` after each note changed (the index re-syncs)."""
    for call in deleted.note_calls:  # one at a time: a note that cannot be scrubbed never keeps the others'
        try:
            if scrub_flush_notes(workspace, session_key, dataclasses.replace(deleted, note_calls=(call,))):
                changed()
        except Exception as e:  # noqa: BLE001 - the transcript is scrubbed all the same; that note says it still
            log.warning("could not take a deleted message out of a note %s's turn wrote (%s): %s", session_key,
                        type(e).__name__, e if isinstance(e, (HermitError, OSError)) else "")


def scrub_saved_session(workspace: Path, transcript: Path, session_id: str, ref: str,
                        entries: Sequence[MessageEntry], tz: tzinfo, changed: Callable[[], None]) -> None:
    """What /new saved of the ended session `session_id` (whose transcript is `transcript`, its message `ref` not
    retracted yet: `entries` as they were) loses the message and its copies, by the rule the transcript's scrub
    will use; made of the message and the saved block's user messages only when the transcript cannot be read."""
    try:
        found = find_deleted(transcript, ref)
    except (HermitError, OSError) as e:
        log.warning("could not read %s for a deleted message's copies: %s", transcript.name, e)
        found = None
    try:
        if scrub_saved(workspace, session_id, list(entries), tz, rule=found.rule if found is not None else None):
            changed()
    except (HermitError, OSError) as e:  # the transcript is retracted all the same; the file says it still
        log.warning("could not take a deleted message out of session %s's saved file: %s", session_id, e)
