"""What the model is told of a chat message that carries no words: a sticker, a poll, a location, a contact card
(SPEC §6, docs/channels.md "Messages without text"). Without it such a message started a turn with empty text.

Decided per kind, the same on every platform that has it:
- a sticker: `(sticker 😀)` — its emoji (Telegram) or its name (Discord: `(sticker "Wave")`); a 👍 answers a question;
- a poll: `(poll: Dinner on Friday? — pizza / sushi / tacos)`, its question and options;
- a location: `(location: 52.52, 13.405)`, with a venue's name and address before the coordinates when sent;
- a contact card: `(contact card: Dan Smith, +49 170 1234567)`, its name and phone numbers;
- a message of a kind Hermit does not open (Telegram's voice or video messages, audio, animations): `(voice message,
  which Hermit cannot open)`, so the model can say so rather than answer nothing;
- a dice throw or a game (Telegram): ignored, no turn: nothing in it for the assistant;
- a story (Telegram: forwarded, `story`; or replied to, `reply_to_story`): `(story posted by Bea, which Hermit cannot
  open)`, `(replying to a story posted by Bea)` after the reply's words. The Bot API gives a story's chat and id only;
  the poster's name is their own choice and is printed as a forward's author is (forwarded.author_label), and a
  caption, should a Bot API server send one, is the poster's words: quoted under their name, never the sender's.
The description is the sender's message like any text (a forward's is framed as the forwarded author's), one line,
at most MAX_CHARS characters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hermit.channels.forwarded import author_label, frame

MAX_CHARS = 600


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split())


def _said(text: str) -> str:
    text = _one_line(text)
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"


def sticker(emoji: object = None, name: object = None) -> str:
    if _one_line(emoji):
        return _said(f"(sticker {_one_line(emoji)})")
    return _said(f'(sticker "{_one_line(name)}")') if _one_line(name) else "(sticker)"


def poll(question: object, options: Iterable[object]) -> str:
    choices = " / ".join(o for o in (_one_line(x) for x in options) if o)
    return _said(f"(poll: {_one_line(question) or 'no question'}" + (f" — {choices})" if choices else ")"))


def location(latitude: object, longitude: object, name: object = None, address: object = None) -> str | None:
    """None when the coordinates are not numbers (nothing to say)."""
    try:
        lat, lon = float(str(latitude)), float(str(longitude))
    except ValueError:
        return None
    where = ", ".join(p for p in (_one_line(name), _one_line(address)) if p)
    return _said(f"(location: {where + ': ' if where else ''}{lat:g}, {lon:g})")


def contact(name: object, phones: Iterable[object] = ()) -> str:
    parts = [p for p in (_one_line(name), *(_one_line(x) for x in phones)) if p]
    return _said("(contact card: " + (", ".join(parts) or "empty") + ")")


def not_opened(kind: str) -> str:
    return f"({kind}, which Hermit cannot open)"


def joined(text: str, description: str | None) -> str:
    """The message's own text (a caption, a Discord message's words) and the description, one after the other."""
    return "\n".join(x for x in (text, description) if x)


# Telegram's message fields Hermit does not open (a photo and a document it takes; an animation comes as a document
# too), by what the model is told they were.
_TELEGRAM_NOT_OPENED = {"voice": "voice message", "video_note": "video message", "video": "video", "audio": "audio"}
IGNORED = ""  # what a description is for a message that starts no turn (Telegram's dice and games)


def from_telegram(m: Mapping[str, Any]) -> str | None:
    """What a Bot API message with no words of its own was: its description, IGNORED, or None (not such a message)."""
    if isinstance(st := m.get("sticker"), dict):
        return sticker(st.get("emoji"))
    if isinstance(p := m.get("poll"), dict):
        options = p.get("options")
        return poll(p.get("question"), [o.get("text") for o in options if isinstance(o, dict)]
                    if isinstance(options, list) else [])
    venue: dict[str, Any] = m["venue"] if isinstance(m.get("venue"), dict) else {}
    if isinstance(where := venue.get("location") or m.get("location"), dict):
        return location(where.get("latitude"), where.get("longitude"), venue.get("title"), venue.get("address"))
    if isinstance(c := m.get("contact"), dict):
        name = " ".join(_one_line(c.get(k)) for k in ("first_name", "last_name") if _one_line(c.get(k)))
        return contact(name, [c.get("phone_number")])
    if "dice" in m or "game" in m:
        return IGNORED
    if isinstance(story := m.get("story"), dict):
        return _story(story, "story posted by {}, which Hermit cannot open")
    for field, kind in _TELEGRAM_NOT_OPENED.items():
        if field in m:
            return not_opened(kind)
    return None


def _poster(story: Mapping[str, Any]) -> str:
    chat: Mapping[str, Any] = story["chat"] if isinstance(story.get("chat"), dict) else {}
    name = _one_line(chat.get("title")) or " ".join(
        _one_line(chat.get(k)) for k in ("first_name", "last_name") if _one_line(chat.get(k))) or _one_line(
        chat.get("username"))
    return author_label(name or None)


def _story(story: Mapping[str, Any], said: str) -> str:
    poster = _poster(story)
    line = _said("(" + said.format(poster) + ")")
    caption = story.get("caption")
    return "\n".join((line, frame(str(caption), poster))) if isinstance(caption, str) and caption.strip() else line


def story_replied_to(m: Mapping[str, Any]) -> str | None:
    """What a Telegram message replying to a story is told of the story (after the reply's own words), or None."""
    story = m.get("reply_to_story")
    external = m.get("external_reply")
    if not isinstance(story, dict) and isinstance(external, dict):
        story = external.get("story")
    return _story(story, "replying to a story posted by {}") if isinstance(story, dict) else None


def from_whatsapp(kind: str, m: Mapping[str, Any]) -> str | None:
    """What a Cloud API message of `kind` with no words of its own was (a location, contacts); None otherwise."""
    body = m.get(kind)
    if kind == "location" and isinstance(body, dict):
        return location(body.get("latitude"), body.get("longitude"), body.get("name"), body.get("address"))
    if kind == "contacts" and isinstance(body, list):
        cards = []
        for card in (c for c in body if isinstance(c, dict)):
            name, phones = card.get("name"), card.get("phones")
            cards.append(contact(name.get("formatted_name") if isinstance(name, dict) else None,
                                 [p.get("phone") for p in phones if isinstance(p, dict)] if isinstance(phones, list)
                                 else []))
        return _said(" ".join(cards)) if cards else None
    return None
