"""Which places a search returns and the lines each may show: ranked chunks grouped per file, widened
into neighbouring fetched chunks when the text budget would otherwise go unspent, and places under
min_score in the result slots and characters the others left."""

from __future__ import annotations

import re
from collections.abc import Collection

from hermit.memory.search.snippets import Place, Term, choose_windows, front_matter_lines, line_scores
from hermit.memory.search.tuning import DEFAULT_TUNING, SearchTuning
from hermit.memory.store.api import ChunkRow

_SPEAKER = re.compile(r"^\s*(?:[-*]\s+)?(?:\[[^\]]{1,20}\]\s*)?([^\W\d_][\w'-]{0,30}):\s")


def _speaker(line: str) -> str | None:
    m = _SPEAKER.match(line)
    return m.group(1).lower() if m else None


Group = list[tuple[int, float]]


def group_places(ranked: list[tuple[int, float]], rows: dict[int, ChunkRow], max_results: int) -> list[Group]:
    """The ranked chunks (those that passed min_score, best first) as up to max_results places: a chunk
    overlapping or touching one already taken (the same file) joins it, so six results are six places
    (kept apart, they were 0.843 vs 0.855 on LoCoMo dev, round 5's `no-merge`)."""
    groups: list[Group] = []
    spans: list[tuple[str, int, int]] = []
    for cid, score in ranked:
        if len(groups) >= max_results:
            break
        row = rows[cid]
        for k, (path, a, b) in enumerate(spans):
            if path == row.path and row.start_line <= b + 1 and row.end_line >= a - 1:
                groups[k].append((cid, score))
                spans[k] = (path, min(a, row.start_line), max(b, row.end_line))
                break
        else:
            groups.append([(cid, score)])
            spans.append((row.path, row.start_line, row.end_line))
    return groups


def span_of(group: Group, rows: dict[int, ChunkRow]) -> tuple[int, int]:
    """The lines of the chunks a place was ranked on."""
    return min(rows[c].start_line for c, _ in group), max(rows[c].end_line for c, _ in group)


def show_places(chosen: list[Group], rows: dict[int, ChunkRow], terms: list[Term], budget: int,
                names: frozenset[str] = frozenset(), tuning: SearchTuning = DEFAULT_TUNING) -> list[Place]:
    """Each place with its window chosen (memory.search.snippets), the windows sharing `budget` characters.

    A window may grow past its chunk into the neighbouring chunks of its file that search already
    fetched as candidates (no extra query): the rest of the conversation around a hit, when the budget
    allows (without it 0.844 vs 0.855 on LoCoMo dev, round 5's `no-extend`)."""
    places = [_place(group, rows, terms, {}, names, tuning) for group in chosen]
    choose_windows(places, budget, tuning)
    if _budget_left(places, budget):
        # Only then are the places widened (and all windows chosen again): when the budget binds,
        # as it does for most searches, nothing changes and nothing more is scored.
        extra = _neighbours(chosen, rows)
        if any(extra):
            places = [_place(g, rows, terms, more, names, tuning) for g, more in zip(chosen, extra, strict=True)]
            choose_windows(places, budget, tuning)
    return places


def spare_places(chosen: list[Group], places: list[Place], spare: list[tuple[int, float]], rows: dict[int, ChunkRow],
                 terms: list[Term], budget: int, max_results: int, names: frozenset[str] = frozenset(),
                 tuning: SearchTuning = DEFAULT_TUNING) -> tuple[list[Group], list[Place]]:
    """Places under min_score (`spare`, in the order they are offered) in the result slots the passed
    places left, sharing the characters their windows left: those keep exactly the windows they had, so
    nothing they show is lost, and a chunk whose lines one of them may already show (its neighbours
    included) is not offered twice. "What instruments does Melanie play?": clarinet is in a session above
    min_score, violin in one just under it."""
    left = budget - sum(p.size(p.lo, p.hi) for p in places)
    if left <= 0 or len(chosen) >= max_results:
        return [], []
    taken = [(rows[g[0][0]].path, p.start_line, p.start_line + len(p.lines) - 1)
             for g, p in zip(chosen, places, strict=True)]
    free = [(cid, s) for cid, s in spare
            if not any(rows[cid].path == path and rows[cid].start_line <= b + 1 and rows[cid].end_line >= a - 1
                       for path, a, b in taken)]
    more = group_places(free, rows, max_results - len(chosen))
    # Only as many as can show their chosen line whole: a part of a line cut to fit what is left (even
    # one holding the answer's line number) would not show the agent the answer. Letting them be cut
    # "found" 0.003 more on LoCoMo dev, with 20-character stubs.
    while more:
        shown = show_places(more, rows, terms, left, names, tuning)
        if all(p.cut is None for p in shown):
            return more, shown
        more = more[:-1]
    return [], []


