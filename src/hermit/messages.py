"""The normalized message protocol every model adapter maps to and from, with its JSON form.

Three roles: `user`, `assistant` and `toolResult` (a tool's answer to one tool call). An assistant
message holds text parts and tool-call parts, the stop reason and token usage of the request that
produced it. `to_dict()` / `message_from_dict()` give the JSON form the session transcripts store
(camelCase keys, as in the original's transcripts: `toolCallId`, `toolName`, `isError`, `stopReason`,
`cacheRead`...); `from_dict` raises ValueError on malformed input so a loader can name the bad line.

Usage semantics (the same for every provider): `input_tokens` counts input tokens that were neither
read from nor written to the prompt cache; `context_tokens` = input + cache_read + cache_write is the
size of the prompt the model saw, which is what compaction compares to the context window.

Text from outside (a CLI argument, a batch query line, a model's reply or tool-call arguments, a chat
message) can hold lone UTF-16 surrogates ("\\ud800" in JSON, undecodable argv bytes); they cannot be
encoded as UTF-8, so SQLite, the embedding model, JSON files and HTTP bodies all fail on them.
`valid_text` / `valid_json` are the one place that makes such text valid (each lone surrogate becomes
U+FFFD), called at every boundary where outside text comes in. `one_line` is the one rule for a name
or id someone else chose (a display name, a forwarded message's author, a peer id) shown inside text
Hermit frames: one line of visible characters, bounded.

Hermit writes labels before text that say whose words it is: a transcript line's speaker (`User: …`,
`Assistant (telegram DM 2001): …`: memory.index.session_source, the /new dump), a forwarded message's
header (channels.forwarded) and the quote marker `> `. `line_label` is the one recogniser of them: whatever
shows or indexes part of a line without the line's start (the memory chunker's pieces of a long line, a
search snippet cut around a match) puts the labels in force there before it, so a stranger's words never
come back bare, as the owner's.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, get_args

StopReason: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "error"]
STOP_REASONS: tuple[str, ...] = get_args(StopReason)

# When a model sends tool-call arguments that are not a JSON object, the adapter keeps the raw text under
# this key so the tool runner can answer "your arguments were not valid JSON" instead of crashing.
INVALID_ARGUMENTS_KEY = "_raw_arguments"


# Shown as a space: controls (C0, DEL, C1: ESC, CR…) and line/paragraph separators. Dropped: format
# characters (bidi overrides and isolates, zero-width space/joiners, soft hyphen), surrogates, private use
# and unassigned code points.
_AS_SPACE = frozenset({"Cc", "Zl", "Zp"})
_DROPPED = frozenset({"Cf", "Cs", "Co", "Cn"})


def one_line(value: str, limit: int) -> str:
    """`value` as plain visible text on one line: controls and separators become spaces, invisible
    (format) characters go, runs of whitespace become one space; at most `limit` characters."""
    out = []
    for ch in value:
        cat = unicodedata.category(ch)
        if cat in _AS_SPACE:
            out.append(" ")
        elif cat not in _DROPPED:
            out.append(ch)
    return " ".join("".join(out).split())[:limit].rstrip()


# What a name keeps in a label: letters, digits, their combining accents, spaces and a few marks names use.
# Everything else goes — brackets, quotes and look-alikes of any script (［ ］ ⎡ ⎤ ״ ″), symbols, enclosing
# marks — since a list of banned characters is always one look-alike short. Letters that are quote marks
# in use (modifier letters ʹ ʺ ʻ ʼ ʽ ˮ) go too.
_NAME_CATEGORIES = ("L", "N", "Mn", "Mc", "Zs")
_NAME_MARKS = frozenset("-_.@,&+#:")
_QUOTE_LETTERS = frozenset(
    "\u02b9\u02ba\u02bb\u02bc\u02bd\u02c8\u02ee\u02dd"  # ʹ ʺ ʻ ʼ ʽ ˈ ˮ ˝
    "\u01c0\u01c1\u01c2\u01c3\ua78c\u07f4\u07f5"  # ǀ ǁ ǂ ǃ ꞌ ߴ ߵ: bars and quotes that are letters
    "\u1433\u1438\u1455\u1450"  # ᐳ ᐸ ᑕ ᑐ: brackets that are letters
    "\u115f\u1160\u3164\uffa0"  # Hangul fillers: invisible letters
)


def _name_char(c: str) -> bool:
    cat = unicodedata.category(c)
    return (cat.startswith(_NAME_CATEGORIES[:2]) or cat in _NAME_CATEGORIES[2:] or c in _NAME_MARKS) \
        and c not in _QUOTE_LETTERS and not ("\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef")


def label_text(value: str, limit: int) -> str:
    """Text someone else chose (a display name, a peer id) made unable to pass for label syntax: NFKC
    (full-width and other compatibility forms become plain ones), then only letters, digits, combining
    accents, spaces and `-_.@,&+#:` (everything else becomes a space), one line, at most `limit` characters."""
    folded = unicodedata.normalize("NFKC", one_line(value, 4 * limit))
    return one_line("".join(c if _name_char(c) else " " for c in folded), limit)


def valid_text(text: str) -> str:
    """`text` as valid Unicode: a lone surrogate becomes U+FFFD, a surrogate pair the character it encodes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def valid_json(value: Any) -> Any:
    """A JSON-like value with every string in it (keys too) made valid by `valid_text`."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, Mapping):
        return {valid_text(k) if isinstance(k, str) else k: valid_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [valid_json(v) for v in value]
    return value


FORWARD_OPEN = "[forwarded message from "
FORWARD_CLOSE = " — quoted, not the sender's own words]"
# A line's leading labels: a speaker (the chat in parentheses is label_text, so it holds no bracket), then
# Markdown quote markers (up to three spaces of indent, as Markdown allows).
_LEAD = re.compile(r"(?:(?:User|Assistant)(?: \([^()\[\]\n]{1,400}\))?: )?(?: {0,3}>[ \t]?)*")
# The author in a header is label_text too: no bracket either.
_FORWARD = re.compile(re.escape(FORWARD_OPEN) + r"[^\[\]\n]{0,400}?" + re.escape(FORWARD_CLOSE))


def forward_header(author: str) -> str:
    """The header over a forwarded message's quoted lines; `author` must already be label_text."""
    return f"{FORWARD_OPEN}{author}{FORWARD_CLOSE}"


