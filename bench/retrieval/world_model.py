"""The retrieval benchmark's world as data types: a planted fact, a section, a day, a session note and
a query, and the short constructors world.py and world_days.py write them with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    """One planted line. ``key`` must occur verbatim in ``text`` (checked at generation)."""

    fid: str
    key: str
    text: str


Item = str | Fact


@dataclass(frozen=True)
class Section:
    heading: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Day:
    date: str
    lang: str  # "en" | "zh"
    sections: tuple[Section, ...]


@dataclass(frozen=True)
class SessionNote:
    """A session-memory file ``memory/<date>-<slug>.md`` (conversation summary)."""

    date: str
    slug: str
    time: str
    session_id: str
    source: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Query:
    type: str
    text: str
    fids: tuple[str, ...]


def F(fid: str, key: str, text: str) -> Fact:
    return Fact(fid, key, text)


def S(heading: str, *items: Item) -> Section:
    return Section(heading, items)


def D(date: str, lang: str, *sections: Section) -> Day:
    return Day(date, lang, sections)


def Q(qtype: str, text: str, *fids: str) -> Query:
    return Query(qtype, text, fids)
