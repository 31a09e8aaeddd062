"""The search's measured settings in one frozen object: how places are ranked and how much text they show.

Each default was chosen on the benchmarks (bench/retrieval: `results.md` for the generated suite,
`conversations.md` for LoCoMo); a benchmark variant is `dataclasses.replace(SearchTuning(), …)` passed
to the searcher, never a module constant patched for the run. What a user configures is in
`config.memory_search.QueryConfig`; this holds what is measured, not chosen per install.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchTuning:
    # -- ranking (memory.search.hybrid) ----------------------------------------------------------------------
    # text_normalization "query": a chunk holding this share of the query's own BM25 scores as a full
    # keyword match. 0.2 loses no answer on either suite and halves the absent-answer searches of the
    # LoCoMo dev split that return anything (0.88 → 0.51); 0.3 loses one generated paraphrase question
    # (every word of it in no note), 0.4 and more lose LoCoMo answers (bench/retrieval: `query-scale-*`).
    query_scale_share: float = 0.2
    # The best line's share of a place's score when the passed places are put in order by their line
    # vectors (memory.index.line_vectors; 0.1-0.4 measured: `line-weight-*`). 0: line vectors are not used.
    line_weight: float = 0.2
    # How many places' worth of passed chunks (× max_results) line vectors re-order; the rest keep their place.
    line_order_depth: int = 2
    # Among those, the dialogue chunks (memory.search.kinds: transcripts, session dumps, chat logs) are put
    # in the order of a combiner learned on conversations, in the places dialogue holds; notes keep the
    # blend. LoCoMo dev held out +0.010 / +0.012 / +0.000 seen R@6, the generated notes suite unchanged
    # (bench/retrieval/README.md, round 13). False: the blend for every kind (round 12's order).
    dialogue_order: bool = True
    # For a question asking for a time ("When did …"), a line carrying a time expression counts this much
    # more (calibrated cosine) when a chunk's best line is taken for the order (memory.search.answer_type);
    # round 9's nearness reads the plain cosines. 0: off. LoCoMo dev seen R@6 0.867 → 0.870, MRR 0.811 → 0.818
    # (six "when" questions, none lower), a gain held out on each of 26, 30 and 41; the generated suite
    # identical. 0.4 gives LoCoMo the same and moves one generated question from rank 2 to 4 ("when did the
    # Atlas cutover end up happening": earlier plans carry dates too); 0.2 loses a LoCoMo rank and finds one
    # fewer (bench/retrieval/README.md, round 17).
    time_line_bonus: float = 0.3
    # A session transcript or session dump ranks at this share of its score (memory.search.ordering.notes_first).
    copy_weight: float = 0.8
    # The translated query vector judges an other-language chunk that holds no translated word only when
    # it is at least this close (calibrated); otherwise the original query vector does.
    unheld_translation_min: float = 0.7
    # The translated query vector is the normalised sum of the vectors of the best translation of each
    # query word, at most this many. Word vectors are cached, so a word costs one embedding the first
    # time only (a joint embedding of the translated words cost ~10 ms on every search). On
    # bench/retrieval: R@6 0.846, MRR 0.730; embedding 8 translated words jointly on every search, the
    # previous design: R@6 0.858, MRR 0.719.
    translated_vector_words: int = 4
    # A reader who may not see every chunk searches this many times the usual candidates, so that
    # dropping the others' chunks does not leave it with too few to rank.
    restricted_pool_factor: int = 4

    # -- the matrix pass (memory.search.vectors) -----------------------------------------------------------
    # From this many rows the pass runs on the int8 copy (memory.search.vector_int8: the same top-k, a
    # quarter of the memory traffic); below it the float32 pass costs ~2 ms or less, not worth a second copy.
    int8_min_rows: int = 20_000

    # -- places (memory.search.places) -------------------------------------------------------------------
    # When the question names a speaker of a conversation (a line `- [D1:3] Caroline: …`, `- Tom: …`),
    # the lines of the other speakers in a place count this share of their query words: "What has
    # Melanie painted?" is answered by Melanie's turns; Caroline's "did you paint that?" only leads to
    # one (and still lends the reply after it its neighbour share). 0-0.15 give the same results;
    # 0.3-0.85 less (`speaker-*`). 1: every speaker's lines weigh alike.
    other_speaker_share: float = 0.0

    # -- places under min_score (QueryConfig.fill_results; memory.search.places.spare_places) ---------------
    # Only candidates scoring above this may fill: a score of 0 or nearly (no query word, a cosine at the
    # calibration floor) is no evidence at all. 0 gives the same recall on LoCoMo dev with more results,
    # 0.1 and 0.15 lose multi-hop turns (seen 0.858 and 0.857 vs 0.861; `spare-floor-*`).
    spare_floor: float = 0.05
    # They fill only when the best place that passed scores at least this: a search whose best is only
    # just over min_score has probably not found the topic (most questions whose answer is in no note,
    # when anything passes), and filling its slots only adds noise. On LoCoMo dev 0.45 and 0.5 give the
    # same recall as 0 in every conversation and category, with 2.31 → 2.06 / 1.85 results on the
    # no-answer questions; 0.55 and 0.6 lose multi-hop turns in two of three conversations (`fill-top-*`).
    fill_min_top: float = 0.5
    # A search whose best place scores under unmatched_top and none of whose first places
    # (line_order_depth × max_results), nor any of their lines, is unmatched_line close to the question
    # (calibrated cosine, memory.index.line_vectors) returns nothing: it matched the question's everyday
    # words (a name on every turn, "go", "number"), not its answer (memory.search.ordering.unmatched; 0:
    # never; a min_score given with the search turns it off). LoCoMo dev: no-answer searches with a result
    # 0.511 → 0.321 with the same recall in every conversation; the generated suite unchanged. A line at
    # 0.3 loses four answers in two conversations, 0.2 gives 0.402; the best place under 0.55, 0.6 or 0.7
    # gives the same results (0.6: the middle), 0.5 only 0.364, and with no bound at all (places holding
    # most of the question but nothing near it) three answers are lost in two conversations
    # (bench/retrieval/README.md, round 9: `unmatched-*`).
    unmatched_line: float = 0.25
    unmatched_top: float = 0.6

    # -- windows (memory.search.snippets) ----------------------------------------------------------------
    # The windows of one search share this many characters per result asked for (4,200 for the default
    # 6): a cap per search, SPEC §4's 700 per snippet pooled. Round 5 let each place returned claim 850
    # when that was more (5,100 for six places; dev recall 0.855 instead of 0.839) but its mean only
    # happened to fit 4,200 (bench/retrieval/README.md, round 6).
    chars_per_result: int = 700
    # No single window grows past this: six results keep room for six places (`cap-2000`).
    max_window_chars: int = 2_800
    # A line without query words is still worth this share of the place's best line (context, answers;
    # `no-context-value`).
    context_value: float = 0.15
    # The line after a matching line gets this share of its score: the reply to a turn, the bullet
    # under a heading (`no-neighbour`). The line before a match gets nothing: a question's answer
    # follows it (round 5's `both-neighbours` gave it the same share: 0.850 vs 0.855).
    neighbour_share: float = 0.35
    # Rank weight of the r-th result (0-based): the top results get their windows grown first.
    rank_decay: float = 0.8
    # How many lines one growth step may take at once, reaching a matching line across the others: a
    # dialogue's answer is often several turns past the line that matched (`lookahead-6`; 8 to 24 gave
    # identical results).
    lookahead_lines: int = 10

    def search_budget(self, max_results: int) -> int:
        """Characters the windows of one search share."""
        return self.chars_per_result * max_results


DEFAULT_TUNING = SearchTuning()
