"""A deleted (or edited) message's copies in the owner's own notes: MEMORY.md and memory/private/.

Those files are owner-only whole, so the main session writes them without origin blocks (tools/memory_files.py),
and the scrub of the notes a turn or the flush wrote (agent/flush.py `scrub_flush_notes`) finds a session's lines
by its blocks: an owner who told the main session a code, which the answering turn put in MEMORY.md, and then
deleted the message kept the code there, for every later turn's prompt and for search.

Which lines: only those the main session's own write and edit calls after the message wrote (sessions/scrub.py
`note_calls`; a call whose result was an error wrote nothing and is not one): an append's text, an edit's new text
less the lines its old text had, a whole rewrite's content less the lines the note had before it (the version the
rewrite kept in memory-history: MEMORY.md's, and since t9 a private note's, tools/memory_files.py rule 2; every line
of a rewrite that created the file, its result says). A rewrite whose earlier text is not known — its kept version
gone (the owner cleared memory-history) — is left, and the log says a copy may be there: its every line taken for the
turn's scrubbed the owner's own line that held the same code before the message (until s18). Each such line holding
a copy (sessions/verbatim.py's rule) is replaced, where the file holds it whole, by its scrubbed form — in the note
and in every earlier version of it kept in memory-history (the web app offers MEMORY.md's back) — as many times as
the calls wrote
it (the last such rows: a row the owner had with the same words, which a call noting it again only repeated, keeps
them), and every other line is left as it is, the owner's own words among them. Only the main session's calls
count: another session writes in its room (tools/views.py), and a path it named is not the workspace's.

How: under the memory-write lock (memory/policy/daily_log.py) that the web app's MEMORY.md save holds while it
compares the owner's starting text (its sha256) with the file and writes: a save the owner began from the text
before the scrub is refused (the page says the file changed; the owner's text stays in their editor), one that
came first is read and scrubbed. An outside editor holds no lock: the file is read again right before it is
replaced, and a save made since the scrub's read is scrubbed in turn rather than overwritten (`scrub_file`, which
agent/flush.py's scrub of daily notes uses too). The
file is replaced atomically (durable.write_atomic: a kill leaves the old file or the new one), keeping its mode;
never through a link, never a hard-linked or another user's file. The scrub keeps
no version of its own in memory-history (that would keep the copy).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermit.durable import write_atomic
from hermit.errors import HermitError
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.policy.privacy import long_term_file
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.scrub import CREATED, Deleted
from hermit.textfile import read_regular_stat
from hermit.tools.memory_files import private_history

log = logging.getLogger("hermit.agent")

HISTORY_DIR = "memory-history"  # in the agent's folder, beside its sessions/ (agent/runtime.py's history_dir)
ATTEMPTS = 5  # reads of a note an outside editor keeps saving during its scrub, before it is left
MAX_VERSIONS = 200  # a note's kept versions read to find what a whole rewrite kept
_KEPT = re.compile(r"\d{8}T\d{12}Z(-\d+)?\.md")  # a private note's kept version's name (tools/memory_files.py)


def owner_file(arguments: dict[str, Any], workspace: Path) -> Path | None:
    """The owner's note a write or edit call names — MEMORY.md, or a .md file under memory/private/ — or None."""
    path = arguments.get("path")
    if not isinstance(path, str) or "\x00" in path:
        return None
    try:
        target = (workspace / path).resolve()
        memory = long_term_file(workspace).resolve()
        private = (workspace / "memory" / "private").resolve()
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
        return None
    if target == memory or (target.suffix == ".md" and target.is_relative_to(private) and target != private):
        return target
    return None


def written_lines(name: str, arguments: dict[str, Any], before: str | None = None) -> list[str]:
    """The lines a write (its content: appended, or the whole file less the lines `before`, the file's text before
    it, had) or an edit (its new text's lines that its old text did not have) put in the file."""
    if name == "write":
        content = arguments.get("content")
        had = set() if before is None or arguments.get("append") else {line.strip() for line in before.splitlines()}
        return [line for line in content.splitlines() if line.strip() not in had] if isinstance(content, str) else []
    new, old = arguments.get("new"), arguments.get("old")
    if not isinstance(new, str):
        return []
    had = {line.strip() for line in old.splitlines()} if isinstance(old, str) else set()
    return [line for line in new.splitlines() if line.strip() not in had]


