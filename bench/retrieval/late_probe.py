"""Round 11's probe: more than one line of a place, and the turn a line answers, in the line score.

    python bench/retrieval/late_probe.py DATA_DIR [--only NAME ...] [--out FILE.md]

The search orders the places that passed min_score by `0.8 · fused + 0.2 · best line` and the weaker
places that fill unused results by their best line alone (memory/search/ordering.py `by_best_line`).
Both read the stored line vectors of each place; two ways to read more out of them, at no index cost
and without a new model call, measured here before either is built:

- `late-λ` (late interaction over the stored line vectors): a place's line score is
  `(best + λ · second best) / (1 + λ)`, so a place with two turns near the question (the answer and the
  question it replies to, or two of a list's items) goes before one with a single near turn. λ = 1 is
  the mean of the two best lines.
- `ctx-α` (a line in its context): each line's vector is `v_i + α · v_{i-1}` (normalised), the turn
  before it counted: in a dialogue a reply ("Yes, every Sunday!") means little without the turn it
  answers. The first line of a place takes the line before the place (read with it).
- `ctx-α-late-λ`: both.
- `spk` (speaker-aware): when the question names a speaker of the conversation, only that speaker's
  lines count for a place's line score ("What has Melanie painted?": Melanie's turns, not Caroline's
  "did you paint that?"), for the order of the passed places and the fill; `spk-fill` for the fill
  only. A place without such a line keeps all its lines.
- `same`: the search as it is, through the probe (must equal `default`: a check of the probe).

Everything else is the search as it is (the same candidates, fusion, min_score, windows; the rule of
round 9 keeps reading the best single line of the unchanged vectors). The variants run through
conversations.py's harness (LoCoMo dev, both sets, the rotations and each family's pick), so the table
is the same as its own (`--out FILE.md`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.index.line_vectors import best_cosines, from_line_blob  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

MODES: dict[str, tuple[float, float]] = {  # name → (α context, λ second line)
    "same": (0.0, 0.0),  # the search as it is, through the probe: must equal `default`
    "late-0.25": (0.0, 0.25), "late-0.5": (0.0, 0.5), "late-1": (0.0, 1.0),
    "ctx-0.3": (0.3, 0.0), "ctx-0.5": (0.5, 0.0), "ctx-1": (1.0, 0.0),
    "ctx-0.3-late-0.5": (0.3, 0.5),
}
# Speaker-aware line scores: only the lines of a speaker the question names count (`spk`: for the passed
# places' order and the fill; `spk-fill`: for the fill only, whose places matched weakly as a whole).
SPEAKER_MODES = ("spk", "spk-fill")
_SPEAKER = re.compile(r"^- (?:\[[^\]]*\] )?([^\W\d_][\w .'-]{0,40}?):")
_NAME = re.compile(r"[^\W\d_]+")


def pooled(mat: np.ndarray, q: np.ndarray, alpha: float, lam: float, has_prev: bool) -> float:
    """The line score of one place from its lines' vectors (the line before the place first when
    `has_prev`)."""
    if alpha > 0:
        ctx = mat.copy()
        ctx[1:] += alpha * mat[:-1]
        ctx /= np.maximum(np.linalg.norm(ctx, axis=1, keepdims=True), 1e-9)
        mat = ctx
    if has_prev:
        mat = mat[1:]
    sims = np.sort(mat @ q)[::-1]
    if lam <= 0 or len(sims) < 2:
        return float(sims[0])
    return float((sims[0] + lam * sims[1]) / (1 + lam))


def patch(searcher: HybridSearcher, alpha: float, lam: float, speaker: str = "") -> None:
    names: set[str] = set()
    plain_search = searcher._search

    def search(query: str, *a: Any) -> Any:
        names.clear()
        names.update(w.lower() for w in _NAME.findall(query))
        return plain_search(query, *a)

    searcher._search = search  # type: ignore[method-assign]

    def speaker_rows(text: str, n: int) -> list[int] | None:
        """Which of a place's `n` line vectors are a named speaker's (None: no such line, or the lines do
        not line up with the vectors)."""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) != n:
            return None
        keep = [k for k, ln in enumerate(lines) if (m := _SPEAKER.match(ln)) and m.group(1).lower() in names]
        return keep or None

    def order(passed: list[tuple[int, float]], rows: dict[int, Any], q: np.ndarray, cos: dict[int, float],
              depth: int, weight: float) -> tuple[list[tuple[int, float]], float]:
        head, tail = passed[:depth], passed[depth:]
        store = searcher.store
        spans = [(rows[i].path, max(1, rows[i].start_line - (1 if alpha > 0 else 0)), rows[i].end_line)
                 for i, _ in head]
        blobs = store.line_vector_blobs(spans)
        plain = store.line_vector_blobs([(p, rows[i].start_line, e) for (i, _), (p, _, e) in zip(head, spans, strict=True)])
        best = best_cosines(plain, q, len(spans))  # round 9's rule reads the plain best line, as today
        width = 2 * q.shape[0]
        lines: list[float | None] = []
        for k, (i, _) in enumerate(head):
            blob = blobs.get(k)
            if not blob:
                v = cos.get(i)
                lines.append(None if v is None else searcher._vscore(v))
                continue
            mat = from_line_blob(blob).reshape(-1, q.shape[0])
            if speaker == "spk" or (speaker == "spk-fill" and weight >= 1.0):
                keep = speaker_rows(rows[i].text, mat.shape[0])
                if keep is not None:
                    mat = mat[keep]
            has_prev = alpha > 0 and rows[i].start_line > 1 and len(blob) // width > len(plain.get(k) or b"") // width
            lines.append(searcher._vscore(pooled(mat, q, alpha, lam, has_prev)))
        blended = [(i, s if v is None else (1 - weight) * s + weight * v) for (i, s), v in zip(head, lines, strict=True)]
        near = [searcher._vscore(b) for b in best if b is not None] + [
            searcher._vscore(cos[i]) for i, _ in head if cos.get(i) is not None]
        return sorted(blended, key=lambda x: -x[1]) + tail, max(near, default=0.0)

    searcher._order_by_lines = order  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    args = ap.parse_args(argv)
    queries = C.read_jsonl(args.data / "queries.jsonl")
    base = next(v for v in C.variants() if v.name == "default")
    rows = [C.run_variant(args.data, base, queries)]
    for name, (alpha, lam) in [*MODES.items(), *((m, (0.0, 0.0)) for m in SPEAKER_MODES)]:
        if args.only and name not in args.only:
            continue
        fam = "" if name in SPEAKER_MODES else "late" if alpha == 0 else ("ctx" if lam == 0 else "")
        v = C.Variant(name, f"α {alpha} (turn before), λ {lam} (second line)", family=fam)
        spk = name if name in SPEAKER_MODES else ""
        rows.append(C.run_changed(args.data, v, queries,
                                  lambda svc, _conv, a=alpha, lm=lam, s=spk: patch(svc.searcher, a, lm, s)))
        r = rows[-1]
        print(f"{name}: seen {r['seen']:.3f} MRR {r['MRR']:.3f} multi-hop {r['by_category']['multi-hop']['seen']:.3f} "
              f"absent any {r['absent']['any']:.3f}", file=sys.stderr)
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
