"""Hybrid search: vector (cosine) + keyword (BM25) candidates, merged on [0, 1] scores.

Both legs are scored for every candidate of the union (a keyword-only hit still gets its cosine, a
vector-only hit its BM25), so an exact identifier found only by keyword is not lost to minScore
(SPEC §14.2). Cosines are calibrated per model onto [0, 1] and BM25 is sign-corrected (§14.1), so the
threshold means the same thing whichever model is active.

One search, in order (the order is measured, bench/memory_bench.py): the dictionary translation of the
query; the query embedding, alone on every core; the pass over the vector matrix, started by a worker
thread while this thread runs the keyword leg (memory/search/keyword_leg.py over keyword.py: BM25 with a bounded cost) and finished
by both; the translated query vector (from cached word vectors) for candidates in the other language;
then fusion (memory/search/fusion.py), rescue, boosts and snippets. The vector leg's stages are in
memory/search/vector_leg.py. When the query embeds on one core (a long-lived process's
onnxruntime query runner), the worker embeds it and runs the matrix pass while this thread runs the
keyword leg (memory/search/query_runner.py).

A reader other than the owner (memory/policy/audience.py) searches a larger candidate pool, and the candidates
it may not see are dropped before fusion, so neither their scores nor their lines reach its results
(snippet windows grow only into the chunks that are left). The owner's search skips all of that."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hermit.config.memory_search import QueryConfig
from hermit.memory.embedders.base import Embedder
from hermit.memory.index.line_vectors import best_cosines
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.policy.audience import Reader
from hermit.memory.search.answer_type import asks_time, with_time_prior
from hermit.memory.search.dates import query_day_ranges
from hermit.memory.search.dialogue_weights import DIALOGUE_COMBINER
from hermit.memory.search.fts import build_match, query_terms, translated_phrases
from hermit.memory.search.fusion import calibrate, decay, fuse, text_score
from hermit.memory.search.keyword import KeywordSearcher
from hermit.memory.search.keyword_leg import KeywordLeg
from hermit.memory.search.kinds import DialogueKinds, features, in_dialogue_places
from hermit.memory.search.lexicon import Lexicon
from hermit.memory.search.ordering import (
    ConversationCopies,
    LinePrior,
    by_best_line,
    mmr,
    nearest_first,
    notes_first,
    spare_candidates,
    unmatched,
)
from hermit.memory.search.places import group_places, show_places, span_of, spare_places
from hermit.memory.search.query_runner import query_uses_one_core
from hermit.memory.search.reader_counts import DEEPEST_POOL, ReaderCounts
from hermit.memory.search.snippets import Term, render, weigh_terms
from hermit.memory.search.terms import term_coverage
from hermit.memory.search.translation import NO_TRANSLATION, Translation, WordVectors, translate
from hermit.memory.search.tuning import DEFAULT_TUNING, SearchTuning
from hermit.memory.search.vector_leg import VectorLegs, embed_query
from hermit.memory.search.vectors import VectorMatrix
from hermit.memory.store.api import ChunkRow, MemoryStore
from hermit.tokens import count_cjk

# Above this many chunks the in-memory matrix (4 bytes × dims each) is not used; vec0 KNN is.
MATRIX_MAX_CHUNKS = 300_000
# Words of a query that may name a speaker of a conversation (memory.search.places matches them to the "Name:"
# opening a line).
_NAME_WORD = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True)
class Hit:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    score: float
    vector_score: float | None
    text_score: float
    snippet: str
    # The line spans of the returned text (one per window; see memory.search.snippets).
    windows: tuple[tuple[int, int], ...] = ()
    # The lines of the chunk(s) the text was chosen from (overlapping chunks of a file are one place).
    place: tuple[int, int] = (0, 0)


@dataclass
class SearchOutcome:
    hits: list[Hit]
    mode: str  # "hybrid" | "keyword-only" | "vector-only"
    reason: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    withheld: int = 0  # candidates dropped because the reader may not see them
    unmatched: int = 0  # chunks that passed min_score on the question's everyday words only, left out


@dataclass
class _Candidates:
    """The candidates of one search between its stages: their rows and each leg's raw scores."""

    rows: dict[int, ChunkRow]
    ids: list[int]
    cos: dict[int, float]  # raw cosine (the vector leg's, filled in for the other candidates)
    rel: dict[int, float]  # BM25 relevance (the keyword leg's, estimated for the other candidates)
    vec_hits: list[tuple[int, float]]
    kw_hits: list[tuple[int, float]]
    dated: set[int]  # chunks of the days the query names
    withheld: int = 0  # candidates dropped because the reader may not see them
    unmatched: int = 0  # passed min_score but matched only everyday words (ordering.unmatched)
    prior: LinePrior | None = None  # the answer type's lift of a chunk's best line (memory.search.answer_type)


