"""The keyword leg: FTS5 BM25 with a bounded cost per query.

FTS5's bm25() scores every row the MATCH yields and, for each phrase, walks the phrase's whole doclist
once to count its documents. An OR query that contains a common word ("notes", "项目") therefore
costs ~1 µs per matching row: 50–90 ms at 100k chunks, the largest part of a search.

A common word adds little to BM25 (idf = ln((N − df + ½)/(df + ½)): 2.2 at 10 % of the chunks,
~0 above 50 %), so it is not needed to find the candidates. The query's phrases are sorted by document
frequency (counted once per index generation) into three tiers:

- kept: the rarest, whose documents fit ROW_BUDGET — FTS5 ranks their documents (the candidates);
- scored: the next ones, while their doclists fit SCORE_WALK_BUDGET — FTS5 scores them too, on the
  candidates only (`kept AND (kept OR scored)`; the kept phrases count twice there, and their own
  share, computed in Python, is subtracted);
- skipped: the commonest — their BM25 terms are added in Python.

The Python terms use FTS5's formula, idf, k1, b and document lengths, with term frequencies counted on
the candidates' text against FTS5's own porter tokens, so scores equal bm25()'s (tested to 1e-4). The one
thing given up: a chunk holding only non-kept query words is not a candidate.

When even the rarest phrase is common (a query of only everyday words), FTS5 ranks it over the
newest chunks that fit the budget (highest rowids; new and edited notes get new rowids).
"""

from __future__ import annotations

import bisect
import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hermit.db import connect_memory
from hermit.memory.search.fts import CJK_LETTERS, FTS_TOKENIZER, bm25_idf, or_match
from hermit.memory.store.api import ChunkRow, MemoryStore
from hermit.tokens import count_cjk

K1 = 1.2  # FTS5 bm25() constants
B = 0.75
# Rows one query may hand to bm25(): ~4 ms on a 2-core machine.
ROW_BUDGET = 4_000
# Documents whose doclists FTS5 may walk to score the next-commonest phrases on the candidates.
SCORE_WALK_BUDGET = 15_000
_CACHE_MAX = 50_000
_CJK_CHAR = re.compile(f"[{CJK_LETTERS}]")


