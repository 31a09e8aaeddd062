"""The session-memory hook: on /new and /reset, the end of the old session goes to memory/YYYY-MM-DD-<slug>.md.

The last N user/assistant messages (text only; tool traffic, failed turns and the flush's custom
entries left out; secrets redacted as in the sessions source) are written under a small header
naming the session key, id and source channel, so the next session's memory_search finds them.

Decisions:

- The slug comes from one tiny non-streamed model request, waited for at most `slug_timeout_seconds`
  in a daemon thread (a hung provider cannot hold up /new, nor process exit). Its answer is reduced to
  2–5 lowercase ASCII words joined by '-'; anything unusable, an error or a timeout falls back to a
  deterministic keyword slug (the most frequent content words of the user's messages, ties by first
  appearance), else `session-<first 8 chars of the id>`. The keywords come from the redacted text, and
  words that look like secrets (long hex, base64 or digit-laden runs) are skipped: the file name is indexed
  and quoted in the reply. Each word is cut to 24 characters and the name's stem to 100 bytes; a name the
  file system still refuses falls back to `session-<HHMMSS>` rather than losing the session.
- The file is created with O_EXCL and never overwritten: a taken name gets `-2`, `-3`, … The date is
  today in the user's time zone. A session that is not the owner's names its file
  `YYYY-MM-DD-<slug>-<6 hex>.md`, the hex stable for its session key (`chat_suffix`): a chat chooses its
  slug (it steers the conversation), so a plain name would collide with the owner's or another chat's
  file of that topic and the `-2` would tell it that file exists. Its names collide only with its own.
- A session that is not the owner's is bounded like a chat's notes (tools/memory_files.py): the text it
  saves keeps the last MAX_NOTE_CHARS characters (the end of the session is what /new keeps), and a chat
  makes at most MAX_CHAT_FILES_PER_DAY files a day; past that, its session is appended to its newest file
  of the day while that file stays within MAX_FILE_CHARS_FROM_OTHERS, else it is not saved (an error the
  reply shows as a warning). So /new puts at most about 1 MB a day per chat into memory/, and never
  touches a file that is not that chat's own. The owner's sessions are not bounded.
- The whole file — its title too, since the slug names the topic — is one origin block with the
  session's audience (memory/policy/audience.py): the main session's conversation is owner-only, another
  session's is seen by its own chat and the owner. Its text is escaped so it cannot close the block.
- Saved once: the header names the session id and the id of the last transcript entry the file includes
  (`- Last entry: …`). Before writing, the hook looks in memory/ for a closed block of this session's
  audience whose header names that same session and entry (what a /new killed between saving and
  switching to the new session left behind) and returns that file instead of saving the session again. A
  session that went on after such a crash (a newer message) is saved as usual. The look is bounded:
  `YYYY-MM-DD-*.md` files (a chat's: with its suffix) dated from the day before its last saved message's,
  at most MAX_SAVED_SCAN of them, none over 4 × MAX_FILE_CHARS_FROM_OTHERS bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import logging
import os
import re
import stat
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

from hermit.agent.forwarded_words import attribute, forwards_in
from hermit.agent.heartbeat_reply import HEARTBEAT_MARK, BeatLines
from hermit.agent.speakers import dump_speaker, recorded_sender
from hermit.config.schema import SessionMemoryHookConfig
from hermit.durable import append_whole
from hermit.errors import HermitError
from hermit.memory.index.session_source import redact
from hermit.memory.policy import added_notes
from hermit.memory.policy.audience import owner_origin, unnamed
from hermit.memory.policy.daily_log import MAX_NOTE_CHARS, memory_writes_locked
from hermit.memory.policy.provenance import (
    CLOSE_LINE,
    Origin,
    neutralize,
    open_line,
    origin_blocks,
    seal,
    wrap,
)
from hermit.messages import Sender, UserMessage
from hermit.models.base import Model, ModelRequest
from hermit.redaction import mask
from hermit.sessions.entries import CustomEntry
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.record import SessionRecord
from hermit.sessions.transcript import MessageEntry, parse_timestamp, read_transcript
from hermit.textfile import FileTooLarge, NotRegularFile, read_regular
from hermit.tools.memory_files import MAX_FILE_CHARS_FROM_OTHERS
from hermit.workspace import write_new

log = logging.getLogger("hermit.agent")

MAX_MESSAGE_CHARS = 2000
SLUG_PROMPT_CHARS = 4000
MAX_SLUG_WORDS = 5
MAX_WORD_CHARS = 24
MAX_STEM_BYTES = 100  # of `YYYY-MM-DD-<slug>[-<6 hex>]`: far below NAME_MAX (255) with `-NNN.md` added
MAX_CHAT_FILES_PER_DAY = 3  # files a session that is not the owner's makes a day; then it appends
MAX_SAVED_SCAN = 200  # files read looking for this session's earlier save (`already_saved`)
SLUG_REQUEST = (
    "Write a 2-5 word kebab-case slug (lowercase ASCII letters, digits and hyphens, like "
    "\"db-migration-plan\") that names the topic of this conversation, for a file name. Reply with the "
    "slug only.\n\n<conversation>\n{conversation}\n</conversation>"
)
SLUG_SYSTEM = "You name saved conversations with short file-name slugs."
_STOPWORD_TEXT = """
a about above after again all also am an and any are as at be because been before being below between both
but by can could did do does doing done down during each else even few for from further get got had has have
having he her here hers him his how i if in into is it its just let like me more most my no nor not now of
off on once only or other our ours out over own please same she should so some such than thank thanks that
the their them then there these they this those through to too under until up us very was we well were what
when where which while who whom why will with would yes yet you your yours hello okay sure want need know
think make one two new also maybe really good great right see look let tell said says
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9]{2,}")
_HEX_RE = re.compile(r"[0-9A-Fa-f]+")
MESSAGE_START = re.compile(r"\n\n(?=(?:User|Assistant)(?: \([^()\n]*\))?: )")
_NAME_ERRORS = frozenset({errno.ENAMETOOLONG, errno.EILSEQ, errno.EINVAL})


