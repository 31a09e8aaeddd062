"""Would a per-index background tell a search that found its answer from one that found only words?

    python bench/retrieval/background_probe.py DATA_DIR [--json OUT] [--out TABLE.md]

Round 17's instrument (bench/retrieval/README.md). Round 9's rule (memory.search.ordering.unmatched) says a
search found nothing when its best place scores under 0.6 and no line of its first places comes within a
calibrated cosine of 0.25 of the question: one constant for every memory and every question. e5's cosines
are anisotropic — a question of everyday words is near everything, a precise one near little — so the
same nearest line can be an outlier in one index and the norm in another. This probe measures the
query-performance-prediction form of the rule: how far the nearest line of the first places stands above
the question's cosines to *every* line of the same index (z = (nearest − mean) / std; the background is the
index's own, per question), and the same for the chunk vectors.

For every LoCoMo dev question and every no-answer question (`absent.py`) it runs the real search with round
9's rule off (`unmatched_line` 0), so what any rule would take away is exact: a rule that fires returns
nothing. It records the best place (blended, as the rule reads it), the nearest line (calibrated and raw),
the background's mean and std over all line vectors and all chunk vectors, and what the search showed. Then
for each rule it reports the answers lost and the no-answer searches emptied, per conversation, and the
rule two conversations would pick (most emptied at no answer lost there beyond round 9's) on the third.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import absent  # noqa: E402
import conversations as conv_bench  # noqa: E402
from diagnose import _record  # noqa: E402

from hermit.memory.index.line_vectors import best_cosines, from_line_blob  # noqa: E402
from hermit.memory.search.tuning import DEFAULT_TUNING  # noqa: E402


def _index_vectors(svc: Any) -> tuple[np.ndarray, np.ndarray]:
    """All line vectors and all chunk vectors of the service's index."""
    store = svc.searcher.store
    lines = np.stack([from_line_blob(r[0]) for r in store.conn.execute("select embedding from line_vectors")])
    chunks = np.concatenate([b for _, b in store.iter_vectors()])
    return lines, chunks


def features(svc: Any, log: dict[str, Any], max_results: int) -> dict[str, Any]:
    """What the rules read, for the search just run (log: diagnose._record's)."""
    s = svc.searcher
    c, q, scored = log["c"], log["q"], log["scored"]
    passed = sorted(((i, v) for i, v in scored if v >= s.cfg.min_score), key=lambda x: -x[1])
    depth = DEFAULT_TUNING.line_order_depth * max_results
    head = passed[:depth]
    out: dict[str, Any] = {"passed": len(passed)}
    if not head or q is None:
        return {**out, "btop": 0.0, "near_cal": 0.0, "near_raw": 0.0, "chunk_raw": 0.0}
    blended, near_cal = s._order_by_lines(passed, c.rows, q, c.cos, depth, DEFAULT_TUNING.line_weight)
    spans = [(c.rows[i].path, c.rows[i].start_line, c.rows[i].end_line) for i, _ in head]
    best = best_cosines(s.store.line_vector_blobs(spans), q, len(spans))
    chunk_raw = max(float(c.cos.get(i, -1.0)) for i, _ in head)
    line_raw = max((b for b in best if b is not None), default=-1.0)
    return {**out, "btop": max(v for _, v in blended), "near_cal": near_cal, "near_raw": max(line_raw, chunk_raw),
            "line_raw": line_raw, "chunk_raw": chunk_raw}


def background(q: np.ndarray | None, lines: np.ndarray, chunks: np.ndarray) -> dict[str, float]:
    if q is None:
        return {"l_mean": 0.0, "l_std": 1.0, "l_max": 0.0, "c_mean": 0.0, "c_std": 1.0, "c_max": 0.0}
    ls, cs = lines @ q, chunks @ q
    return {"l_mean": float(ls.mean()), "l_std": float(ls.std()), "l_max": float(ls.max()),
            "l_p99": float(np.quantile(ls, 0.99)),
            "c_mean": float(cs.mean()), "c_std": float(cs.std()), "c_max": float(cs.max())}