def label_spans(line: str) -> list[tuple[int, int]]:
    """The (start, end) character spans of the labels in `line` (its leading labels, every forward header):
    a line is never cut inside one, or its pieces would hold half a label."""
    lead = _LEAD.match(line)
    spans = [(0, lead.end())] if lead and lead.end() else []
    return spans + [m.span() for m in _FORWARD.finditer(line)]


def line_label(line: str, at: int) -> str:
    """The labels that say whose words `line[at:]` are, to put before that part when it is shown or indexed
    without the start of its line ("" when none, or when `at` is the start): the line's leading speaker
    label and quote marker, then the last forward header that starts before `at` and a quote marker — what
    follows a header in one line is the quoted message (a transcript line is a whole message flattened,
    and every channel puts the frame last)."""
    if at <= 0:
        return ""
    lead = _LEAD.match(line)
    parts = [lead[0].strip()] if lead and lead[0].strip() else []
    header = None
    for m in _FORWARD.finditer(line):
        if m.start() >= at:
            break
        header = m[0]
    if header is not None:
        parts += [header, ">"]
    return " ".join(parts) + " " if parts else ""


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """Size of the prompt the model saw, cached or not."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.context_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cacheRead": self.cache_read_tokens,
            "cacheWrite": self.cache_write_tokens,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        return cls(_int(d, "input"), _int(d, "output"), _int(d, "cacheRead"), _int(d, "cacheWrite"))


@dataclass(frozen=True)
class TextPart:
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ImagePart:
    """An inline image: base64 `data` of type `media_type` (image/png, image/jpeg...)."""

    media_type: str
    data: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "image", "mimeType": self.media_type, "data": self.data}


@dataclass(frozen=True)
class ToolCallPart:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "toolCall", "id": self.id, "name": self.name, "arguments": self.arguments}


AssistantPart: TypeAlias = TextPart | ToolCallPart


# Written after a group message's sender when the id is one of the owner's (agent/speakers.py): after the id,
# where no display name reaches, and with an em dash, which no display name keeps (label_text).
OWNER_MARK = " — the owner"


@dataclass(frozen=True)
class Sender:
    """Who wrote a user message in a chat several people write in (a group, a channel, a thread): the
    platform id, the display name they chose (untrusted: shown only through label_text), and whether the
    id was one of the owner's when the message came in. Recorded with the message in its transcript."""

    id: str
    name: str | None = None
    owner: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id}
        if self.name:
            d["name"] = self.name
        if self.owner:
            d["owner"] = True
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Sender:
        """Parse the JSON form; raises ValueError naming what is wrong."""
        if not isinstance(d, Mapping):
            raise ValueError("sender must be an object")
        name = d.get("name")
        owner = d.get("owner", False)
        if name is not None and not isinstance(name, str):
            raise ValueError("sender name must be a string")
        if not isinstance(owner, bool):
            raise ValueError("sender owner must be a boolean")
        return cls(_str(d, "id"), name, owner)