def looks_secret(word: str) -> bool:
    """A word that may be a key, token, hash or id rather than a topic: a long hex run, a long run with
    several digits, or a long run with capitals inside (base64). Such words never name a file."""
    digits = sum(c.isdigit() for c in word)
    if len(word) >= 8 and digits and _HEX_RE.fullmatch(word):
        return True
    if len(word) >= 12 and digits >= 2:
        return True
    return len(word) >= 16 and any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)


@dataclass(frozen=True)
class Line:
    role: str  # "user" or "assistant"
    text: str
    entry_id: str = ""  # of its transcript entry
    timestamp: str = ""
    sender: Sender | None = None  # who wrote a group's user message (agent/speakers.py)


def recent_dialogue(path: Path, count: int) -> list[Line]:
    """The last `count` user/assistant messages with text, oldest first, registered secrets masked. A heartbeat's
    prompt and its acknowledgements (HEARTBEAT_OK) are not among them, its alerts are (the owner read them): counted,
    an afternoon of quiet beats filled the `count` and the owner's own conversation was not saved (s21)."""
    lines: list[Line] = []
    beats = BeatLines()
    for entry in read_transcript(path).entries:
        if isinstance(entry, CustomEntry) and entry.custom_type == HEARTBEAT_MARK:
            beats.mark()
        if not isinstance(entry, MessageEntry) or (line := dialogue_line(entry)) is None:
            continue
        if line.role == "user":
            if beats.user():
                continue
        else:
            alert = beats.assistant(line.text)
            if alert is None:
                continue
            if alert != line.text:
                line = dataclasses.replace(line, text=alert)
        lines.append(line)
    return lines[-count:]


def dialogue_line(entry: MessageEntry) -> Line | None:
    """A user or assistant message with text as the hook saves it; None for anything else."""
    message = entry.message
    role = message.get("role")
    if role not in ("user", "assistant") or message.get("stopReason") == "error":
        return None
    content = message.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text")
    if not text.strip():
        return None
    # masked: these lines go to the slug request and into a memory file
    return Line(str(role), mask(text).strip(), entry.id, entry.timestamp,
                recorded_sender(message.get("sender")) if role == "user" else None)


def sanitize_slug(raw: str) -> str | None:
    """2–5 lowercase ASCII words joined by '-' from a model's answer, or None when unusable."""
    first = raw.strip().splitlines()[0] if raw.strip() else ""
    words = [w for w in re.split(r"[^a-z0-9]+", first.lower()) if w and not looks_secret(w)][:MAX_SLUG_WORDS]
    words = [w[:MAX_WORD_CHARS] for w in words]
    if not words or not any(c.isalpha() for c in "".join(words)):
        return None
    return "-".join(words)


