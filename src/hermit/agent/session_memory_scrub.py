"""What /new saved of a session (agent/session_memory.py) loses a message its sender deleted or edited afterwards.

In the saved file(s) of that session — memory/YYYY-MM-DD-*.md dated from the day before the message, a block whose
header names the session id — the message as the hook wrote it becomes the placeholder every reader sees (or the
edited text, marked), and the assistant's messages and the title there lose their copies of it by the copy rule the
transcript's scrub used (sessions/scrub.py). A file name holding a copy is renamed. Callers: agent/deleted_copies.py
(a delete or edit the runtime handles) and gateway/scrub_batch.py (the batch after an acknowledged delete).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import stat
from collections.abc import Callable, Sequence
from datetime import timedelta, tzinfo
from pathlib import Path

from hermit.agent.session_memory import (
    MAX_SAVED_SCAN,
    MESSAGE_START,
    Line,
    dialogue_line,
    read_small,
    render_dialogue,
)
from hermit.durable import write_atomic
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.policy.provenance import Origin, neutralize, origin_blocks
from hermit.redaction import mask
from hermit.sessions.entries import EDITED_MARK, RETRACTED_TEXT
from hermit.sessions.scrub import Verbatim
from hermit.sessions.transcript import MessageEntry, parse_timestamp

log = logging.getLogger("hermit.agent")


def scrub_saved(workspace: Path, session_id: str, deleted: Sequence[MessageEntry], tz: tzinfo, *,
                edited: str | None = None, rule: Verbatim | None = None) -> list[Path]:
    """A message its sender deleted (or, `edited`, edited to that text) after its session was saved at /new: in
    the saved file(s) of that session (memory/YYYY-MM-DD-*.md dated from the day before the message, a block whose
    header names the session id) each message of the saved conversation that is exactly the deleted one, as the
    hook wrote it, becomes the placeholder every other reader sees (the edited text, marked as every reader sees
    it), and the assistant's messages and the title there lose their copies of it: by `rule`, the copy rule its
    transcript's scrub used (sessions/scrub.py; an edit's keeps what the new text still says), else one made of
    the deleted text and the block's user messages. Text the owner edited since is not recognised and is left
    (logged). The files changed."""
    shown = RETRACTED_TEXT if edited is None else mask(edited).strip() + EDITED_MARK
    # a message that is the placeholder already (deleted again: a webhook retried, a revoke sent twice) has nothing
    # to take out; until s18 its look at the saved file said it was left
    lines = [(line, dataclasses.replace(line, text=shown)) for e in deleted
             if (line := dialogue_line(e)) is not None and line.text not in (RETRACTED_TEXT, shown)]
    directory = workspace / "memory"
    if not lines:
        return []
    moment = parse_timestamp(deleted[0].timestamp)
    since = (moment.astimezone(tz).date() - timedelta(days=1)).isoformat() if moment is not None else ""
    name = re.compile(r"(\d{4}-\d{2}-\d{2})-.+\.md")
    try:
        names = sorted(n for n in os.listdir(directory) if (m := name.fullmatch(n)) and m.group(1) >= since)
    except OSError:
        return []
    changed = []
    with memory_writes_locked(workspace, directory):
        for file_name in names[:MAX_SAVED_SCAN]:
            path = directory / file_name
            text = read_small(path)
            if text is None or session_id not in text or "<!-- origin" not in text:
                continue
            scrubbed = _scrubbed(text, session_id, lines, rule)
            if scrubbed == text:
                if _holds_copy(text, session_id, rule or Verbatim(tuple(old.text for old, _ in lines))):
                    log.warning("session-memory: %s names session %s, but not the deleted message as saved: left",
                                file_name, session_id)
                continue  # else taken out already (retract_ended's look, then the scrub batch's): nothing left
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                continue
            write_atomic(path, scrubbed, mode=stat.S_IMODE(st.st_mode))
            changed.append(_renamed(path, rule or Verbatim(tuple(old.text for old, _ in lines))))
    return changed


def _renamed(path: Path, rule: Verbatim) -> Path:
    """`path` renamed when a word of its name is a copy (the slug a model chose may quote a code): that word
    becomes `deleted`, the date and the rest kept; never over another file (`-2`, … as the hook names them)."""
    words = path.stem.split("-")
    clean = words[:3] + ["deleted" if rule.scrub(w)[1] else w for w in words[3:]]
    if clean == words:
        return path
    for n in range(1, 100):
        new = path.with_name("-".join(clean) + ("" if n == 1 else f"-{n}") + ".md")
        try:
            os.link(path, new, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError as e:  # a file system without hard links: the name stays (the text is scrubbed)
            log.warning("session-memory: could not rename %s, whose name holds a deleted message's copy: %s",
                        path.name, e)
            return path
        os.unlink(path)
        return new
    return path


def _scrubbed(text: str, session_id: str, lines: Sequence[tuple[Line, Line]], given: Verbatim | None = None) -> str:
    """`text` with each saved message of session `session_id` that is one of `lines`' first replaced by its
    second, rendered as the hook renders it in that block (render_dialogue, neutralized for its origin), and the
    copies of the first in that block's assistant messages and title scrubbed (by `given`, else by a rule made
    of the first and the block's user messages)."""
    rows = text.split("\n")
    for b in reversed(origin_blocks(text)):
        header = rows[b.start:b.end - 1]
        header = header[:header.index("## Conversation")] if "## Conversation" in header else []
        if neutralize(f"- Session id: {session_id}", b.origin) not in header:
            continue
        block = "\n".join(rows[b.start:b.end - 1]) + "\n"

        def clean(line: str, origin: Origin = b.origin) -> str:
            return neutralize(line, origin)

        for old, new in lines:
            said, placeholder = render_dialogue([old], clean=clean), render_dialogue([new], clean=clean)
            # a whole message: after the blank line before it, up to the blank line after it or the block's end
            block = re.compile(re.escape("\n\n" + said) + r"(?=\n\n|\n\Z)").sub(_as("\n\n" + placeholder), block)
        # the assistant's messages quoting it: their copies of it (sessions/scrub.py's rule), the rest kept — and
        # what another message of the block holds too is no copy (a member quoting the owner, then deleting it)
        messages = MESSAGE_START.split(block)
        rule = given or Verbatim(tuple(old.text for old, _ in lines), [m for m in messages[1:] if m.startswith("User")])
        block = "\n\n".join(rule.scrub(m)[0] if m.startswith("Assistant: ") else m for m in messages)
        if block.startswith("# Session "):  # the title names the topic (a model's slug may quote a code)
            title, rest = block.split("\n", 1)
            block = rule.scrub(title)[0] + "\n" + rest
        rows[b.start:b.end - 1] = block[:-1].split("\n")
    return "\n".join(rows)


def _holds_copy(text: str, session_id: str, rule: Verbatim) -> bool:
    """Whether a block of `text` naming session `session_id` still holds a copy of the deleted message by `rule`
    anywhere — a user message too (the message as the owner edited it, not recognised to be replaced): what a
    scrub that changed nothing has really left."""
    rows = text.split("\n")
    for b in origin_blocks(text):
        if neutralize(f"- Session id: {session_id}", b.origin) in rows[b.start:b.end - 1] and \
                rule.scrub("\n".join(rows[b.start:b.end - 1]))[1]:
            return True
    return False


def _as(text: str) -> Callable[[re.Match[str]], str]:
    """A replacement that is `text` itself (no backslash or group reference read in it)."""
    return lambda _m: text
