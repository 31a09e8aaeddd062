"""The order of the chunks after scoring: notes before the copies of conversations they repeat, maximal
marginal relevance when configured, and the candidates under min_score that may fill unused results."""

from __future__ import annotations

import re
from collections.abc import Callable

from hermit.memory.index.line_vectors import best_cosines
from hermit.memory.lazy_numpy import numpy as np
from hermit.memory.search.tuning import SearchTuning
from hermit.memory.store.api import ChunkRow, MemoryStore

# A session dump (agent/session_memory.py): memory/YYYY-MM-DD-<slug>.md whose header says so.
_SESSION_DUMP_NAME = re.compile(r"(?:^|/)(\d{4}-\d{2}-\d{2})-[^/]+\.md$")
_SESSION_DUMP_HEADER = re.compile(r"^# Session \d{4}-\d{2}-\d{2} \d{2}:\d{2}\b[^\n]*\n(?:[^\n]*\n){0,8}?- Saved on ",
                                  re.MULTILINE)


class ConversationCopies:
    """Which chunks are copies of a conversation: session transcripts, and session dumps (known by their
    header, looked up once per file and index generation)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._dumps: dict[str, tuple[int, bool]] = {}  # path → (index generation, is a session dump)

    def is_copy(self, row: ChunkRow) -> bool:
        if row.source == "sessions":
            return True
        m = _SESSION_DUMP_NAME.search(row.path)
        if m is None:
            return False
        gen = self.store.generation()
        known = self._dumps.get(row.path)
        if known is None or known[0] != gen:
            # The header is in the file's first chunk: fetch it among that day's chunks (a files-table
            # lookup; only for dated notes with a slug that passed min_score), once per index generation.
            same = [r for r in self.store.chunk_rows(self.store.chunk_ids_for_days([m.group(1)])).values()
                    if r.path == row.path]
            head = min(same, key=lambda r: r.start_line).text if same else ""
            known = (gen, bool(_SESSION_DUMP_HEADER.search(head)))
            self._dumps[row.path] = known
        return known[1]


def notes_first(passed: list[tuple[int, float]], rows: dict[int, ChunkRow], copies: ConversationCopies,
                weight: float) -> list[tuple[int, float]]:
    """Copies of conversations (session transcripts, and the session dumps written on /new) count
    `weight` of their score, and the passed chunks are put in order again: a note is what was kept of a
    conversation on purpose, while the copy repeats the words the talk was about, so it outscored the
    note written from it (a dump of the talk about a passport 0.57, the note holding the number 0.49). A
    copy that matches far better than any note still comes first."""
    if not passed or not any(copies.is_copy(rows[i]) for i, _ in passed):
        return passed
    out = [(i, s * weight if copies.is_copy(rows[i]) else s) for i, s in passed]
    return sorted(out, key=lambda x: -x[1])


def spare_candidates(scored: list[tuple[int, float]], passed: list[tuple[int, float]],
                     min_score: float, floor: float = 0.0, min_top: float = 0.0) -> list[tuple[int, float]]:
    """The candidates under min_score, best first, that may fill the results and characters the passed
    places leave (QueryConfig.fill_results); none when nothing passed, so a search that finds nothing
    still says so, and none when the best that passed scores under `min_top`."""
    if not passed or max(s for _, s in passed) < min_top:
        return []
    return sorted(((i, s) for i, s in scored if floor < s < min_score), key=lambda x: -x[1])


LinePrior = Callable[[list[float | None], list[ChunkRow]], list[float | None]]


def by_best_line(passed: list[tuple[int, float]], rows: dict[int, ChunkRow], store: MemoryStore, q: np.ndarray,
                 cos: dict[int, float], calibrate: Callable[[float], float], depth: int,
                 weight: float, prior: LinePrior | None = None) -> tuple[list[tuple[int, float]], float]:
    """The first `depth` chunks put in order of their score blended with their best line's calibrated
    cosine (`weight` of it; memory.index.line_vectors); a blended score may fall below min_score, the
    chunk stays. A chunk without line vectors (one long line split into pieces) counts its own vector.
    Also how near the question the nearest of those chunks or their lines comes (calibrated cosine, 0
    when none has a vector; a chunk's whole vector counts too: a short line of another language is
    further from the question than the passage it is in). `prior` (memory.search.answer_type) may lift a
    chunk's best line for the order; the nearness reads the plain cosines."""
    head, tail = passed[:depth], passed[depth:]
    spans = [(rows[i].path, rows[i].start_line, rows[i].end_line) for i, _ in head]
    plain = best_cosines(store.line_vector_blobs(spans), q, len(spans))
    best = prior(plain, [rows[i] for i, _ in head]) if prior is not None else plain

    def line_of(i: int, b: float | None) -> float | None:
        return None if (v := b if b is not None else cos.get(i)) is None else calibrate(v)

    lines = [line_of(i, b) for (i, _), b in zip(head, best, strict=True)]
    blended = [(i, s if v is None else (1 - weight) * s + weight * v) for (i, s), v in zip(head, lines, strict=True)]
    near = [v for (i, _), b in zip(head, plain, strict=True) if (v := line_of(i, b)) is not None]
    near += [calibrate(cos[i]) for i, _ in head if cos.get(i) is not None]
    return sorted(blended, key=lambda x: -x[1]) + tail, max(near, default=0.0)


def unmatched(ordered: list[tuple[int, float]], nearest: float, tuning: SearchTuning) -> bool:
    """Whether the places that passed min_score are a match of words only, nothing said in them close to
    the question: the best scores under `unmatched_top` (no place holds most of the question) and
    neither the first places nor any of their lines is `unmatched_line` near it (`nearest`, the
    calibrated cosine by_best_line gives). Such a search found the question's everyday words, not its
    answer, and returns nothing (SearchTuning.unmatched_line)."""
    return bool(ordered) and nearest < tuning.unmatched_line and max(s for _, s in ordered) < tuning.unmatched_top


def nearest_first(spare: list[tuple[int, float]], near: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The candidates under min_score in the order of `near` (the first of them with their best line's
    calibrated cosine, or their own without line vectors), each keeping its fused score, which shows the
    agent it is under min_score. They matched weakly as a whole, so the one turn or bullet close to the
    question tells them apart: in fused-score order LoCoMo dev gave 0.853 instead of 0.864 (both with cut
    lines allowed). The line need not pass min_score itself: that kept 0.856 and lost most of the
    multi-hop gain (0.521 vs 0.562)."""
    fused = dict(spare)
    return [(i, fused[i]) for i, _ in sorted(near, key=lambda x: -x[1])]


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def mmr(scored: list[tuple[int, float]], rows: dict[int, ChunkRow], k: int, lam: float) -> list[tuple[int, float]]:
    """Maximal marginal relevance: trade relevance for novelty (token Jaccard between chunks)."""
    toks = {cid: _tokens(rows[cid].text) for cid, _ in scored}
    chosen: list[tuple[int, float]] = []
    rest = list(scored)
    while rest and len(chosen) < max(k * 2, k):
        def value(item: tuple[int, float]) -> float:
            cid, s = item
            if not chosen:
                return s
            sim = max(
                len(toks[cid] & toks[c]) / max(1, len(toks[cid] | toks[c])) for c, _ in chosen
            )
            return lam * s - (1 - lam) * sim

        best = max(rest, key=value)
        rest.remove(best)
        chosen.append(best)
    return chosen + rest
