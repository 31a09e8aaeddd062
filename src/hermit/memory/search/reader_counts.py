"""BM25 for a reader who may not see every note: word counts over the notes it may see.

BM25 weighs a word by how many chunks hold it (idf), and the keyword leg puts a search's relevances on
a scale set by its best hits. Both were the whole index's: a chat that wrote "4821" into a note of its
own and searched for it saw its note's score fall (or the note vanish under minScore) when the
owner's MEMORY.md also said 4821 — one search per guess told it what the owner's notes held. A
restricted reader's keyword scores are therefore computed as if only the chunks it may see existed:
its hits are those it may see, and each phrase's document count is the count of those chunks. Both
legs' candidate pools are searched deeper until they hold enough chunks it may see (DEEPEST_POOL).

The chunk total N and the mean chunk length stay the index's (they say how much memory there is, not
what it says). A phrase held by more than PRECISE_DF chunks keeps the index's count: reading that many
chunks per search would cost tens of milliseconds, and one hidden chunk more or less moves such a
common word's idf by under 0.1 %.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hermit.memory.search.fts import or_match
from hermit.memory.search.keyword import KeywordSearcher
from hermit.memory.store.api import ChunkRow

PRECISE_DF = 2_000
# How deep a restricted reader's candidates are searched for a pool of those it may see: a pool taken
# from everyone's notes and filtered after would lose the reader's own note whenever enough hidden ones
# outrank it, and its disappearing would say what the owner's notes are about.
DEEPEST_POOL = 4_000


class ReaderCounts:
    """One search's keyword counts and scores for a reader limited to the chunks `visible` keeps."""

    def __init__(self, keyword: KeywordSearcher, visible: Callable[[Mapping[int, ChunkRow]], set[int]],
                 rows: dict[int, ChunkRow]) -> None:
        self.keyword = keyword
        self.visible = visible
        self.rows = rows  # the search's fetched rows, shared (rows read here are the search's too)
        self._df: dict[str, int] = {}

    def _fetch(self, ids: list[int]) -> None:
        missing = [i for i in ids if i not in self.rows]
        if missing:
            self.rows.update(self.keyword.store.chunk_rows(missing))

    def _seen(self, ids: list[int]) -> set[int]:
        self._fetch(ids)
        return self.visible({i: self.rows[i] for i in ids if i in self.rows})

    def doc_freq(self, phrase: str) -> int:
        """Chunks holding `phrase` that the reader may see (the index's count above PRECISE_DF)."""
        if phrase not in self._df:
            total = self.keyword.doc_freq(phrase)
            match = or_match([phrase])
            if total == 0 or total > PRECISE_DF or match is None:
                self._df[phrase] = total
            else:
                ids = [i for i, _ in self.keyword.store.fts_search(match, total)]
                self._df[phrase] = len(self._seen(ids))
        return self._df[phrase]

    def keep(self, hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """The `hits` the reader may see, in their order."""
        seen = self._seen([i for i, _ in hits])
        return [(i, s) for i, s in hits if i in seen]

    def rescore(self, phrases: list[str], hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """The `hits` the reader may see, best first, each scored by BM25 over `phrases` with its counts."""
        ids = [i for i, _ in self.keep(hits)]
        df = {p: self.doc_freq(p) for p in dict.fromkeys(phrases)}
        terms = self.keyword.phrase_scores(list(df), df, ids, self.rows)
        scored = [(i, sum(terms.get(i, {}).values())) for i in ids]
        return sorted(scored, key=lambda x: -x[1])
