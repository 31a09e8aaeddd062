"""Who may read a memory note (its audience), who is reading (a Reader), and what of memory a reader may see.

Every line of a memory file has one audience:

- `"owner"`: only the owner (the main session, the local CLI, the web chat, MCP with
  `mcp.share_private_memory: true`). MEMORY.md, HEARTBEAT.md (the owner's checklist), everything under
  `memory/private/` and the files of `extra_paths` outside `memory/` are owner-only whole, and so is any
  origin block with `audience="owner"`: what the main session writes.
- `"shared"`: every reader of this agent's memory. Hand-written text outside blocks elsewhere under
  `memory/` is shared, as in the original design (daily logs are shared).
- a non-main session's key (`audience_of_session`): `telegram:group:-100123` (its threads and topics
  too), `slack:channel:C1`, `telegram:dm:42` (`dm:42` for dm_scope per-peer), `cron:<jobId>`,
  `subagent:<runId>`, `mcp`. Text in such a block is seen by that audience and the owner.

Inside a file the audience is carried by origin blocks (memory/policy/provenance.py); a block written before
audiences existed takes it from its `session` attribute. Anything that does not parse fails closed:
it gets `"unknown"`, an audience that no reader but the owner matches.

A non-owner reader sees shared text and text of its own audience, never MEMORY.md, `memory/private/`,
an extra path's file, a hard-linked file (it may be MEMORY.md under another name, memory/policy/privacy.py) nor session transcripts.
`visible_text` renders a file for a reader with withheld lines replaced (line numbers stay put);
`AudienceMap` (memory/policy/audience_map.py) decides which indexed chunks a reader may see and labels search
results;
`memory_view` is the whole of memory a reader may see, for the OS sandbox to show.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.errors import SessionError
from hermit.memory.index.chunking import MARKER
from hermit.memory.index.sources import list_memory_files
from hermit.memory.policy.privacy import file_identity
from hermit.memory.policy.provenance import (
    Origin,
    OriginBlock,
    marker_damage,
    origin_blocks,
)
from hermit.sessions.keys import SessionKind, is_main_session_key, parse_session_key
from hermit.textfile import decode_text
from hermit.workspace import BOOTSTRAP_ORDER, MAIN_SESSION_FILES, MEMORY_FILE

OWNER = "owner"
SHARED = "shared"
MCP = "mcp"
UNKNOWN = "unknown"  # what does not parse: no reader but the owner matches it
MEMORY_DIR = "memory/"
PRIVATE_DIR = "memory/private/"
_MAIN_SESSION_NAMES = frozenset(n.lower() for n in MAIN_SESSION_FILES)  # MEMORY.md, HEARTBEAT.md: in any case
MAX_AUDIENCE_CHARS = 600
DEFAULT_MAX_FILE_BYTES = 5_000_000  # memory_search.max_file_bytes' default: the indexing cap
AUDIENCE_RULE = ("audience rule: owner-only notes (the main session's notes, memory/private/, MEMORY.md, "
                 "extra paths) and "
                 "notes of other chats are not shared with this chat")
WITHHELD_LINES = "[{n} line{s} withheld: not shared with this chat]"
# The one answer a reader other than the owner gets for a memory file it may see nothing of, missing or
# not (memory_get and the read tool alike, so neither can be played against the other to probe names).
NOT_FOUND_OR_NOT_SHARED = "file not found: {path} (or nothing in it is shared with this chat)"

_DAILY_LOG = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md", re.IGNORECASE)
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@+=-")
_ID = r"[A-Za-z0-9_.@+=%-]+"
_AUDIENCE_RE = re.compile(rf"(?:{OWNER}|{SHARED}|{MCP}|dm:{_ID}|cron:{_ID}|subagent:{_ID}"
                          rf"|[a-z0-9][a-z0-9_-]{{0,63}}:(?:group|channel|dm):{_ID})")


def _enc(value: str) -> str:
    """A platform id made safe inside a marker attribute and unambiguous after ':' (percent-encoded
    outside [A-Za-z0-9_.@+=-]; a '-' right after another too, since '--' may not appear in a comment)."""
    out: list[str] = []
    for ch in value:
        if ch in _SAFE and not (ch == "-" and out and out[-1] == "-"):
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
    return "".join(out)


def is_audience(value: str) -> bool:
    """A well-formed audience value (what a block's `audience` attribute may hold)."""
    return len(value) <= MAX_AUDIENCE_CHARS and "--" not in value and _AUDIENCE_RE.fullmatch(value) is not None


def audience_of_session(session_key: str) -> str:
    """The audience of what a session writes and may read: `"owner"` for the main session, the chat's
    key for the others (threads and topics share their group's), `"unknown"` for an unparseable key."""
    if session_key == MCP:
        return MCP
    try:
        key = parse_session_key(session_key)
    except SessionError:
        return UNKNOWN
    if key.kind is SessionKind.MAIN:
        return OWNER
    if key.kind in (SessionKind.GROUP, SessionKind.CHANNEL) and key.channel and key.peer_id:
        return f"{key.channel}:{key.kind.value}:{_enc(key.peer_id)}"
    if key.kind is SessionKind.DM and key.peer_id:
        # The account a DM came in on does not change who the person is: one audience per person.
        return f"{key.channel}:dm:{_enc(key.peer_id)}" if key.channel else f"dm:{_enc(key.peer_id)}"
    if key.kind is SessionKind.CRON and key.job_id:
        return f"cron:{_enc(key.job_id)}"
    if key.kind is SessionKind.SUBAGENT and key.run_id:
        return f"subagent:{_enc(key.run_id)}"
    return UNKNOWN


def block_audience(origin: Origin) -> str:
    """A block's audience: its attribute when well-formed, else derived from its session (fail closed)."""
    if origin.audience is not None:
        return origin.audience if is_audience(origin.audience) else UNKNOWN
    return audience_of_session(origin.session)


def owner_origin(session_key: str) -> Origin:
    """The origin of the main session's own notes: owner-only."""
    return Origin(session_key, audience=OWNER)


@dataclass(frozen=True)
class Reader:
    """Who is reading memory: the owner sees everything; anyone else shared text and its own audience's."""

    audience: str
    owner: bool = False

    def can_see(self, audience: str) -> bool:
        if self.owner:
            return True
        if audience == SHARED:
            return True
        return audience == self.audience and audience not in (OWNER, UNKNOWN) and is_audience(audience)


OWNER_READER = Reader(OWNER, owner=True)


def reader_for_session(session_key: str) -> Reader:
    """The reader a session's memory tools act for: the owner in the main session only (fails closed)."""
    return Reader(audience_of_session(session_key), owner=is_main_session_key(session_key))


def is_private_path(rel_path: str) -> bool:
    """Owner-only whole, by where the file is: the main session's own files (MEMORY.md, and HEARTBEAT.md, the
    owner's checklist: workspace.MAIN_SESSION_FILES, by name; callers check MEMORY.md's identity too), anything
    under memory/private/, and anything that is neither under memory/ nor an instruction file (AGENTS.md,
    USER.md…, whose lines go by their blocks) — the files of `extra_paths` (a notes folder, a vault: the owner's
    own, whoever else talks to the assistant). Decided on the normalised path, so no second spelling
    (`notes/../memory/private/x.md`, an absolute path through a symlinked workspace, `Memory/`) makes a private
    file shared: fail closed."""
    p = posixpath.normpath(rel_path.replace("\\", "/"))
    if p.lower() in _MAIN_SESSION_NAMES or p.lower().startswith(PRIVATE_DIR):  # in any case: fail closed
        return True
    # Shared only as spelled: `Memory/` is another folder (an extra path) where names are case-sensitive.
    return not p.startswith(MEMORY_DIR) and p not in BOOTSTRAP_ORDER  # instruction files: by their blocks


def default_audience(rel_path: str) -> str:
    """The audience of a file's text outside blocks, by where the file is."""
    return OWNER if is_private_path(rel_path) else SHARED


def line_audiences(text: str, rel_path: str, blocks: Sequence[OriginBlock] | None = None) -> list[str]:
    """The audience of every line of `text` (index 0 is line 1; `text.split("\\n")` lines)."""
    lines = text.count("\n") + 1
    default = default_audience(rel_path)
    out = [default] * lines
    if default == OWNER:  # an owner-only file stays owner-only whatever it says
        return out
    if marker_damage(text) is not None:  # no line can be said to be whose: the owner's alone to read
        return [UNKNOWN] * lines
    if MARKER not in text:
        return out
    for b in origin_blocks(text) if blocks is None else blocks:
        aud = block_audience(b.origin)
        for i in range(b.start - 1, min(b.end, lines)):
            out[i] = aud
    return out


def read_audiences(text: str, rel_path: str, blocks: Sequence[OriginBlock] | None = None) -> list[str]:
    """Who may read each line (`line_audiences`), with the text outside blocks of a note the owner's chat started
    (`started_by_owner`) owner-only. Readers go by this; the write rules (tools/memory_files.py) keep comparing
    `line_audiences`, so a write that makes such a file (an owner block at its top) is judged as before — this
    only ever narrows who reads."""
    out = line_audiences(text, rel_path, blocks)
    if MARKER not in text or default_audience(rel_path) == OWNER or UNKNOWN in out[:1]:  # damaged: all unknown
        return out
    found = origin_blocks(text) if blocks is None else blocks
    if not started_by_owner(text, rel_path, found):
        return out
    inside = {i for b in found for i in range(b.start - 1, min(b.end, len(out)))}
    return [a if i in inside else OWNER for i, a in enumerate(out)]


def started_by_owner(text: str, rel_path: str, blocks: Sequence[OriginBlock]) -> bool:
    """Whether a note's text outside blocks is the owner's too: the file is under memory/, is not a daily log
    (`memory/YYYY-MM-DD.md`, whose hand-written lines are shared as in the original design), and its first line
    opens an owner-only block — the owner's chat made it (a `write` of memory/health.md, the main session's /new
    file). A line the owner later typed into it by hand, after that block, was shared: "- biopsy next Tuesday"
    added in an editor to the notes the assistant kept for them reached every contact's and group's search. A
    file that starts with hand-written text keeps the rule for hand-written notes (shared)."""
    p = posixpath.normpath(rel_path.replace("\\", "/"))
    if not p.startswith(MEMORY_DIR) or _DAILY_LOG.fullmatch(p) or not blocks:
        return False
    first = next((i for i, line in enumerate(text.split("\n"), start=1) if line.strip()), None)
    return blocks[0].start == first and block_audience(blocks[0].origin) == OWNER


def narrowest(audiences: set[str]) -> str:
    """Who may see all of a passage: its one audience, shared text aside; the owner when several."""
    rest = audiences - {SHARED}
    if not rest:
        return SHARED
    if len(rest) == 1:
        only = next(iter(rest))
        return OWNER if only == UNKNOWN else only
    return OWNER


def _withheld(n: int) -> str:
    return WITHHELD_LINES.format(n=n, s="" if n == 1 else "s")


# `agent:<id>:` at the start of an origin marker's session: the agent id is the owner's name for a setup ("work",
# "alice-private"), which no chat is shown (agent/context.py); the rest of the key names the chat.
_AGENT_OF_SESSION = re.compile(r'(?<= session=")agent:[a-z0-9][a-z0-9_-]{0,63}:')


def unnamed(session: str) -> str:
    """A session key as a chat is shown it: without `agent:<id>:`."""
    return re.sub(r"^agent:[a-z0-9][a-z0-9_-]{0,63}:", "", session)


def unnamed_result(result: dict[str, Any]) -> dict[str, Any]:
    """A search result for a reader other than the owner: its origin's session, and the label before its
    snippet, without the agent id."""
    origin = result.get("origin")
    session = origin.get("session") if isinstance(origin, dict) else None
    if not isinstance(origin, dict) or not isinstance(session, str) or unnamed(session) == session:
        return result
    snippet = str(result.get("snippet", ""))
    if snippet.startswith("[written from "):
        snippet = snippet.replace(f"session {session}", f"session {unnamed(session)}", 1)
    return {**result, "origin": {**origin, "session": unnamed(session)}, "snippet": snippet}


def visible_text(text: str, rel_path: str, reader: Reader) -> str | None:
    """`text` (the file at `rel_path`) as `reader` may see it: each run of lines it may not see becomes
    one "[N lines withheld: …]" line and N−1 blank ones, so line numbers stay those of the file. None
    when the reader may see nothing of it (owner-only files, or every non-blank line withheld)."""
    if reader.owner:
        return text
    if is_private_path(rel_path):
        return None
    auds = read_audiences(text, rel_path)
    lines = text.split("\n")
    if text.endswith("\n"):
        auds[-1] = SHARED  # the empty "line" after the final newline
    out: list[str] = []
    seen = withheld = False
    i = 0
    while i < len(lines):
        if reader.can_see(auds[i]):
            line = lines[i]
            out.append(_AGENT_OF_SESSION.sub("", line, count=1) if line.lstrip().startswith(MARKER) else line)
            seen = seen or bool(lines[i].strip())
            i += 1
            continue
        j = i
        while j < len(lines) and not reader.can_see(auds[j]):
            j += 1
        out.append(_withheld(j - i))
        out.extend([""] * (j - i - 1))
        withheld, i = True, j
    if withheld and not seen:
        return None
    return "\n".join(out)


# How recently a file may have changed and still be cached: a write within the same tick of the kernel's
# coarse clock as the read leaves every stamp as it was (mtime and ctime come from that clock), so a file
# changed this recently is read again next time instead (as git does with "racily clean" entries).
RACY_NS = 2_000_000_000


def memory_view(workspace: Path, extra_paths: Sequence[str], reader: Reader, *,
                max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[tuple[str, bytes]]:
    """Every memory file `reader` may see anything of, as (workspace-relative path, content).

    Yields, sorted by path: each regular `.md` file under `memory/` (symlinked files and directories are
    skipped, never followed); for the owner also MEMORY.md and each file of a configured extra path that
    lies inside the workspace (an extra path outside it has no workspace-relative path and is not yielded). Content is the file's bytes for the owner; for anyone else the file rendered by
    `visible_text` (UTF-8): withheld lines replaced so line numbers stay put. Never yielded to a
    non-owner: MEMORY.md, anything under `memory/private/`, an extra path's file, a hard-linked file or the same file as
    MEMORY.md (memory/policy/privacy.py), a file with nothing visible. Files over `max_file_bytes` (the
    indexing cap), binary files (NUL bytes), unreadable files and files that change into something
    other than a regular file while being read are skipped. The only thing the sandbox shows a
    non-owner of memory.
    """
    files, _ = list_memory_files(workspace, list(extra_paths))
    memory = file_identity(workspace / MEMORY_FILE)
    for f in files:
        rel = f.rel
        if os.path.isabs(rel) or f.source != "memory":
            continue
        if rel == MEMORY_FILE and not reader.owner:
            continue
        if not reader.owner and is_private_path(rel):
            continue
        if not _no_symlink_below(workspace, rel):
            continue
        data = _read_nofollow(os.path.join(workspace, rel), max_file_bytes)
        if data is None:
            continue
        raw, st = data
        if b"\x00" in raw[:8192]:
            continue
        if reader.owner:
            yield rel, raw
            continue
        if st.st_nlink > 1 or (memory is not None and memory == (st.st_dev, st.st_ino)):
            continue
        shown = visible_text(decode_text(raw).text, rel, reader)
        if shown is not None:
            yield rel, shown.encode("utf-8")


def _no_symlink_below(workspace: Path, rel: str) -> bool:
    """No component of `rel` under the workspace is a symlink (extra paths may name any folder)."""
    probe = workspace
    for part in Path(rel).parts[:-1]:
        probe = probe / part
        if probe.is_symlink() or not probe.is_dir():
            return False
    return True


def _read_nofollow(path: str, max_bytes: int) -> tuple[bytes, os.stat_result] | None:
    """A regular file's bytes and stat, opened without following a final symlink; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), st
    except OSError:
        return None
    finally:
        os.close(fd)