def scrub_owner_notes(workspace: Path, session_key: str, deleted: Deleted) -> dict[Path, int]:
    """Copies of `deleted` in the lines the main session's calls wrote to the owner's notes (see the module); the
    files changed, and how many lines in each."""
    if not is_main_session_key(session_key):
        return {}
    memory_md = long_term_file(workspace).resolve()
    # MEMORY.md's earlier versions (tools/memory_files.py keeps one at each rewrite; the web app offers them back)
    history = deleted.transcript.parent.parent / HISTORY_DIR if deleted.transcript is not None else None
    wanted: dict[Path, dict[str, tuple[str, int]]] = {}  # file -> line -> (its scrubbed form, times written)
    with memory_writes_locked(workspace, memory_md):  # MEMORY.md and its versions as one: no rewrite between
        for name, arguments in deleted.note_calls:
            target = owner_file(arguments, workspace)
            if target is None:
                continue
            before = None
            if name == "write" and not arguments.get("append"):  # a whole rewrite: its lines less those before it
                before = "" if arguments.get(CREATED) else \
                    _before(_versions(history, workspace, target), target, arguments, deleted)
                if before is None:  # the file's text before it is not known: no line can be told the turn's
                    _unknown(target, arguments, deleted)
                    continue
            for line in written_lines(name, arguments, before):
                clean, n = deleted.rule.scrub(line)
                if n and line.strip():
                    lines = wanted.setdefault(target, {})
                    lines[line.strip()] = (clean.strip(), lines.get(line.strip(), ("", 0))[1] + 1)
        for target in list(wanted):  # the earlier versions kept of each (the web app offers MEMORY.md's back)
            for version in _versions(history, workspace, target):
                wanted[version] = wanted[target]
        return _scrubbed(workspace, wanted)


def _unknown(target: Path, arguments: dict[str, Any], deleted: Deleted) -> None:
    """A whole rewrite of `target` whose text before it is not known (its kept version is gone, or was never kept:
    a private note rewritten before s18 kept them): its lines holding a copy may be the owner's own, which the rewrite
    only kept, so none is scrubbed — said, when there is one, for the owner to look at."""
    content = arguments.get("content")
    if isinstance(content, str) and any(deleted.rule.scrub(line)[1] for line in content.splitlines()):
        log.warning("owner notes: %s was rewritten whole after a deleted message, and its text before that is not "
                    "known, so its lines cannot be told from the owner's own: a copy of the message may be left "
                    "there (look for it)", target.name)


def _scrubbed(workspace: Path, wanted: dict[Path, dict[str, tuple[str, int]]]) -> dict[Path, int]:
    """Each file of `wanted` with its rows that are one of its keys (stripped) replaced by the key's scrubbed form: the
    last rows, as many as the calls wrote it. The rows are equal, so which of them is the owner's does not matter:
    the file keeps as many unscrubbed as it held beyond the calls' (before, each call noting the owner's own line
    again scrubbed it from the owner's row too)."""
    changed: dict[Path, int] = {}
    if not wanted:
        return changed
    with memory_writes_locked(workspace, *wanted):
        for target, lines in wanted.items():
            if count := _scrub_file(target, lines):
                changed[target] = count
    for target, count in changed.items():
        log.info("owner notes: scrubbed a deleted message from %d line(s) of %s", count, target.name)
    return changed


def _scrub_file(target: Path, lines: dict[str, tuple[str, int]]) -> int:
    """`target` with `lines` scrubbed (`_scrubbed`), replaced atomically (`scrub_file`); how many rows changed."""
    def rewrite(text: str) -> tuple[str, int]:
        rows = text.split("\n")
        count = 0
        for line, (clean, times) in lines.items():
            for i in [i for i, row in enumerate(rows) if row.strip() == line][-times:]:
                rows[i] = rows[i].replace(line, clean)
                count += 1
        return "\n".join(rows), count
    return scrub_file(target, rewrite, "owner notes")