def _budget_left(places: list[Place], budget: int) -> bool:
    """Whether a window filled its whole place with budget to spare (it could show more of its file)."""
    used = sum(p.size(p.lo, p.hi) for p in places)
    return used < budget and any(p.lo == 0 or p.hi == len(p.lines) - 1 for p in places)


def _neighbours(chosen: list[Group], rows: dict[int, ChunkRow]) -> list[dict[int, str]]:
    """For each place, the lines of the fetched chunks of its file that touch it (directly or through
    another such chunk), less the lines of the file's other places: context its window may grow into
    when the budget allows, never text another result already shows."""
    used = {cid for group in chosen for cid, _ in group}
    spans = [(rows[g[0][0]].path, min(rows[c].start_line for c, _ in g), max(rows[c].end_line for c, _ in g))
             for g in chosen]
    free: dict[str, list[ChunkRow]] = {}
    for cid, row in rows.items():
        if cid not in used:
            free.setdefault(row.path, []).append(row)
    out: list[dict[int, str]] = []
    for k, (path, a, b) in enumerate(spans):
        others = [(x, y) for j, (p, x, y) in enumerate(spans) if p == path and j != k]
        lines: dict[int, str] = {}
        pool = free.get(path, [])
        grew = True
        while grew:
            grew = False
            for row in list(pool):
                if row.start_line <= b + 1 and row.end_line >= a - 1:
                    pool.remove(row)
                    a, b, grew = min(a, row.start_line), max(b, row.end_line), True
                    for i, text in enumerate(row.text.split("\n"), row.start_line):
                        if not any(x <= i <= y for x, y in others):
                            lines[i] = text
        out.append(lines)
    return out


def _place(group: Group, rows: dict[int, ChunkRow], terms: list[Term],
           more: dict[int, str], names: frozenset[str], tuning: SearchTuning) -> Place:
    by_line: dict[int, str] = {}
    lo, hi = span_of(group, rows)
    # Neighbouring lines only as far as they run unbroken from the place (another place's lines
    # are left out, and a window is contiguous).
    n = lo - 1
    while n in more:
        by_line[n], n = more[n], n - 1
    n = hi + 1
    while n in more:
        by_line[n], n = more[n], n + 1
    for cid, _ in group:
        row = rows[cid]
        for k, text in enumerate(row.text.split("\n")):
            n = row.start_line + k
            if len(text) > len(by_line.get(n, "")) or n not in by_line:
                by_line[n] = text
    start = min(by_line)
    lines = [by_line.get(n, "") for n in range(start, max(by_line) + 1)]
    muted: Collection[int] = front_matter_lines(lines) if start == 1 else range(0)
    scores = [0.0 if k in muted else v for k, v in enumerate(line_scores(lines, terms, tuning))]
    share = tuning.other_speaker_share
    if names and share < 1:
        # The question names a speaker of some lines here: the other speakers' lines count only as
        # context (SearchTuning.other_speaker_share).
        who = [_speaker(ln) for ln in lines]
        if any(w in names for w in who if w):
            scores = [v * share if w and w not in names else v for v, w in zip(scores, who, strict=True)]
    seedable = range(lo - start, hi - start + 1) if (start, len(lines)) != (lo, hi - lo + 1) else None
    return Place(start, lines, scores, muted=muted, seedable=seedable)
