"""The kind of memory a chunk is, and the order learned for the dialogue among the passed places.

A chunk is **dialogue** when most of its lines are turns — "Name: words", after an optional bullet, a
"[D1:3]" tag or a timestamp (a full-width colon counts) — and its speakers speak again: at least three
turns, and no more distinct speakers than half of them (or two). That is what a transcript, a session
dump (`User: …` / `Assistant: …`) or a chat log is, whoever wrote it; a note's "Key: value" lines name a
different key each (four lines, four keys: a note). The rule reads the chunk's text only.

The search orders the first passed chunks by `0.8 · fused + 0.2 · best line` (ordering.by_best_line), a
blend picked by hand in round 5 and the right one for notes. For dialogue a small logistic regression
over the signals the search already has for each chunk orders better (bench/retrieval/README.md, round
13: LoCoMo held out +0.010 / +0.012 / +0.000 seen R@6, the generated notes suite and its bilingual
questions unchanged): in a conversation the question's words and the best turn tell more than the
chunk's vector. It re-orders the dialogue chunks among the places dialogue chunks hold in the blended
order; every other chunk keeps its place, and every chunk keeps its own score. Its weights are data
(memory.search.dialogue_weights), re-learned by bench/retrieval/kind_weights.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.store.api import ChunkRow, MemoryStore

# A turn: optional bullet, optional [tag] / timestamp, a speaker of one to four words (a parenthesised
# sender may follow: `User (3001 "Gus")`), a colon, then words.
_TURN = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:\[[^\]\n]{1,24}\]\s*)?(?:\(?\d{1,2}:\d{2}(?::\d{2})?\)?\s*)?"
    r"(?P<who>[^\W\d_][\w.'’-]*(?:\s[\w.'’-]+){0,3}?)(?:\s\([^)\n]{0,40}\))?\s*[:：]\s*\S")
_HEADING = re.compile(r"^\s*#")

# The signals the combiner reads for each chunk, in this order (all on [0, 1]): the fused score, the
# BM25 text score and the chunk cosine (calibrated), the best line's calibrated cosine (the chunk's own
# when it has no line vectors), whether the chunk is of a day the question names, its rank and its gap
# to the best in the fused order of the head.
FEATURES = ("fused", "text", "cosine", "line", "dated", "rank", "gap")


def dialogue_shaped(text: str) -> bool:
    """Whether a chunk is dialogue: at least three turn lines, most of its lines (headings and blank lines
    aside) turns, and its speakers speak again (no more distinct speakers than half its turns, or two)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not _HEADING.match(ln)]
    who = [m.group("who").lower() for ln in lines if (m := _TURN.match(ln))]
    return len(who) >= 3 and len(who) * 2 > len(lines) and len(set(who)) <= max(2, len(who) // 2)


class DialogueKinds:
    """Which chunks are dialogue, each read once per index generation (a chunk's text changes only with it)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._gen = -1
        self._known: dict[int, bool] = {}

    def among(self, rows: list[ChunkRow]) -> set[int]:
        """The ids of the dialogue chunks of `rows` (the index generation read once for them all)."""
        gen = self.store.generation()
        if gen != self._gen:
            self._known, self._gen = {}, gen
        seen = self._known  # this generation's, even if another search moves on meanwhile
        out: set[int] = set()
        for row in rows:
            known = seen.get(row.id)
            if known is None:
                known = seen[row.id] = dialogue_shaped(row.text)
            if known:
                out.add(row.id)
        return out


@dataclass(frozen=True)
class Combiner:
    """A logistic regression on standardised features; ordering by its logit is ordering by its probability."""

    mean: tuple[float, ...]
    sd: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    def logits(self, x: np.ndarray) -> np.ndarray:
        z = (x - np.asarray(self.mean)) / np.asarray(self.sd)
        return np.asarray(z @ np.asarray(self.weights) + self.bias, dtype=np.float64)


def in_dialogue_places(ordered: list[tuple[int, float]], dialogue: set[int],
                       value: dict[int, float]) -> list[tuple[int, float]]:
    """`ordered` with the chunks of `dialogue` (all in it) put in order of `value`, best first, among the
    places they hold; every other chunk keeps its place, and every chunk its score."""
    place = {i: k for k, (i, _) in enumerate(ordered)}
    turns = iter(sorted(dialogue, key=lambda i: (-value[i], place[i])))  # a tie keeps the order it had
    score = dict(ordered)
    return [(j, score[j]) for j in (next(turns) if i in dialogue else i for i, _ in ordered)]


def features(head: list[tuple[int, float]], text: list[float], cosine: list[float], line: list[float],
             dated: list[bool]) -> np.ndarray:
    """The FEATURES of each chunk of `head` (the passed chunks in fused order, with their scores)."""
    top = max(s for _, s in head)
    last = max(1, len(head) - 1)
    return np.asarray([[s, t, c, ln, float(d), r / last, top - s]
                       for r, ((_, s), t, c, ln, d) in enumerate(zip(head, text, cosine, line, dated, strict=True))],
                      dtype=np.float64)