def collect(data: Path) -> list[dict[str, Any]]:
    queries = conv_bench.read_jsonl(data / "queries.jsonl")
    base = next(x for x in conv_bench.variants() if x.name == "default")
    v = dataclasses.replace(base, name="rule-off", tuning=dataclasses.replace(DEFAULT_TUNING, unmatched_line=0.0))
    rows: list[dict[str, Any]] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = conv_bench.service_for(data, conv, v)
        lines, chunks = _index_vectors(svc)
        log: dict[str, Any] = {}
        _record(svc.searcher, log)
        try:
            asks: list[tuple[dict[str, Any], str]] = [
                ({"conv": conv, "set": "dev", "qid": q["qid"], "category": q["category_name"], "q": q}, str(q["query"]))
                for q in queries if q["conv"] == conv]
            asks += [({"conv": conv, "set": "absent", "qid": a.qid, "kind": a.kind}, a.query)
                     for a in absent.questions(data / "workspaces" / conv, conv)]
            for meta, text in asks:
                hits = svc.search_outcome(text, v.max_results).hits
                q = meta.pop("q", None)
                seen = conv_bench.score_question(q, hits)["seen"] if q is not None else 0.0
                rows.append({**meta, "seen": seen, "results": len(hits), "top": hits[0].score if hits else 0.0,
                             **features(svc, log, v.max_results), **background(log["q"], lines, chunks)})
        finally:
            svc.close()
    return rows


Rule = Callable[[dict[str, Any]], bool]


def z_line(r: dict[str, Any]) -> float:
    return (r["near_raw"] - r["l_mean"]) / max(r["l_std"], 1e-6)


def z_chunk(r: dict[str, Any]) -> float:
    return (r["chunk_raw"] - r["c_mean"]) / max(r["c_std"], 1e-6)


def gap_line(r: dict[str, Any]) -> float:
    """How far the nearest line (or chunk) of the first places stands above the question's mean cosine to every
    line of the index (raw cosines): the index's own background, not a constant."""
    return float(r["near_raw"] - r["l_mean"])


def round9(r: dict[str, Any]) -> bool:
    return r["passed"] > 0 and r["near_cal"] < DEFAULT_TUNING.unmatched_line and r["btop"] < DEFAULT_TUNING.unmatched_top


def _rule(stat: Callable[[dict[str, Any]], float], bound: float, top: float, with_round9: bool) -> Rule:
    def fires(r: dict[str, Any]) -> bool:
        own = r["passed"] > 0 and stat(r) < bound and r["btop"] < top
        return own or (with_round9 and round9(r))
    return fires


def rules() -> dict[str, Rule]:
    out: dict[str, Rule] = {"none": lambda r: False, "round 9": round9}
    for z, t in itertools.product((2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0), (0.5, 0.55, 0.6, 0.65, 0.7, 1.01)):
        out[f"z-line<{z} top<{t}"] = _rule(z_line, z, t, False)
        out[f"round 9 or z-line<{z} top<{t}"] = _rule(z_line, z, t, True)
        out[f"round 9 or z-chunk<{z} top<{t}"] = _rule(z_chunk, z, t, True)
    for gap, t in itertools.product((0.03, 0.035, 0.04, 0.045, 0.05, 0.055, 0.06), (0.5, 0.55, 0.6, 0.65, 0.7)):
        out[f"gap<{gap} top<{t}"] = _rule(gap_line, gap, t, False)
        out[f"round 9 or gap<{gap} top<{t}"] = _rule(gap_line, gap, t, True)
    return out