def scrub_file(target: Path, rewrite: Callable[[str], tuple[str, int]], what: str) -> int:
    """`target` as `rewrite` makes it from its text (the new text and how many rows it changed), replaced atomically;
    how many rows changed. An outside editor, which holds no lock, may save the file between this read and the
    replace: the file is read again right before the replace and, when it is not what was read (its inode, size,
    mtime or bytes), rewritten again from what it holds now — the editor's save is kept and the deleted text still
    goes. Left (and said, `what` naming the scrub in the log) when it keeps changing. The caller holds the
    memory-write lock; Hermit's own writers wait on it."""
    for _ in range(ATTEMPTS):
        read = _own_text(target, what)
        if read is None:
            return 0
        text, seen = read
        new, count = rewrite(text)
        if not count:
            return 0
        again = _own_text(target, what)
        if again is None or again[1] != seen:  # saved (or removed) since the read: scrub what it holds now
            continue
        write_atomic(target, new)
        return count
    log.warning("%s: %s kept changing while a deleted message was scrubbed from it: left (the next delete "
                "or edit of a message scrubs it again)", what, target.name)
    return 0


def _own_text(target: Path, what: str) -> tuple[str, tuple[int, int, int, str]] | None:
    """`target`'s text and what tells a save of it apart (inode, size, mtime_ns, sha256), read never through a link
    and only when it is Hermit's own file with one name; None (said) when it is not, or is gone."""
    try:
        data, st = read_regular_stat(target, follow=False)
        if st.st_nlink != 1 or st.st_uid != os.geteuid():
            log.warning("%s: %s is not a file of Hermit's own: left", what, target.name)
            return None
        return data.decode("utf-8"), (st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest())
    except FileNotFoundError:  # removed since
        return None
    except (OSError, HermitError, UnicodeDecodeError) as e:
        log.warning("%s: could not read %s to scrub a deleted message: %s", what, target.name, e)
        return None


def _versions(history: Path | None, workspace: Path, note: Path) -> list[Path]:
    """The kept versions of `note` — MEMORY.md's (`MEMORY-<UTC time>[-n].md` in memory-history), a memory/private/
    note's (`<UTC time>[-n].md` in its folder there, tools/memory_files.py `private_history`) — oldest first; none
    when there is no such folder."""
    if history is None:
        return []
    if note == long_term_file(workspace).resolve():
        folder, prefix = history, "MEMORY-"
    elif (found := private_history(history, workspace, note)) is not None:
        folder, prefix = found, ""
    else:
        return []

    def order(path: Path) -> tuple[str, int]:
        stamp, _, n = path.stem.removeprefix(prefix).partition("-")
        return stamp, int(n) if n.isdigit() else 0
    try:
        return sorted((p for p in folder.glob(f"{prefix}*.md") if (prefix or _KEPT.fullmatch(p.name))
                       and p.is_file() and not p.is_symlink()), key=order)
    except OSError:
        return []


def _before(versions: list[Path], note: Path, arguments: dict[str, Any], deleted: Deleted) -> str | None:
    """`note`'s text before a write that rewrote it whole with `arguments`' content: the kept version (`versions`)
    that rewrite left (the one the next version, or the file now, follows with that content — as `deleted`'s scrub
    leaves both: an earlier call of the turn, scrubbed first, may have changed them), or None when none is known (the
    write is then left: `_unknown`)."""
    content = arguments.get("content")
    if arguments.get("append") or not isinstance(content, str):
        return None
    versions = versions[-MAX_VERSIONS:]
    texts = [_text(p) for p in (*versions, note)]
    wrote = _scrubbed_rows(content, deleted)
    for i in range(len(versions) - 1, -1, -1):
        after = texts[i + 1]
        if after == content or (after is not None and _scrubbed_rows(after, deleted) == wrote):
            return texts[i]
    return None


def _scrubbed_rows(text: str, deleted: Deleted) -> list[str]:
    return [deleted.rule.scrub(row.strip())[0] for row in text.split("\n")]


def _text(path: Path) -> str | None:
    try:
        return read_regular_stat(path, follow=False)[0].decode("utf-8")
    except (OSError, HermitError, UnicodeDecodeError):
        return None