def keyword_slug(dialogue: Sequence[Line], session_id: str) -> str:
    """The deterministic fallback: the most frequent content words of the user's messages (redacted, and
    without words that look like secrets)."""
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    texts = [d.text for d in dialogue if d.role == "user"] or [d.text for d in dialogue]
    for text in texts:
        for match in _WORD_RE.finditer(redact(text)):
            if looks_secret(match.group(0)):
                continue
            word = match.group(0).lower()[:MAX_WORD_CHARS]
            if word in _STOPWORDS or word == "redacted":
                continue
            counts[word] += 1
            first_seen.setdefault(word, len(first_seen))
    best = sorted(counts, key=lambda w: (-counts[w], first_seen[w]))[:3]
    if best:
        return "-".join(best)
    tail = re.sub(r"[^a-z0-9]", "", session_id.lower())[:8] or "chat"
    return f"session-{tail}"


def render_dialogue(dialogue: Sequence[Line], limit: int = MAX_MESSAGE_CHARS,
                    clean: Callable[[str], str] | None = None) -> str:
    """`User: …` / `Assistant: …` lines; a group member's message is labelled `User (3001 "Gus"): …` with
    its sender (speakers.dump_speaker), so a saved group session never shows members' words as one user's.
    `clean` (neutralize) is applied to each message's line before the sender is named: the label is
    Hermit's, and escaping it as a speaker a member typed would hide who spoke."""
    out = []
    for d in dialogue:
        text = redact(d.text)
        if len(text) > limit:
            text = text[:limit].rstrip() + " …"
        line = f"{'User' if d.role == 'user' else 'Assistant'}: {text}"
        if clean is not None:
            line = clean(line)
        if d.sender is not None and line.startswith("User: "):
            line = f"User ({dump_speaker(d.sender)}): {line[len('User: '):]}"
        out.append(line)
    return "\n\n".join(out)


def model_slug(model: Model, dialogue: Sequence[Line], timeout: float) -> str | None:
    """The model's slug, or None on error, an unusable answer, or no answer within `timeout` seconds."""
    conversation = render_dialogue(dialogue, 600)[-SLUG_PROMPT_CHARS:]
    request = ModelRequest(system=SLUG_SYSTEM, messages=(UserMessage(SLUG_REQUEST.format(conversation=conversation)),),
                           max_tokens=24)
    box: dict[str, str] = {}
    done = threading.Event()

    def ask() -> None:
        try:
            box["text"] = model.complete(request).text
        except HermitError as e:
            log.info("session-memory slug: the model failed (%s); using keywords", e.message)
        except Exception:  # supervision boundary of this worker thread
            log.warning("session-memory slug: unexpected failure; using keywords", exc_info=True)
        finally:
            done.set()

    threading.Thread(target=ask, name="session-memory-slug", daemon=True).start()
    if not done.wait(timeout):
        log.info("session-memory slug: no answer within %.0f s; using keywords", timeout)
        return None
    return sanitize_slug(box["text"]) if "text" in box else None


def chat_suffix(session_key: str) -> str:
    """6 hex digits stable for a session key: what keeps a chat's session files apart from everyone else's."""
    return hashlib.sha256(session_key.encode("utf-8", "surrogatepass")).hexdigest()[:6]