@dataclass(frozen=True)
class FiledFile:
    """A file a channel's message brought, as the gateway filed it (gateway/attachments.py): `inbox/<name>` of
    `place` ("workspace": the owner's; "room": the session's room), with the SHA-256 and size of the bytes
    filed. Recorded with the message, never parsed from its text (a sender can type a "(file received …)"
    line), so that its sender's delete removes exactly this file, and only while it still holds those bytes."""

    name: str
    place: Literal["workspace", "room"]
    sha256: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "place": self.place, "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_dict(cls, d: Any) -> FiledFile | None:
        """The JSON form parsed; None when it is not one (skipped: the message itself still loads)."""
        if not isinstance(d, Mapping):
            return None
        name, place, digest, size = d.get("name"), d.get("place"), d.get("sha256"), d.get("size")
        if not (isinstance(name, str) and place in ("workspace", "room") and isinstance(digest, str)
                and isinstance(size, int) and not isinstance(size, bool)):
            return None
        return cls(name, place, digest, size)


@dataclass(frozen=True)
class UserMessage:
    text: str
    images: tuple[ImagePart, ...] = ()
    # Who wrote it, in a chat several people write in; None elsewhere, and in transcripts older than this.
    sender: Sender | None = None
    # The platform's message ("<channel>:<account>:<message id>"), so that its sender's delete can find it
    # (sessions/entries.py: a `retracted` entry); None for the CLI, the scheduler and older transcripts.
    ref: str | None = None
    # The files it brought, as filed (a delete of the message deletes them); never sent to a model.
    files: tuple[FiledFile, ...] = ()
    role: ClassVar[Literal["user"]] = "user"

    def to_dict(self) -> dict[str, Any]:
        content = [TextPart(self.text).to_dict(), *(i.to_dict() for i in self.images)]
        d: dict[str, Any] = {"role": "user", "content": content}
        if self.sender is not None:
            d["sender"] = self.sender.to_dict()
        if self.ref is not None:
            d["ref"] = self.ref
        if self.files:
            d["files"] = [f.to_dict() for f in self.files]
        return d


@dataclass(frozen=True)
class AssistantMessage:
    content: tuple[AssistantPart, ...] = ()
    stop_reason: StopReason = "end_turn"
    usage: Usage = Usage()
    model: str = ""
    provider: str = ""
    error_message: str | None = None
    role: ClassVar[Literal["assistant"]] = "assistant"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.content if isinstance(p, ToolCallPart))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "role": "assistant",
            "content": [p.to_dict() for p in self.content],
            "stopReason": self.stop_reason,
            "usage": self.usage.to_dict(),
        }
        if self.model:
            d["model"] = self.model
        if self.provider:
            d["provider"] = self.provider
        if self.error_message is not None:
            d["errorMessage"] = self.error_message
        return d


