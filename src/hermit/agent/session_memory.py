"""The session-memory hook: on /new and /reset, the end of the old session goes to memory/YYYY-MM-DD-<slug>.md.

The last N user/assistant messages (text only; tool traffic, failed turns and the flush's custom
entries left out; secrets redacted as in the sessions source) are written under a small header
naming the session key, id and source channel, so the next session's memory_search finds them.

Decisions:

- The slug comes from one tiny non-streamed model request, waited for at most `slug_timeout_seconds`
  in a daemon thread (a hung provider cannot hold up /new, nor process exit). Its answer is reduced to
  2–5 lowercase ASCII words joined by '-'; anything unusable, an error or a timeout falls back to a
  deterministic keyword slug (the most frequent content words of the user's messages, ties by first
  appearance), else `session-<first 8 chars of the id>`.
- The file is created with O_EXCL and never overwritten: a taken name gets `-2`, `-3`, … The date is
  today in the user's time zone. A session that is not the owner's names its file
  `YYYY-MM-DD-<slug>-<6 hex>.md`, the hex stable for its session key (`chat_suffix`): a chat chooses its
  slug (it steers the conversation), so a plain name would collide with the owner's or another chat's
  file of that topic and the `-2` would tell it that file exists. Its names collide only with its own.
- The whole file — its title too, since the slug names the topic — is one origin block with the
  session's audience (memory/policy/audience.py): the main session's conversation is owner-only, another
  session's is seen by its own chat and the owner. Its text is escaped so it cannot close the block.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path

from hermit.config.schema import SessionMemoryHookConfig
from hermit.errors import HermitError
from hermit.memory.index.session_source import redact
from hermit.memory.policy.audience import owner_origin
from hermit.memory.policy.provenance import Origin, neutralize, wrap
from hermit.messages import UserMessage
from hermit.models.base import Model, ModelRequest
from hermit.sessions.keys import is_main_session_key
from hermit.sessions.record import SessionRecord
from hermit.sessions.transcript import MessageEntry, read_transcript
from hermit.workspace import write_new

log = logging.getLogger("hermit.agent")

MAX_MESSAGE_CHARS = 2000
SLUG_PROMPT_CHARS = 4000
MAX_SLUG_WORDS = 5
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


@dataclass(frozen=True)
class Line:
    role: str  # "user" or "assistant"
    text: str


def recent_dialogue(path: Path, count: int) -> list[Line]:
    """The last `count` user/assistant messages with text, oldest first."""
    lines: list[Line] = []
    for entry in read_transcript(path).entries:
        if not isinstance(entry, MessageEntry):
            continue
        message = entry.message
        role = message.get("role")
        if role not in ("user", "assistant") or message.get("stopReason") == "error":
            continue
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text")
        if text.strip():
            lines.append(Line(str(role), text.strip()))
    return lines[-count:]


def sanitize_slug(raw: str) -> str | None:
    """2–5 lowercase ASCII words joined by '-' from a model's answer, or None when unusable."""
    first = raw.strip().splitlines()[0] if raw.strip() else ""
    words = [w for w in re.split(r"[^a-z0-9]+", first.lower()) if w][:MAX_SLUG_WORDS]
    words = [w[:24] for w in words]
    if not words or not any(c.isalpha() for c in "".join(words)):
        return None
    return "-".join(words)


def keyword_slug(dialogue: Sequence[Line], session_id: str) -> str:
    """The deterministic fallback: the most frequent content words of the user's messages."""
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    texts = [d.text for d in dialogue if d.role == "user"] or [d.text for d in dialogue]
    for text in texts:
        for match in _WORD_RE.finditer(text):
            word = match.group(0).lower()
            if word in _STOPWORDS:
                continue
            counts[word] += 1
            first_seen.setdefault(word, len(first_seen))
    best = sorted(counts, key=lambda w: (-counts[w], first_seen[w]))[:3]
    if best:
        return "-".join(best)
    tail = re.sub(r"[^a-z0-9]", "", session_id.lower())[:8] or "chat"
    return f"session-{tail}"


def render_dialogue(dialogue: Sequence[Line], limit: int = MAX_MESSAGE_CHARS) -> str:
    out = []
    for d in dialogue:
        text = redact(d.text)
        if len(text) > limit:
            text = text[:limit].rstrip() + " …"
        out.append(f"{'User' if d.role == 'user' else 'Assistant'}: {text}")
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
            return path
    raise HermitError(f"could not find a free file name for {stem}.md in {directory}",
                      "move old session files out of memory/")


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
    the owner), else an owner-only block (None: the main session)."""
    dialogue = recent_dialogue(transcript, cfg.messages)
    if not dialogue:
        return None
    slug = model_slug(model, dialogue, cfg.slug_timeout_seconds) if model is not None and cfg.slug_from_model \
        else None
    slug = slug or keyword_slug(dialogue, record.session_id)
    local = now.astimezone(tz)
    header = (
        f"# Session {local:%Y-%m-%d %H:%M} ({tz_name}): {slug.replace('-', ' ')}\n\n"
        f"- Session key: {record.key}\n"
        f"- Session id: {record.session_id}\n"
        f"- Source: {record.origin_channel or 'direct'}\n"
        f"- Saved on {reason}: the last {len(dialogue)} user/assistant messages\n\n"
        "## Conversation\n\n"
    )
    body = render_dialogue(dialogue) + "\n"
    text = wrap(neutralize(header + body), origin if origin is not None else owner_origin(record.key))
    stem = f"{local:%Y-%m-%d}-{slug}"
    if not is_main_session_key(record.key):  # fails closed: anything but the main session
        stem = f"{stem}-{chat_suffix(record.key)}"
    return write_memory_file(workspace / "memory", stem, text)