def write_memory_file(directory: Path, stem: str, text: str) -> Path:
    """Create `<stem>.md` (else `<stem>-2.md`, …) in `directory`; never overwrites."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = directory / (f"{stem}.md" if n == 1 else f"{stem}-{n}.md")
        if write_new(path, text):
            added_notes.added(path, text)  # not an owner's command's, if one runs now (tools/exec_marks)
            return path
    raise HermitError(f"could not find a free file name for {stem}.md in {directory}",
                      "move old session files out of memory/")


def fit_slug(slug: str, max_bytes: int) -> str:
    """`slug` cut at a word boundary to at most `max_bytes` bytes (UTF-8)."""
    words: list[str] = []
    for word in slug.split("-"):
        if len("-".join([*words, word]).encode("utf-8")) > max_bytes:
            break
        words.append(word)
    return "-".join(words) or slug.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def tail_of(body: str, limit: int, clean: Callable[[str], str] = lambda text: text) -> str:
    """The end of `body` in at most `limit` characters, from the start of a message where one begins, else
    from the start of a line: `body` was cleaned line by line, and a cut line is `clean`ed again (what was
    escaped could read as syntax once cut)."""
    if len(body) <= limit:
        return body
    note = "… (earlier messages cut: a chat's saved session keeps its last part)\n\n"
    tail = body[len(body) - max(0, limit - len(note)):]
    start = MESSAGE_START.search(tail)
    if start is not None:
        return note + tail[start.end():]
    line = tail.find("\n")
    return note + (tail[line + 1:] if line >= 0 else clean(tail))


def save_session_memory(
    *,
    transcript: Path,
    record: SessionRecord,
    workspace: Path,
    cfg: SessionMemoryHookConfig,
    model: Model | None,
    now: datetime,
    tz: tzinfo,
    tz_name: str,
    reason: str,
    origin: Origin | None = None,
) -> Path | None:
    """Write the hook's file for the ending session; None when it had no messages. The file is wrapped
    whole in an origin block: `origin` for a session that is not the owner's (seen by its own chat and
    the owner), else an owner-only block (None: the main session). A session that is not the owner's is
    bounded (MAX_NOTE_CHARS of text, MAX_CHAT_FILES_PER_DAY files a day, then appends): HermitError when
    its day's share is used up."""
    dialogue = recent_dialogue(transcript, cfg.messages)
    if not dialogue:
        return None
    local = now.astimezone(tz)
    chat = not is_main_session_key(record.key)  # fails closed: anything but the main session
    suffix = f"-{chat_suffix(record.key)}" if chat else ""
    block = origin if origin is not None else owner_origin(record.key)
    last = dialogue[-1]
    directory = workspace / "memory"
    earlier = already_saved(directory, record, last, block, suffix, tz)
    if earlier is not None:  # a /new killed after saving and before the new session began
        log.info("session-memory: %s through entry %s is already in %s", record.session_id, last.entry_id,
                 earlier.name)
        return earlier
    slug = model_slug(model, dialogue, cfg.slug_timeout_seconds) if model is not None and cfg.slug_from_model \
        else None
    slug = slug or keyword_slug(dialogue, record.session_id)
    if not chat:  # the owner's note from now on: the assistant's copy of a forward says whose words they are
        forwards = forwards_in([UserMessage(d.text) for d in dialogue if d.role == "user"])
        dialogue = [dataclasses.replace(d, text=attribute(d.text, forwards)) if d.role == "assistant" else d
                    for d in dialogue]
    body = render_dialogue(dialogue, clean=lambda line: neutralize(line, block)) + "\n"

    def compose(slug: str) -> tuple[str, str]:
        header = (
            f"# Session {local:%Y-%m-%d %H:%M} ({tz_name}): {slug.replace('-', ' ')}\n\n"
            # A chat's dump is the chat's to read: its key without the agent id (audience.unnamed).
            f"- Session key: {record.key if is_main_session_key(record.key) else unnamed(record.key)}\n"
            f"- Session id: {record.session_id}\n"
            f"- Last entry: {last.entry_id}\n"
            f"- Source: {record.origin_channel or 'direct'}\n"
            f"- Saved on {reason}: the last {len(dialogue)} user/assistant messages\n\n"
            "## Conversation\n\n"
        )
        header = neutralize(header, block)  # the body was, message by message (render_dialogue)
        text = header + (tail_of(body, MAX_NOTE_CHARS - len(header), lambda t: neutralize(t, block)) if chat
                         else body)
        return f"{local:%Y-%m-%d}-{slug}{suffix}", wrap(text, block)

    slug = fit_slug(slug, MAX_STEM_BYTES - len(f"{local:%Y-%m-%d}-{suffix}"))
    if not chat:
        return _create(directory, compose, slug, local)
    directory.mkdir(parents=True, exist_ok=True)
    # The count and the append decided with no other writer between (of this agent, or of one whose extra
    # paths name this memory/ folder).
    with memory_writes_locked(workspace, directory):
        day = f"{local:%Y-%m-%d}"
        mine = _chat_files(directory, day, suffix)
        if len(mine) < MAX_CHAT_FILES_PER_DAY:
            return _create(directory, compose, slug, local)
        return _append_to_newest(mine, compose(slug)[1], block)