@dataclass(frozen=True)
class ToolResultMessage:
    """The result of one tool call; `images` lets pruning know never to trim it."""

    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()
    role: ClassVar[Literal["toolResult"]] = "toolResult"

    @property
    def has_image(self) -> bool:
        return bool(self.images)

    def to_dict(self) -> dict[str, Any]:
        content = [TextPart(self.content).to_dict(), *(i.to_dict() for i in self.images)]
        return {
            "role": "toolResult",
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "content": content,
            "isError": self.is_error,
        }


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage


def message_to_dict(message: Message) -> dict[str, Any]:
    return message.to_dict()


def stored_text(message: Mapping[str, Any]) -> str:
    """The text of a message as stored in a transcript line: a string, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def message_from_dict(d: Mapping[str, Any]) -> Message:
    """Parse the JSON form of any message; raises ValueError naming what is wrong."""
    if not isinstance(d, Mapping):
        raise ValueError(f"message must be an object, got {type(d).__name__}")
    role = d.get("role")
    if role == "user":
        text, images = _text_and_images(d.get("content"), "user content")
        sender, ref = d.get("sender"), d.get("ref")
        if ref is not None and not isinstance(ref, str):
            raise ValueError("user message ref must be a string")
        raw_files = d.get("files")
        files = tuple(f for f in map(FiledFile.from_dict, raw_files if isinstance(raw_files, list) else [])
                      if f is not None)
        return UserMessage(text, images, None if sender is None else Sender.from_dict(sender), ref, files)
    if role == "assistant":
        raw = d.get("content", [])
        if isinstance(raw, str):
            raw = [{"type": "text", "text": raw}]
        if not isinstance(raw, list):
            raise ValueError("assistant content must be a list")
        parts: list[AssistantPart] = []
        for p in raw:
            kind = p.get("type") if isinstance(p, Mapping) else None
            if kind == "text":
                parts.append(TextPart(_str(p, "text")))
            elif kind == "toolCall":
                args = p.get("arguments", {})
                if not isinstance(args, dict):
                    raise ValueError("toolCall arguments must be an object")
                parts.append(ToolCallPart(_str(p, "id"), _str(p, "name"), args))
            else:
                raise ValueError(f"unknown assistant content part: {p!r:.80}")
        stop = d.get("stopReason", "end_turn")
        if stop not in STOP_REASONS:
            raise ValueError(f"unknown stopReason {stop!r}")
        usage = d.get("usage") or {}
        if not isinstance(usage, Mapping):
            raise ValueError("usage must be an object")
        err = d.get("errorMessage")
        return AssistantMessage(
            tuple(parts),
            stop,
            Usage.from_dict(usage),
            str(d.get("model", "")),
            str(d.get("provider", "")),
            None if err is None else str(err),
        )
    if role == "toolResult":
        text, images = _text_and_images(d.get("content"), "toolResult content")
        is_error = d.get("isError", False)
        if not isinstance(is_error, bool):
            raise ValueError("isError must be a boolean")
        return ToolResultMessage(_str(d, "toolCallId"), _str(d, "toolName"), text, is_error, images)
    raise ValueError(f"unknown message role {role!r}")


def _text_and_images(raw: Any, what: str) -> tuple[str, tuple[ImagePart, ...]]:
    if isinstance(raw, str):
        return raw, ()
    if not isinstance(raw, list):
        raise ValueError(f"{what} must be a string or a list")
    texts: list[str] = []
    images: list[ImagePart] = []
    for p in raw:
        kind = p.get("type") if isinstance(p, Mapping) else None
        if kind == "text":
            texts.append(_str(p, "text"))
        elif kind == "image":
            images.append(ImagePart(_str(p, "mimeType"), _str(p, "data")))
        else:
            raise ValueError(f"unknown {what} part: {p!r:.80}")
    return "".join(texts), tuple(images)


def _str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise ValueError(f"{key!r} must be a string, got {type(v).__name__}")
    return v


def _int(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"usage {key!r} must be an integer")
    return v
