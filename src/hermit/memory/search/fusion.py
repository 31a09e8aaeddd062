"""A hybrid search's scores on [0, 1]: a cosine calibrated per model, BM25 normalized, both legs fused,
temporal decay by the date in a daily log's name.

memory.search.hybrid gathers the candidates and each leg's raw score for them (its vector leg:
memory.search.vector_leg, its keyword leg: memory.search.keyword_leg); these turn those scores into the
one score min_score is compared with (SPEC §14.1, §14.2). Split from hybrid.py by responsibility.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping

from hermit.config.memory_search import HybridConfig, TemporalDecayConfig
from hermit.memory.embedders.base import EmbedderInfo
from hermit.memory.store.api import ChunkRow

_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:[-_][^/]*)?\.md$", re.IGNORECASE)


def calibrate(cos: float, info: EmbedderInfo) -> float:
    span = max(1e-6, info.score_ceiling - info.score_floor)
    return min(1.0, max(0.0, (cos - info.score_floor) / span))


def file_date(path: str) -> float | None:
    m = _DATED.search(path)
    if not m:
        return None
    try:
        d = dt.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=dt.UTC)
    except ValueError:
        return None
    return d.timestamp()


def text_score(r: float, all_rel: Mapping[int, float], hy: HybridConfig) -> float:
    """A BM25 relevance on [0, 1], as `hy.text_normalization` says."""
    if r <= 0:
        return 0.0
    if hy.text_normalization == "query":
        return min(1.0, r)  # already on the query's scale (memory.search.keyword_leg)
    if hy.text_normalization == "max":
        top = max(all_rel.values(), default=0.0)
        return r / top if top > 0 else 0.0
    return r / (r + hy.bm25_saturation)


def fuse(ids: list[int], cos: dict[int, float], rel: dict[int, float], kw_hits: list[tuple[int, float]],
         have_vec: bool, hy: HybridConfig, vscore: Callable[[float | None], float]) -> list[tuple[int, float]]:
    """Each candidate's fused score: weighted calibrated cosine (`vscore`) and text score, or RRF."""
    if not have_vec:
        return [(i, text_score(rel.get(i, 0.0), rel, hy)) for i in ids]
    total = hy.vector_weight + hy.text_weight
    wv, wt = hy.vector_weight / total, hy.text_weight / total
    if hy.fusion == "rrf":
        vrank = {i: r for r, (i, _) in enumerate(sorted(cos.items(), key=lambda x: -x[1]))}
        krank = {i: r for r, (i, _) in enumerate(kw_hits)}
        best = wv / (hy.rrf_k + 1) + wt / (hy.rrf_k + 1)
        out = []
        for i in ids:
            s = wv / (hy.rrf_k + 1 + vrank[i]) if i in vrank else 0.0
            s += wt / (hy.rrf_k + 1 + krank[i]) if i in krank else 0.0
            # Rescale so that rank 1 on both legs is 1.0 and minScore keeps a [0, 1] meaning.
            out.append((i, s / best))
        return out
    # A chunk with no vector yet (a first index stores files keyword-only, then embeds them) is
    # scored as keyword-only search scores it, not as a chunk the vector leg found unrelated.
    return [(i, wv * vscore(cos[i]) + wt * text_score(rel.get(i, 0.0), rel, hy) if i in cos
             else text_score(rel.get(i, 0.0), rel, hy)) for i in ids]


def decay(scored: list[tuple[int, float]], rows: dict[int, ChunkRow], td: TemporalDecayConfig,
          clock: Callable[[], float]) -> list[tuple[int, float]]:
    """Scores of daily logs halved every `td.half_life_days` of their age (when enabled)."""
    if not td.enabled:
        return scored
    now = clock()
    out = []
    for cid, s in scored:
        when = file_date(rows[cid].path)
        if when is not None:  # MEMORY.md and undated files are evergreen
            age_days = max(0.0, (now - when) / 86400)
            s *= math.pow(0.5, age_days / td.half_life_days)
        out.append((cid, s))
    return out