def already_saved(directory: Path, record: SessionRecord, last: Line, block: Origin, suffix: str,
                  tz: tzinfo) -> Path | None:
    """The file an earlier /new saved this session into, through the entry `last`, or None. Only a closed
    block of `block`'s session and audience counts, and only its header (from its `# Session` title to
    `## Conversation`), compared as the hook writes it (neutralized): the conversation inside cannot pass
    for a header, nor can another writer's block."""
    moment = parse_timestamp(last.timestamp) or record.created_at
    since = (moment.astimezone(tz).date() - timedelta(days=1)).isoformat()
    name = re.compile(rf"(\d{{4}}-\d{{2}}-\d{{2}})-.+{re.escape(suffix)}(?:-[0-9]+)?\.md")
    try:
        names = sorted(n for n in os.listdir(directory) if (m := name.fullmatch(n)) and m.group(1) >= since)
    except OSError:
        return None
    want = origin_blocks(open_line(block))[0].origin  # as a marker records it
    wanted = {neutralize(f"- Session id: {record.session_id}", block),
              neutralize(f"- Last entry: {last.entry_id}", block)}
    for file_name in names[:MAX_SAVED_SCAN]:
        text = read_small(directory / file_name)
        if text is None or "<!-- origin" not in text:
            continue
        lines = text.split("\n")
        for b in origin_blocks(text):
            if (b.origin.session, b.origin.audience) != (want.session, want.audience):
                continue
            if lines[b.end - 1].strip() != CLOSE_LINE or not lines[b.start].startswith("# Session "):
                continue  # cut short (a kill mid-append), or not a saved session
            header = lines[b.start:b.end - 1]
            header = header[:header.index("## Conversation")] if "## Conversation" in header else []
            if wanted <= set(header):
                return directory / file_name
    return None


def read_small(path: Path) -> str | None:
    """A regular file's text when it is at most 4 × MAX_FILE_CHARS_FROM_OTHERS bytes (no symlinks)."""
    try:
        return read_regular(path, 4 * MAX_FILE_CHARS_FROM_OTHERS, follow=False).decode("utf-8", errors="replace")
    except (FileTooLarge, NotRegularFile, OSError):
        return None


def _create(directory: Path, compose: Callable[[str], tuple[str, str]], slug: str, local: datetime) -> Path:
    stem, text = compose(slug)
    try:
        return write_memory_file(directory, stem, text)
    except OSError as e:
        if e.errno not in _NAME_ERRORS:
            raise
        log.warning("session-memory: the file system refused the name %s.md (%s); using a timestamp", stem, e)
    stem, text = compose(f"session-{local:%H%M%S}")
    return write_memory_file(directory, stem, text)


def _chat_files(directory: Path, day: str, suffix: str) -> list[Path]:
    """The session files of the chat whose names end in `suffix`, dated `day`, oldest first."""
    pattern = re.compile(rf"{re.escape(day)}-.+{re.escape(suffix)}(?:-[0-9]+)?\.md")
    found = []
    for path in directory.iterdir():
        if pattern.fullmatch(path.name):
            with contextlib.suppress(OSError):
                found.append((path.lstat().st_mtime_ns, path.name, path))
    return [p for _, _, p in sorted(found)]


def _is_own(existing: str, block: Origin) -> bool:
    """The file is the chat's own session file: nothing but blocks of that chat's session."""
    want = origin_blocks(open_line(block))[0].origin  # as a marker records it
    blocks = origin_blocks(existing)
    return existing.startswith("<!-- origin") and bool(blocks) and all(
        (b.origin.session, b.origin.audience) == (want.session, want.audience) for b in blocks)


def _append_to_newest(mine: Sequence[Path], addition: str, block: Origin) -> Path:
    """Add the session to the chat's newest file of the day while it stays within
    MAX_FILE_CHARS_FROM_OTHERS; a file that is not plainly the chat's own is never touched."""
    path = mine[-1]
    refused = HermitError(
        f"this chat already has {len(mine)} session files in memory today and the last, {path.name}, has no "
        f"room for another (a chat's session files grow to at most {MAX_FILE_CHARS_FROM_OTHERS:,} characters)",
        "the conversation stays in its transcript; ask the owner to save what matters")
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise refused from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > 4 * MAX_FILE_CHARS_FROM_OTHERS:
            raise refused
        existing = os.pread(fd, st.st_size, 0).decode("utf-8", errors="replace")
        closing = seal(existing)[len(existing):]
        data = closing + "\n" + addition
        if not _is_own(existing, block) or len(existing) + len(data) > MAX_FILE_CHARS_FROM_OTHERS:
            raise refused
        append_whole(fd, data.encode("utf-8"), new_line=True)  # a close marker on a line of its own
        added_notes.added(path, data)
    finally:
        os.close(fd)
    return path
