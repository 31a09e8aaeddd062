"""What text of the ranked chunks the agent sees: one line window per result, sized from a shared budget.

Search ranks chunks (~400 tokens); the agent is handed a window of lines from each. The windows share
one character budget, `SearchTuning.chars_per_result` × the results asked for (4,200 for the default 6): a
cap per search, so no search, whatever the memory, returns more (SPEC §4's 700 per snippet, pooled).
A result whose lines match the question well may show more than one whose lines do not, and a
memory with fewer
results does not pay for absent ones. Each line is scored by the query words it holds,
weighted by how rare each word is in the index (BM25's idf) — a speaker's name on every line of a
conversation weighs nothing, the one word that names the topic weighs a lot. The windows then grow
greedily, one run of lines at a time, wherever the next lines add the most score per character,
weighted by the result's rank; lines without query words still carry a little value (the turn that
answers a question rarely repeats its words), so the budget is never left unspent while a window can
grow. A window is contiguous and its startLine/endLine are exactly its lines; a line longer than a
window is cut around its first matching word (the text then is a part of that one line, after the labels
that say whose words it is).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from hermit.memory.search.tuning import DEFAULT_TUNING, SearchTuning
from hermit.messages import label_spans, line_label
from hermit.tokens import count_cjk

_WORD = re.compile(r"[^\W_]+")


def stem(word: str) -> str:
    """A crude English stem, the same for query and text (painting / painted / paints → paint)."""
    w = word.lower()
    for suffix in ("ies", "ing", "ed", "es", "s", "ly"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


@dataclass(frozen=True)
class Term:
    """One query term for line scoring, as a pattern over lower-cased text: a word by its stem (the
    stem then any word ending: paint → painting, painted), an identifier's parts in order, or a CJK
    string as a substring."""

    pattern: re.Pattern[str]
    weight: float


def _term_pattern(low: str) -> re.Pattern[str] | None:
    if count_cjk(low):
        return re.compile(re.escape("".join(low.split())))
    parts = [stem(p) for p in _WORD.findall(low)]
    if not parts:
        return None
    words = [re.escape(p) + (r"[^\W_]*" if len(p) >= 3 else "") for p in parts]
    return re.compile(r"(?<![^\W_])" + r"[\W_]+".join(words) + r"(?![^\W_])")


def weigh_terms(terms: Sequence[str], doc_freq: Callable[[str], int], n_docs: int,
                discount: float = 1.0) -> list[Term]:
    """Terms with idf weights (ln(1 + (N − df + ½)/(df + ½)), never negative) from the index's counts."""
    out: list[Term] = []
    for t in terms:
        low = t.lower().strip()
        pattern = _term_pattern(low) if low else None
        if pattern is None:
            continue
        df = doc_freq(t)
        idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5)) if n_docs > 0 else 1.0
        out.append(Term(pattern, idf * discount))
    return out


def line_scores(lines: Sequence[str], terms: Sequence[Term], tuning: SearchTuning = DEFAULT_TUNING) -> list[float]:
    """Each line's score: the summed weights of the query terms it holds, plus a share of the line
    before it (the turn that answers a matching turn, the line under a matching heading)."""
    raw = [0.0] * len(lines)
    if terms:
        low = [ln.lower() for ln in lines]
        for t in terms:
            for i, ln in enumerate(low):
                if t.pattern.search(ln):
                    raw[i] += t.weight
    out = list(raw)
    for i in range(1, len(raw)):
        out[i] += tuning.neighbour_share * raw[i - 1]
    return out


def front_matter_lines(lines: Sequence[str]) -> range:
    """Indexes of a YAML front matter block (`---` … `---` opening a file): metadata, not an answer."""
    if not lines or lines[0].strip() != "---":
        return range(0)
    end = next((i for i in range(1, min(len(lines), 60)) if lines[i].strip() in ("---", "...")), None)
    return range(0, end + 1) if end is not None else range(0)


@dataclass
class Place:
    """The lines one result may show: a chunk, or overlapping chunks of one file merged."""

    start_line: int
    lines: list[str]
    scores: list[float]
    lo: int = 0
    hi: int = -1  # the window, inclusive line indexes; hi < lo means not placed yet
    cut: tuple[int, int] | None = None  # (start, end) characters kept of a too-long single line
    muted: Collection[int] = range(0)  # lines never chosen for their own sake (front matter)
    # The lines a window may start from (the ranked chunks; the rest is neighbouring context).
    seedable: range | None = None

    def size(self, lo: int, hi: int) -> int:
        return sum(len(self.lines[i]) + 1 for i in range(lo, hi + 1)) - 1