def effect(rows: list[dict[str, Any]], convs: set[str], rule: Rule) -> tuple[float, int, int]:
    """Seen recall (sum over dev questions) after the rule, no-answer searches with a result after it, and
    dev searches it empties."""
    dev = [r for r in rows if r["set"] == "dev" and r["conv"] in convs]
    ab = [r for r in rows if r["set"] == "absent" and r["conv"] in convs]
    seen = sum(0.0 if rule(r) else r["seen"] for r in dev)
    left = sum(1 for r in ab if r["results"] > 0 and not rule(r))
    return seen, left, sum(1 for r in dev if r["results"] > 0 and rule(r))


def report(rows: list[dict[str, Any]]) -> str:
    convs = sorted({r["conv"] for r in rows})
    every = rules()
    out = ["| rule | seen (sum) | dev emptied | absent with a result | "
           + " | ".join(f"{c} seen / absent" for c in convs) + " |",
           "|---|---:|---:|---:|" + "---:|" * len(convs)]
    ref = effect(rows, set(convs), round9)
    for name, rule in every.items():
        seen, left, emptied = effect(rows, set(convs), rule)
        if name not in ("none", "round 9") and (seen < ref[0] - 1e-9 or left >= ref[1]):
            continue
        per = [effect(rows, {c}, rule) for c in convs]
        out.append(f"| {name} | {seen:.2f} | {emptied} | {left} | "
                   + " | ".join(f"{p[0]:.2f} / {p[1]}" for p in per) + " |")
    out.append("")
    out.append("Rotations: the rule two conversations pick (fewest no-answer results at no seen recall lost "
               "against round 9 there), on the third:")
    for held in convs:
        tune = set(convs) - {held}
        base = effect(rows, tune, round9)
        ok = {n: r for n, r in every.items() if effect(rows, tune, r)[0] >= base[0] - 1e-9}
        pick = min(ok, key=lambda n: (effect(rows, tune, ok[n])[1], n))
        t_seen, t_left, _ = effect(rows, tune, ok[pick])
        h_ref, h_new = effect(rows, {held}, round9), effect(rows, {held}, ok[pick])
        n_abs = sum(1 for r in rows if r["set"] == "absent" and r["conv"] == held)
        out.append(f"- hold out {held}: pick `{pick}` (tuning: absent with a result {base[1]} → {t_left}); held "
                   f"out: seen {h_ref[0]:.2f} → {h_new[0]:.2f}, absent with a result {h_ref[1]} → {h_new[1]} of {n_abs}")
    # How the two statistics separate the sets, among searches where something passed.
    out.append("")
    for name, f in (("gap-line", gap_line), ("z-line", z_line), ("z-chunk", z_chunk), ("nearest calibrated", lambda r: r["near_cal"])):
        ans = sorted(f(r) for r in rows if r["set"] == "dev" and r["seen"] > 0 and r["passed"] > 0)
        neg = sorted(f(r) for r in rows if r["set"] == "absent" and r["passed"] > 0)
        auc = _auc(ans, neg)
        out.append(f"- {name}: answered p10 {np.quantile(ans, 0.1):.2f} median {np.median(ans):.2f}; no-answer "
                   f"median {np.median(neg):.2f} p90 {np.quantile(neg, 0.9):.2f}; AUC {auc:.3f} "
                   f"({len(ans)} answered, {len(neg)} no-answer searches where something passed)")
    return "\n".join(out)


def _auc(pos: list[float], neg: list[float]) -> float:
    if not pos or not neg:
        return 0.5
    p, n = np.asarray(pos), np.asarray(neg)
    return float(((p[:, None] > n[None, :]).sum() + 0.5 * (p[:, None] == n[None, :]).sum()) / (len(p) * len(n)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--json", type=Path, help="write (or, when it exists, read) the per-question features here")
    ap.add_argument("--out", type=Path, help="write the table here")
    args = ap.parse_args(argv)
    if args.json and args.json.exists():
        rows = json.loads(args.json.read_text())
    else:
        rows = collect(args.data)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    return conv_bench.emit(report(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
