"""Dates in a query ("July 13", "2026-10-16", "the week of August 10", "last week", "7月13日") as day ranges.

Daily logs are named by date, and a question that names a day is best answered from that day's log —
which neither BM25 (the header says `2026-07-13`, the question `July 13`) nor an embedding reliably
finds. Search boosts chunks of dated files inside these ranges. A date without a year is taken as the
most recent such day not after today.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

MONTHS = {
    "jan": 1, "january": 1, "feb": 2, "february": 2, "mar": 3, "march": 3, "apr": 4, "april": 4, "may": 5,
    "jun": 6, "june": 6, "jul": 7, "july": 7, "aug": 8, "august": 8, "sep": 9, "sept": 9, "september": 9,
    "oct": 10, "october": 10, "nov": 11, "november": 11, "dec": 12, "december": 12,
}
_MON = "|".join(sorted(MONTHS, key=len, reverse=True))
_ISO = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
_MD = re.compile(rf"\b({_MON})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_DM = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MON})\b\.?(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_ZH = re.compile(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
_WEEK_OF = re.compile(r"\bweek\s+of\b", re.IGNORECASE)
_RELATIVE = [
    (re.compile(r"\btoday\b|今天", re.IGNORECASE), 0, 0),
    (re.compile(r"\byesterday\b|昨天", re.IGNORECASE), 1, 1),
    (re.compile(r"\blast\s+week\b|上周|上个?星期", re.IGNORECASE), -7, 0),
    (re.compile(r"\bthis\s+week\b|这周|本周", re.IGNORECASE), -1, 0),
]


@dataclass(frozen=True)
class DayRange:
    start: dt.date
    end: dt.date  # inclusive

    def contains(self, day: dt.date) -> bool:
        return self.start <= day <= self.end


def _resolve(year: str | None, month: int, day: int, today: dt.date) -> dt.date | None:
    try:
        if year:
            return dt.date(int(year), month, day)
        d = dt.date(today.year, month, day)
        return d if d <= today else dt.date(today.year - 1, month, day)
    except ValueError:
        return None


def query_day_ranges(query: str, today: dt.date) -> list[DayRange]:
    """Day ranges named in `query`; `week of X` spans seven days from X."""
    found: list[tuple[int, dt.date]] = []
    for m in _ISO.finditer(query):
        d = _resolve(m.group(1), int(m.group(2)), int(m.group(3)), today)
        if d:
            found.append((m.start(), d))
    for m in _MD.finditer(query):
        d = _resolve(m.group(3), MONTHS[m.group(1).lower()], int(m.group(2)), today)
        if d:
            found.append((m.start(), d))
    for m in _DM.finditer(query):
        d = _resolve(m.group(3), MONTHS[m.group(2).lower()], int(m.group(1)), today)
        if d:
            found.append((m.start(), d))
    for m in _ZH.finditer(query):
        d = _resolve(m.group(1), int(m.group(2)), int(m.group(3)), today)
        if d:
            found.append((m.start(), d))
    ranges: list[DayRange] = []
    weeks = [w.end() for w in _WEEK_OF.finditer(query)]
    for pos, d in found:
        is_week = any(0 <= pos - w <= 4 for w in weeks)
        ranges.append(DayRange(d, d + dt.timedelta(days=6)) if is_week else DayRange(d, d))
    for pat, back, _ in _RELATIVE:
        if pat.search(query):
            if back == -7:  # last week: Monday..Sunday of the previous week
                monday = today - dt.timedelta(days=today.weekday() + 7)
                ranges.append(DayRange(monday, monday + dt.timedelta(days=6)))
            elif back == -1:
                monday = today - dt.timedelta(days=today.weekday())
                ranges.append(DayRange(monday, today))
            else:
                day = today - dt.timedelta(days=back)
                ranges.append(DayRange(day, day))
    return list(dict.fromkeys(ranges))