class FtsTokens:
    """Exact FTS5 tokens (porter + unicode61, as the index uses) for words, via an in-memory FTS5 table.

    Results are cached per word, so a long-lived process asks SQLite once per distinct word.
    """

    def __init__(self) -> None:
        self._conn = connect_memory()
        self._conn.execute(f"create virtual table t using fts5(x, tokenize='{FTS_TOKENIZER}')")
        self._conn.execute("create virtual table tv using fts5vocab(t, instance)")
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[str, ...]] = {}

    def tokens(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            found = self.uncached(missing)
            with self._lock:
                if len(self._cache) > _CACHE_MAX:
                    self._cache.clear()
                for text, toks in zip(missing, found, strict=True):
                    self._cache[text] = toks
        return [self._cache[t] for t in texts]

    def uncached(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        """The tokens of `texts`, in order, not remembered."""
        got: dict[int, list[str]] = {}
        with self._filled(texts):
            for doc, term in self._conn.execute("select doc, term from tv order by doc, offset"):
                got.setdefault(int(doc), []).append(str(term))
        return [tuple(got.get(i, ())) for i in range(len(texts))]

    def positions(self, texts: Sequence[str]) -> list[tuple[dict[str, list[int]], int]]:
        """Per text: each token's 0-based positions, and the token count (whole documents at index time)."""
        out: list[tuple[dict[str, list[int]], int]] = [({}, 0) for _ in texts]
        with self._filled(texts):
            for doc, term, offset in self._conn.execute("select doc, term, offset from tv"):
                out[doc][0].setdefault(term, []).append(offset)
            for doc, n in self._conn.execute("select doc, count(*) from tv group by doc"):
                out[doc] = (out[doc][0], int(n))
        return out

    @contextlib.contextmanager
    def _filled(self, texts: Sequence[str]) -> Iterator[None]:
        """The table holding `texts` (rowid = position) while the block reads it, then empty again by a
        rollback: 45 µs for a query's dozen words where deleting the last texts' rows first took 150
        (a search tokenises ~7 such batches of new words)."""
        with self._lock:
            self._conn.execute("begin")
            try:
                self._conn.executemany("insert into t(rowid, x) values (?, ?)", list(enumerate(texts)))
                yield
            finally:
                self._conn.execute("rollback")


@dataclass
class KeywordPlan:
    kept: list[str]  # ranked by FTS5 over their documents
    scored: list[str]  # also scored by FTS5, but only on the kept phrases' documents
    skipped: list[str]  # the commonest: their BM25 terms are added in Python
    df: dict[str, int]
    min_rowid: int | None = None


class KeywordSearcher:
    def __init__(self, store: MemoryStore, budget: int = ROW_BUDGET) -> None:
        self.store = store
        self.budget = budget
        self.tokens = FtsTokens()
        self._stamp: tuple[str | None, int] | None = None
        self._df: dict[str, int] = {}
        self._stats: tuple[int, float] | None = None
        self._lock = threading.Lock()
        self.last_plan: KeywordPlan | None = None

    def _refresh(self) -> None:
        meta = self.store.meta()
        stamp = (meta.get("index_id"), int(meta.get("generation", "0")))
        if stamp != self._stamp:
            self._stamp, self._df, self._stats = stamp, {}, None

    def doc_freq(self, phrase: str) -> int:
        """Chunks holding `phrase` (cached per index generation)."""
        if phrase not in self._df:
            match = or_match([phrase])
            self._df[phrase] = self.store.fts_count(match) if match else 0
        return self._df[phrase]

    def doc_count(self) -> int:
        """Chunks in the FTS index (as bm25() counts them), read once per index generation."""
        with self._lock:
            self._refresh()
            if self._stats is None:
                self._stats = self.store.fts_stats()
            return self._stats[0]

    def ideal(self, phrases: list[str], doc_freq: Callable[[str], int] | None = None) -> float:
        """BM25 of a chunk of average length holding each of `phrases` once: the sum of their FTS5 idfs
        (counted by `doc_freq`, default this index's own counts).

        A phrase found nowhere counts at its largest idf: the question asks for it, and no note has it."""
        n = self.doc_count()
        count = doc_freq or self.doc_freq
        return sum(bm25_idf(n, d) for d in (count(p) for p in dict.fromkeys(phrases)))

    def plan(self, phrases: list[str]) -> KeywordPlan:
        # A query's new words counted at once (one statement for their one-token lookups).
        missing = [(p, m) for p in dict.fromkeys(phrases) if p not in self._df for m in [or_match([p])] if m]
        if missing:
            self._df.update(zip([p for p, _ in missing], self.store.fts_counts([m for _, m in missing]), strict=True))
        df = {p: self.doc_freq(p) for p in dict.fromkeys(phrases)}
        live = sorted((p for p in df if df[p] > 0), key=lambda p: df[p])
        kept: list[str] = []
        total = 0
        for p in live:
            if kept and total + df[p] > self.budget:
                break
            kept.append(p)
            total += df[p]
        rest = live[len(kept):]
        # Scoring a phrase on the candidates still walks its whole doclist once (for its idf), at
        # ~0.06 µs per document: cheap up to a few tens of thousands.
        scored: list[str] = []
        walk = 0
        for p in rest:
            if walk + df[p] > SCORE_WALK_BUDGET:
                break
            scored.append(p)
            walk += df[p]
        plan = KeywordPlan(kept, scored, rest[len(scored):], df)
        if kept and total > self.budget:
            lo, hi = self.store.max_chunk_id()
            plan.min_rowid = hi - int((hi - lo) * self.budget / total)
        return plan

    def search(self, phrases: list[str], limit: int,
               rows: dict[int, ChunkRow] | None = None) -> list[tuple[int, float]]:
        """(chunk id, BM25 relevance ≥ 0) best first, for the OR of `phrases`.

        Chunk rows read along the way are added to `rows` (the caller needs them too)."""
        with self._lock:
            self._refresh()
            plan = self.plan(phrases)
            self.last_plan = plan
            match = or_match(plan.kept)
            if match is None:
                return []
            if not plan.scored and not plan.skipped:
                return self.store.fts_search(match, limit, plan.min_rowid)
            known = {} if rows is None else rows
            if plan.scored:
                # The kept phrases' documents, ranked by all of kept + scored. The kept phrases
                # appear twice in the expression, so FTS5 counts them twice; their own share is
                # subtracted below.
                both = or_match(plan.kept + plan.scored)
                hits = self.store.fts_search(f"({match}) AND ({both})", limit * 3, plan.min_rowid)
                twice = set(plan.kept)
            else:
                hits = self.store.fts_search(match, limit * 3, plan.min_rowid)
                twice = set()
            # One pass over the candidates' text for both corrections.
            per_phrase = self._python_scores(sorted(twice) + plan.skipped, plan.df, [i for i, _ in hits], known)
            scored = []
            for i, r in hits:
                terms = per_phrase.get(i, {})
                r -= sum(v for p, v in terms.items() if p in twice)
                scored.append((i, max(0.0, r) + sum(v for p, v in terms.items() if p not in twice)))
            scored.sort(key=lambda x: -x[1])
            return scored[:limit]

    def phrase_scores(self, phrases: list[str], df: dict[str, int], ids: list[int],
                      known: dict[int, ChunkRow]) -> dict[int, dict[str, float]]:
        """Each chunk's BM25 term for each of `phrases`, computed as bm25() would with the counts `df`
        (memory.search.reader_counts gives a reader's own)."""
        with self._lock:
            self._refresh()
            if self._stats is None:
                self._stats = self.store.fts_stats()
            return self._python_scores(phrases, df, ids, known)

    def _python_scores(self, phrases: list[str], df: dict[str, int], ids: list[int],
                       known: dict[int, ChunkRow]) -> dict[int, dict[str, float]]:
        """The BM25 terms of `phrases` for chunks `ids`, computed as FTS5's bm25() would: its idf,
        k1 and b, its document lengths, and term frequencies counted on the chunks' text."""
        if not ids:
            return {}
        if self._stats is None:
            self._stats = self.store.fts_stats()
        n, avgdl = self._stats
        if n <= 0 or avgdl <= 0:
            return {}
        known.update(self.store.chunk_rows([i for i in ids if i not in known]))
        rows = {i: known[i] for i in ids if i in known}
        lengths = self.store.fts_doc_lengths(list(rows))
        order = list(rows)
        starts: list[int] = []
        pos = 0
        for cid in order:
            starts.append(pos)
            pos += len(rows[cid].text) + 1
        joined = "\n".join(rows[cid].text for cid in order).lower()
        # Latin words as the index splits them: a CJK run never glues onto a neighbouring word
        # (each CJK character becomes a space, so offsets stay those of `joined`).
        latin = _CJK_CHAR.sub(" ", joined)
        tf: dict[int, dict[str, int]] = {}

        def add(phrase: str, at: int) -> None:
            counts = tf.setdefault(order[bisect.bisect_right(starts, at) - 1], {})
            counts[phrase] = counts.get(phrase, 0) + 1

        for phrase, toks in zip(phrases, self.tokens.tokens(phrases), strict=True):
            if toks and all(count_cjk(t) for t in toks):
                # CJK tokens are the unigrams/bigrams of a run: the phrase is that run's substring.
                run = toks[0] + "".join(t[-1] for t in toks[1:])
                for m in re.finditer(re.escape(run), joined):
                    add(phrase, m.start())
                continue
            pattern = self._phrase_pattern(toks, latin)
            if pattern is None:
                continue
            for m in pattern.finditer(latin):
                if _starts_word(latin, m.start()):
                    add(phrase, m.start())
        out: dict[int, dict[str, float]] = {}
        for cid, counts in tf.items():
            norm = K1 * (1 - B + B * lengths.get(cid, avgdl) / avgdl)
            for phrase, f in counts.items():
                d = df[phrase]
                idf = bm25_idf(n, d)
                out.setdefault(cid, {})[phrase] = idf * f * (K1 + 1) / (f + norm)
        return out

    def _phrase_pattern(self, toks: tuple[str, ...], text: str) -> re.Pattern[str] | None:
        """A regex for the surface forms of the token sequence `toks` in `text` (lower-cased).

        Each part starts with a literal (so `re` scans fast); callers check the word boundary before
        a match with _starts_word."""
        parts: list[str] = []
        for tok in toks:
            if not tok.isalpha() or not tok.isascii():
                parts.append(re.escape(tok))
                continue
            # A porter stem is the word minus a suffix, its last letter or two possibly changed
            # (happy → happi, hoping → hope): only words that start with the stem's head can stem
            # to it; FTS5 itself decides which of them do.
            head = tok[: max(2, len(tok) - 2)]
            words = sorted({m.group(0) for m in re.finditer(re.escape(head) + r"[^\W_]*", text)
                            if _starts_word(text, m.start())})
            forms = [w for w, got in zip(words, self.tokens.tokens(words), strict=True) if got == (tok,)]
            if not forms:
                return None
            tails = sorted((re.escape(f[len(head):]) for f in forms), key=len, reverse=True)
            parts.append(re.escape(head) + "(?:" + "|".join(tails) + ")")
        return re.compile(r"[\W_]+".join(parts) + r"(?![^\W_])")


def _starts_word(text: str, i: int) -> bool:
    return i == 0 or not text[i - 1].isalnum()
