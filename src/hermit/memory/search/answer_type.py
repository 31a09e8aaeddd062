"""The answer's type, read from the question: a question asking for a time prefers lines that carry one.

"When did Melanie go camping?" is answered by a turn such as "we went camping last week" — the topic is
e5's to see, but that the answer is a time is the question's own word. On the LoCoMo dev split 82 % of the
gold lines of such questions carry an English time expression, against 14 % of all turns. So when the
search takes a chunk's best line (memory.search.ordering.by_best_line, the dialogue combiner's feature,
the order the weaker places fill in), a line carrying a time counts `SearchTuning.time_line_bonus` more
for such a question. It orders places only: whether anything said is close to the question (round 9's
rule) reads the plain cosines, and nothing passes min_score by it (bench/retrieval/README.md, round 17).

The words are English only: a question in another language, or a memory in one, is ordered as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from hermit.memory.index.line_vectors import from_line_blob
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.store.api import ChunkRow, MemoryStore

# "What time …" asks for a clock time, which CARRIES_TIME does not mark: not a question it serves.
ASKS_TIME = re.compile(r"^\W*(?:when\b|what (?:day|date|month|year|week)\b|how long ago\b|since when\b|"
                       r"in (?:which|what) (?:month|year)\b)", re.IGNORECASE)
_UNITS = ["day", "days", "night", "nights", "week", "weeks", "weekend", "weekends", "month", "months", "year", "years",
          "summer", "winter", "spring", "fall", "autumn", "morning", "evening", "afternoon"]
_UNIT = "(?:" + "|".join(_UNITS) + ")"
_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_WORDS = frozenset(["yesterday", "today", "tonight", "tomorrow", "ago", "recently", "lately", *_UNITS,
                    *_MONTHS.split("|"), *_DAYS.split("|")])
_TOKEN = re.compile(r"[a-z0-9]+")
_YEAR = re.compile(r"(?:19|20)\d\d")
CARRIES_TIME = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|recently|lately|weekend|{_DAYS}|{_MONTHS}|"
    rf"(?:last|next|this|past|previous|coming|few|couple of|several) {_UNIT}|"
    rf"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten) {_UNIT}|(?:19|20)\d\d)\b", re.IGNORECASE)


def asks_time(query: str) -> bool:
    """Whether the question asks for a time ("When did …", "What year …", "How long ago …")."""
    return bool(ASKS_TIME.search(query))


def _carries_time(line: str) -> bool:
    """CARRIES_TIME.search(line), with a set lookup first: every match holds one of its words or a year, and
    most lines hold neither (the pattern alone cost ~3 ms a chunk)."""
    words = _TOKEN.findall(line.lower())
    if _WORDS.isdisjoint(words) and not any(len(w) == 4 and _YEAR.fullmatch(w) for w in words):
        return False
    return bool(CARRIES_TIME.search(line))


def timed_lines(row: ChunkRow) -> list[int]:
    """The line numbers of `row` that carry a time expression (not headings: a daily log's date heading
    is on every chunk of the day). None are read from a chunk whose text does not map one line to one
    line number."""
    return list(_timed(row.text, row.start_line, row.end_line))


@lru_cache(maxsize=1024)
def _timed(text: str, start: int, end: int) -> tuple[int, ...]:
    lines = text.split("\n")
    if len(lines) != end - start + 1:
        return ()
    return tuple(start + k for k, t in enumerate(lines) if not t.lstrip().startswith("#") and _carries_time(t))


def with_time_prior(best: list[float | None], spans_rows: Sequence[ChunkRow], store: MemoryStore, q: np.ndarray,
                    bump: float) -> list[float | None]:
    """Each chunk's best line cosine (`best`, memory.index.line_vectors.best_cosines) where a line carrying
    a time counts `bump` (raw cosine) more: the better of the plain best and the best timed line lifted.
    The timed lines' vectors are read one line a span, so no store need return its lines in order."""
    wanted = [(k, row.path, n) for k, row in enumerate(spans_rows) for n in timed_lines(row)]
    if not wanted or bump <= 0:
        return best
    blobs = store.line_vector_blobs([(p, n, n) for _, p, n in wanted])
    width = 2 * q.shape[0]
    keys = [j for j in range(len(wanted)) if len(blobs.get(j, b"")) == width]
    if not keys:
        return best
    sims = from_line_blob(b"".join(blobs[j] for j in keys)).reshape(-1, q.shape[0]) @ np.asarray(q, np.float32)
    out = list(best)
    for j, s in zip(keys, sims.tolist(), strict=True):
        k = wanted[j][0]
        lifted = s + bump
        cur = out[k]
        out[k] = lifted if cur is None or lifted > cur else cur
    return out