def _mostly_cjk(text: str) -> bool:
    return count_cjk(text) * 2 >= len("".join(text.split()))


class HybridSearcher:
    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder | None,
        query_cfg: QueryConfig,
        *,
        use_matrix: bool = False,
        clock: Callable[[], float] = time.time,
        lexicon: Lexicon | None = None,
        visible: Callable[[Mapping[int, ChunkRow], Reader], set[int]] | None = None,
        tuning: SearchTuning = DEFAULT_TUNING,
    ) -> None:
        self.lexicon = lexicon
        self.tuning = tuning
        # Which of the fetched chunks a reader may see (memory.policy.audience.AudienceMap.visible_ids); without
        # it a restricted reader sees nothing.
        self.visible = visible
        self.store = store
        self.embedder = embedder
        self.cfg = query_cfg
        self.use_matrix = use_matrix
        self.matrix = VectorMatrix(tuning.int8_min_rows)
        self.clock = clock
        self.keyword = KeywordSearcher(store)
        self.keyword_leg = KeywordLeg(self.keyword, query_cfg, tuning, self._chunk_count)
        self._count: tuple[int, int] | None = None
        self.word_vectors = WordVectors()
        self._executor: ThreadPoolExecutor | None = None
        self.word_vector_stats = self.word_vectors.stats
        self._line_vectors = False  # whether the index holds line vectors (read with its identity)
        self.copies = ConversationCopies(store)
        self._kinds = DialogueKinds(store)
        self.vector_legs = VectorLegs(store, self.matrix, self._embed_query, self._worker, self._matrix_ok)

    def _vector_state(self) -> tuple[bool, str | None]:
        """Whether vectors can be searched, and why not."""
        if self.embedder is None:
            return False, "no embedding provider configured (memory_search.provider: none)"
        ident = self.store.identity()
        info = self.embedder.info
        self._line_vectors = bool(ident.get("line_vectors"))
        if not ident:
            return False, "the index is empty; run `hermit memory index`"
        if (ident.get("provider"), ident.get("model"), ident.get("provider_key")) != (
            info.provider, info.model, info.provider_key
        ):
            return False, (f"the index holds vectors of {ident.get('provider')}/{ident.get('model')}, not "
                           f"{info.provider}/{info.model}; run `hermit memory index` to rebuild it")
        if self.store.vector_backend() is None:
            return False, "the index holds no vectors yet (not embedded yet, or embedding failed)"
        problem = self.store.vector_problem()
        return (False, problem) if problem else (True, None)

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               reader: Reader | None = None) -> SearchOutcome:
        """The best places for `query`; `reader` (None: the owner) limits them to what it may see.

        The stages, in order: the query embedding, the vector leg started, the keyword leg, the vector
        leg finished (the two overlap), the candidates gathered and their missing scores filled, the
        chunks the reader may not see dropped, fusion and boosts, the order of those that passed
        min_score, and each place's window. All of it reads one snapshot of the index."""
        with self.store.reading():
            return self._search(query, max_results, min_score, reader)

    def _search(self, query: str, max_results: int | None, min_score: float | None,
                reader: Reader | None) -> SearchOutcome:
        hy = self.cfg.hybrid
        max_results = max_results or self.cfg.max_results
        # A min_score given with the search is a hard threshold; at the configured one, weaker places may
        # fill the results left unused (QueryConfig.fill_results), and places that matched only the
        # question's everyday words are dropped (memory.search.ordering.unmatched).
        judged = min_score is None
        fill = self.cfg.fill_results and judged
        min_score = self.cfg.min_score if min_score is None else min_score
        pool = min(hy.max_candidates, max_results * hy.candidate_multiplier)
        restricted = reader is not None and not reader.owner
        if restricted:
            pool *= self.tuning.restricted_pool_factor
        timings: dict[str, float] = {}
        match = build_match(query)
        use_vec, reason = self._vector_state()
        tr = self._translate(query)
        q: np.ndarray | None = None
        # A query embedding on one core (E5Embedder's onnxruntime query runner) runs in the worker
        # beside the keyword leg, then the matrix pass there: the search's two longest stages overlap.
        one_core = use_vec and query_uses_one_core(self.embedder)
        beside = one_core and self._matrix_ok()
        # A server store's KNN runs in the worker on a connection of its own beside the keyword leg's
        # SQL (after the query embedding there too when that takes one core).
        knn_beside = use_vec and not beside and self.store.knn_beside
        if use_vec and not beside and not (knn_beside and one_core):
            q, reason = self._embed_query(query, timings)
        rows: dict[int, ChunkRow] = {}
        leg = self.vector_legs.start(q, pool, timings, query if beside else None,
                                    query if knn_beside and (q is not None or one_core) else None)
        # A restricted reader's keyword scores count only the notes it may see (memory.search.reader_counts).
        counts = None
        if restricted and self.visible is not None:
            see, who = self.visible, reader
            assert who is not None
            counts = ReaderCounts(self.keyword, lambda r: see(r, who), rows)
        kw_hits, held, timings["keyword_ms"] = self.keyword_leg.run(query, tr, pool, rows, counts)
        # The snippets' weighed terms need only the query: here, while the worker may still be on the
        # vector leg (the keyword leg was the shorter one), not after it.
        terms = self._line_terms(query, tr, self.keyword.doc_freq if counts is None else counts.doc_freq)
        vec_hits = self.vector_legs.finish(leg, pool, timings)
        if beside or leg.knn is not None:
            q, reason = leg.q, leg.reason
        if counts is not None and q is not None:
            vec_hits = self.vector_legs.visible_hits(q, vec_hits, pool, counts, leg.matrix_ok)
        c = self._gather(query, tr, q, leg.matrix_ok, vec_hits, kw_hits, held, rows, pool, match, counts)
        if restricted:
            assert reader is not None
            self._restrict(c, reader)
        c.prior = self._answer_prior(query, q)
        scored = self._score(query, c, q, match)
        passed = self._order(scored, c, q, max_results, min_score, timings, judged)
        hits = self._show(query, terms, passed, scored if fill and q is not None else [], c, q, max_results, min_score)
        mode = "hybrid" if q is not None and match else ("keyword-only" if q is None else "vector-only")
        if q is None and reason is None:
            reason = "no vector search"
        return SearchOutcome(hits, mode, reason if q is None else None, timings, c.withheld, c.unmatched)

    def _embed_query(self, query: str, timings: dict[str, float]) -> tuple[np.ndarray | None, str | None]:
        assert self.embedder is not None
        return embed_query(self.embedder, query, timings)

    def _gather(self, query: str, tr: Translation, q: np.ndarray | None, matrix_ok: bool,
                vec_hits: list[tuple[int, float]], kw_hits: list[tuple[int, float]], held: set[int],
                rows: dict[int, ChunkRow], pool: int, match: str | None, counts: ReaderCounts | None = None) -> _Candidates:
        """The union of both legs' hits and the chunks of the days the query names, with their rows, and
        each leg's score for every candidate (a keyword-only hit gets its cosine, a vector-only hit an
        estimate of its BM25). A restricted reader's keyword hits are only those it may see, so whether
        the pool was full says nothing to it: its vector-only hits are always estimated."""
        cos = dict(vec_hits)
        rel = dict(kw_hits)
        dated, restricted = self._dated_chunks(query, counts), counts is not None
        ids = list(dict.fromkeys([i for i, _ in vec_hits] + [i for i, _ in kw_hits] + sorted(dated)))
        rows.update(self.store.chunk_rows([i for i in ids if i not in rows]))
        ids = [i for i in ids if i in rows]  # drop deleted chunks still in the matrix
        if q is not None:
            need = [i for i in ids if i not in cos]
            if need:
                cos.update(self.matrix.scores(q, need) if matrix_ok else self.store.vec_scores(q, need))
        # The translated query vector judges the candidates written wholly in the other language
        # (the original query vector judges the rest: a mixed chunk holds the query's language too;
        # taking the better of both there lifted unrelated mixed chunks, R@6 0.841 vs 0.846 and MRR
        # 0.717 vs 0.730 on bench/retrieval). It does not search on its own: its own top-k added
        # nothing there and cost a second pass over the matrix. Computed only when such candidates
        # exist, so an English-only memory never pays for it.
        # It judges only chunks the translated keywords matched, or that are very close to it: the
        # vector of two dictionary words is close to much unrelated text in that language (`peanut
        # allergy` → 花生 + 过敏 scored an unrelated Chinese note 0.40), so a translated match needs
        # evidence in the words too.
        other_script = 0 if _mostly_cjk(query) else 2
        other = [i for i in ids if rows[i].script == other_script]
        if q is not None and other and tr.vector_words and self.cfg.translate_vectors:
            assert self.embedder is not None
            tq = self.word_vectors.query_vector(self.embedder, tr.vector_words)
            if tq is not None:
                tcos = self.matrix.scores(tq, other) if matrix_ok else self.store.vec_scores(tq, other)
                for i, c in tcos.items():
                    if i in held or self._vscore(c) >= self.tuning.unheld_translation_min:
                        cos[i] = c
        if match and kw_hits:
            # A candidate outside the keyword pool scores below the pool's weakest hit. Re-running the
            # OR query for it (FTS5 evaluates the whole MATCH before `rowid IN`) cost ~20 ms at 100k
            # chunks, so its relevance is estimated: 0 when the pool held every match, else the
            # weakest pooled relevance scaled by the share of query terms the chunk contains.
            missing = {i: rows[i].text for i in ids if i not in rel}
            if missing and (restricted or len(kw_hits) >= pool):
                floor = min(r for _, r in kw_hits)
                for i, share in term_coverage(query_terms(query), missing).items():
                    rel[i] = floor * share
        return _Candidates(rows, ids, cos, rel, vec_hits, kw_hits, dated)

    def _restrict(self, c: _Candidates, reader: Reader) -> None:
        """Drop the candidates `reader` may not see, before fusion: neither their scores nor their lines
        reach its results."""
        keep = self.visible(c.rows, reader) if self.visible is not None else set()
        c.withheld = sum(1 for i in c.ids if i not in keep)
        c.ids = [i for i in c.ids if i in keep]
        c.rows = {i: r for i, r in c.rows.items() if i in keep}
        c.cos = {i: s for i, s in c.cos.items() if i in keep}
        c.rel = {i: r for i, r in c.rel.items() if i in keep}
        c.vec_hits = [(i, s) for i, s in c.vec_hits if i in keep]
        c.kw_hits = [(i, r) for i, r in c.kw_hits if i in keep]

    def _score(self, query: str, c: _Candidates, q: np.ndarray | None, match: str | None) -> list[tuple[int, float]]:
        """Each candidate's score on [0, 1]: both legs fused, then the exact-match rescue, the date boost
        and temporal decay."""
        hy = self.cfg.hybrid
        rel, cos = c.rel, c.cos
        coverage: dict[int, float] = {}
        if match and q is not None and hy.exact_match_rescue:
            coverage = term_coverage(query_terms(query), {i: c.rows[i].text for i in c.ids if rel.get(i, 0) > 0})
        scored = fuse(c.ids, cos, rel, c.kw_hits, q is not None, self.cfg.hybrid, self._vscore)
        if coverage:
            # The rescue lifts a chunk holding every query term to its text score, less up to 0.1 by
            # its vector score: exact hits stay above minScore, and several of them do not all pile
            # up at 1.000 (their order stays visible to the agent).
            scored = [(i, max(s, self._tscore(rel.get(i, 0.0), rel) - 0.1 * (1 - self._vscore(cos.get(i))))
                       if coverage.get(i, 0) >= 1.0 else s) for i, s in scored]
        if c.dated:
            boost = self.cfg.date_boost
            scored = [(i, s + (1 - s) * boost if i in c.dated else s) for i, s in scored]
        return self._decay(scored, c.rows)

    def _order(self, scored: list[tuple[int, float]], c: _Candidates, q: np.ndarray | None, max_results: int,
               min_score: float, timings: dict[str, float], judged: bool = True) -> list[tuple[int, float]]:
        """The candidates that pass min_score, best first: by score, then by their best line's vector,
        MMR when configured, and notes before copies of conversations. None when `judged` (min_score is
        the configured one) and they matched only the question's everyday words."""
        scored = sorted(scored, key=lambda s: -s[1])
        # min_score is applied here, once: what follows only orders the chunks that passed.
        scored = [(i, s) for i, s in scored if s >= min_score]
        head: list[tuple[int, float]] = []  # the chunks line vectors re-order, in fused order
        if q is not None and self._line_vectors and self.tuning.line_weight > 0:
            t0 = time.perf_counter()
            depth = self.tuning.line_order_depth * max_results
            head = scored[:depth]
            scored, nearest = self._order_by_lines(scored, c.rows, q, c.cos, depth, self.tuning.line_weight, c.prior)
            timings["lines_ms"] = (time.perf_counter() - t0) * 1000
            if judged and unmatched(scored, nearest, self.tuning):
                c.unmatched = len(scored)
                return []
        if self.cfg.mmr.enabled:
            scored = mmr(scored, c.rows, max_results, self.cfg.mmr.lambda_)
        scored = notes_first(scored, c.rows, self.copies, self.tuning.copy_weight)
        # Last, so that notes_first's sort by score (when a session dump passed) does not undo it; not with
        # MMR, whose order is the configured one.
        if head and q is not None and self.tuning.dialogue_order and not self.cfg.mmr.enabled:
            scored = self._dialogue_order(head, scored, c, q)
        return scored

    def _show(self, query: str, terms: list[Term], scored: list[tuple[int, float]], pool: list[tuple[int, float]],
              c: _Candidates, q: np.ndarray | None, max_results: int, min_score: float) -> list[Hit]:
        """The ordered chunks as up to max_results places (memory.search.places), each with its window of
        lines, then places under min_score (of `pool`, every candidate scored) in what those left.

        Windows are chosen on query words, and on their translation (a Chinese question about an English
        note should show the English line that answers it)."""
        chosen = group_places(scored, c.rows, max_results)
        names = frozenset(w.lower() for w in _NAME_WORD.findall(query))
        budget = self.tuning.search_budget(max_results)
        places = show_places(chosen, c.rows, terms, budget, names, self.tuning)
        if pool and scored and len(chosen) < max_results and sum(p.size(p.lo, p.hi) for p in places) < budget:
            # Only now are they sorted and their lines read: most searches fill every slot or the budget.
            spare = self._spare_by_lines(spare_candidates(pool, scored, min_score, self.tuning.spare_floor,
                                                            self.tuning.fill_min_top), c, q,
                                         max_results)
            more, shown = spare_places(chosen, places, spare, c.rows, terms, budget, max_results, names, self.tuning)
            chosen, places = chosen + more, places + shown
        hits: list[Hit] = []
        for group, place in zip(chosen, places, strict=True):
            cid, score = group[0]
            row = c.rows[cid]
            snippet, a, b = render(place, terms)
            hits.append(Hit(cid, row.path, row.source, a, b, round(score, 4),
                            None if q is None else round(self._vscore(c.cos.get(cid)), 4),
                            round(self._tscore(c.rel.get(cid, 0.0), c.rel), 4), snippet, ((a, b),),
                            span_of(group, c.rows)))
        return hits

    def _spare_by_lines(self, spare: list[tuple[int, float]], c: _Candidates, q: np.ndarray | None,
                        max_results: int) -> list[tuple[int, float]]:
        """The first line_order_depth × max_results candidates under min_score in the order they may fill
        the results left (memory.search.ordering.nearest_first; as deep as the slots left only: 0.858)."""
        assert q is not None
        head = spare[:self.tuning.line_order_depth * max_results]
        return nearest_first(spare, self._order_by_lines(head, c.rows, q, c.cos, len(head), 1.0, c.prior)[0]
                             if self._line_vectors else [(i, self._vscore(c.cos.get(i))) for i, _ in head])

    def _dialogue_order(self, head: list[tuple[int, float]], ordered: list[tuple[int, float]], c: _Candidates,
                        q: np.ndarray) -> list[tuple[int, float]]:
        """The dialogue chunks of `head` (the first passed chunks, in fused order) put in the order of the
        combiner learned on conversations, in the places they hold in `ordered` (memory.search.kinds);
        unchanged when fewer than two of them are dialogue (a memory of notes never goes further)."""
        ids = self._kinds.among([c.rows[i] for i, _ in head])
        dialogue = {i for i, _ in head if c.rows[i].id in ids}
        if len(dialogue) < 2:
            return ordered
        spans = [(c.rows[i].path, c.rows[i].start_line, c.rows[i].end_line) for i, _ in head]
        best = best_cosines(self.store.line_vector_blobs(spans), q, len(spans))
        if c.prior is not None:
            best = c.prior(best, [c.rows[i] for i, _ in head])
        cosine = [self._vscore(c.cos.get(i)) for i, _ in head]
        x = features(head, [self._tscore(c.rel.get(i, 0.0), c.rel) for i, _ in head], cosine,
                     [v if b is None else self._vscore(b) for v, b in zip(cosine, best, strict=True)],
                     [i in c.dated for i, _ in head])
        value = dict(zip((i for i, _ in head), DIALOGUE_COMBINER.logits(x).tolist(), strict=True))
        return in_dialogue_places(ordered, dialogue, value)

    def _order_by_lines(self, passed: list[tuple[int, float]], rows: dict[int, ChunkRow], q: np.ndarray,
                        cos: dict[int, float], depth: int, weight: float,
                        prior: LinePrior | None = None) -> tuple[list[tuple[int, float]], float]:
        return by_best_line(passed, rows, self.store, q, cos, self._vscore, depth, weight, prior)

    def _answer_prior(self, query: str, q: np.ndarray | None) -> LinePrior | None:
        """For a question asking for a time, a chunk's best line lifted to its best line carrying one
        (memory.search.answer_type; SearchTuning.time_line_bonus, calibrated, as a raw cosine here)."""
        bonus = self.tuning.time_line_bonus
        if q is None or bonus <= 0 or not self._line_vectors or self.embedder is None or not asks_time(query):
            return None
        info = self.embedder.info
        bump, store, qv = bonus * (info.score_ceiling - info.score_floor), self.store, q
        return lambda best, rows: with_time_prior(best, rows, store, qv, bump)

    def _line_terms(self, query: str, tr: Translation, doc_freq: Callable[[str], int]) -> list[Term]:
        n = self.keyword.doc_count()
        own = weigh_terms(query_terms(query), doc_freq, n)
        other = [t for t in tr.terms if t.lower() not in {o.lower() for o in query_terms(query)}]
        # A translated term's parts are the phrases the keyword leg counted (cached): no new FTS counts.
        return own + weigh_terms(other, lambda t: min((doc_freq(p) for p in translated_phrases([t])),
                                                      default=0), n,
                                 discount=max(self.cfg.translation_weight, 0.0))

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hermit-vector")
        return self._executor

    def _translate(self, query: str) -> Translation:
        if self.lexicon is None or (self.cfg.translation_weight <= 0 and not self.cfg.translate_vectors):
            return NO_TRANSLATION
        return translate(self.lexicon, query, self.tuning.translated_vector_words)

    def _matrix_ok(self) -> bool:
        """Whether the vector leg runs on the in-memory matrix (a long-lived process, a memory not too large)."""
        return self.use_matrix and self.store.matrix_ok and self._chunk_count() <= MATRIX_MAX_CHUNKS

    def _chunk_count(self) -> int:
        """Chunks in the index, counted once per index generation (not on every search)."""
        gen = self.store.generation()
        if self._count is None or self._count[0] != gen:
            self._count = (gen, self.store.chunk_count())
        return self._count[1]

    def _dated_chunks(self, query: str, counts: ReaderCounts | None = None) -> set[int]:
        """Chunks of daily logs of the days the query names (memory.search.dates); a restricted reader's: 200 it sees."""
        if self.cfg.date_boost <= 0:
            return set()
        today = dt.datetime.fromtimestamp(self.clock()).date()
        days: list[str] = []
        for r in query_day_ranges(query, today):
            n = min((r.end - r.start).days, 31)
            days.extend((r.start + dt.timedelta(days=k)).isoformat() for k in range(n + 1))
        if not days:
            return set()
        ids = self.store.chunk_ids_for_days(days)
        seen = ids if counts is None else [i for i, _ in counts.keep([(i, 0.0) for i in ids])]
        if counts is not None and len(seen) < len(ids) == 200:  # hidden ones held places: look deeper, once
            seen = [i for i, _ in counts.keep([(i, 0.0) for i in self.store.chunk_ids_for_days(days, DEEPEST_POOL)])]
        return set(seen[:200])

    def _tscore(self, r: float, all_rel: dict[int, float]) -> float:
        return text_score(r, all_rel, self.cfg.hybrid)

    def _decay(self, scored: list[tuple[int, float]], rows: dict[int, ChunkRow]) -> list[tuple[int, float]]:
        return decay(scored, rows, self.cfg.temporal_decay, self.clock)

    def _vscore(self, c: float | None) -> float:
        if c is None or self.embedder is None:
            return 0.0
        return calibrate(c, self.embedder.info)