class _Move(NamedTuple):
    rate: tuple[float, int]  # value per character (rank-weighted), then closeness to the seed
    step: int  # +1 down, -1 up
    n: int  # lines taken
    extra: int  # characters added


def choose_windows(places: list[Place], budget: int, tuning: SearchTuning = DEFAULT_TUNING) -> None:  # noqa: C901 - one greedy pass whose closures share its state
    """Set each place's window: seed on its best line, then grow where score per character is highest."""
    cap = tuning.max_window_chars
    used = 0
    weights = [tuning.rank_decay ** r for r in range(len(places))]
    values: list[list[float]] = []
    for p in places:
        top = max(p.scores, default=0.0)
        base = tuning.context_value * top if top > 0 else 1.0
        values.append([s + base if ln.strip() and i not in p.muted else 0.0
                       for i, (s, ln) in enumerate(zip(p.scores, p.lines, strict=True))])
    share = max(1, min(cap, budget // max(1, len(places))))
    for p in places:
        allowed = range(len(p.lines)) if p.seedable is None else p.seedable
        content = [i for i in allowed if p.lines[i].strip() and i not in p.muted] or [allowed.start]
        best = max(content, key=lambda i: (p.scores[i], -i))
        p.lo = p.hi = best
        length = len(p.lines[best])
        if length > share:
            # One line longer than this result's share: keep the part around its first match.
            p.cut = (0, share)
            length = share
        used += length
    seeds = [p.lo for p in places]
    sizes = [p.size(p.lo, p.hi) for p in places]

    def best_move(k: int) -> _Move | None:
        """The best growth of place k within the cap and what is left of the budget."""
        p, vals = places[k], values[k]
        if p.cut is not None:
            return None
        found: _Move | None = None
        for step in (1, -1):
            gain_sum, extra = 0.0, 0
            edge = p.hi if step > 0 else p.lo
            for n in range(1, tuning.lookahead_lines + 1):
                i = edge + step * n
                if not 0 <= i < len(p.lines):
                    break
                extra += len(p.lines[i]) + 1
                if sizes[k] + extra > cap or used + extra > budget:
                    break
                gain_sum += vals[i]
                # Equal value per character: grow the shorter side (windows centre on their seed).
                rate = (weights[k] * gain_sum / extra, -abs(edge - seeds[k]))
                if rate[0] > 0 and (found is None or rate > found.rate):
                    found = _Move(rate, step, n, extra)
        return found

    # A place's best move changes only when it grows or when the budget left no longer covers it.
    moves = [best_move(k) for k in range(len(places))]
    while used < budget:
        k_best, chosen = -1, None
        for k, m in enumerate(moves):
            if m is not None and used + m.extra > budget:
                moves[k] = m = best_move(k)
            if m is not None and (chosen is None or m.rate > chosen.rate):
                k_best, chosen = k, m
        if chosen is None:
            break
        _, step, n, extra = chosen
        p = places[k_best]
        if step > 0:
            p.hi += n
        else:
            p.lo -= n
        used += extra
        sizes[k_best] += extra
        moves[k_best] = best_move(k_best)
    for p in places:
        while p.lo < p.hi and not p.lines[p.lo].strip():
            p.lo += 1
        while p.hi > p.lo and not p.lines[p.hi].strip():
            p.hi -= 1


def render(p: Place, terms: Sequence[Term]) -> tuple[str, int, int]:
    """The window's text and its 1-based line span."""
    if p.cut is not None:
        line = p.lines[p.lo]
        keep = p.cut[1]
        low = line.lower()
        pos = min((m.start() for t in terms if (m := t.pattern.search(low))), default=0)
        a = max(0, min(pos - keep // 3, len(line) - keep))
        if a and (label := line_label(line, a)):
            # The part shown comes after the labels in force where it starts (messages.line_label): the tail
            # of a forwarded message or of another chat's line still says whose words it is. It starts
            # neither inside a label nor with a space, and it leaves room for them.
            room = max(1, keep - len(label))
            a = max(0, min(pos - room // 3, len(line) - room))
            a = next((s for s, e in label_spans(line) if s < a < e), a)
            while 0 < a < len(line) and line[a] == " ":
                a += 1
            return (line_label(line, a) + line[a:a + keep])[:keep], p.start_line + p.lo, p.start_line + p.lo
        return line[a:a + keep], p.start_line + p.lo, p.start_line + p.lo
    return "\n".join(p.lines[p.lo:p.hi + 1]), p.start_line + p.lo, p.start_line + p.hi
