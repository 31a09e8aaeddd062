"""Would the two legs' agreement tell a search that found its answer from one that found only words?

    python bench/retrieval/agreement_probe.py DATA_DIR [--json OUT]

Round 11's instrument (bench/retrieval/README.md). For every LoCoMo dev question and every no-answer
question (`absent.py`), at default settings on the indexes `conversations.py` built, it records what a
per-query calibration from the keyword/vector agreement could use — how many of the vector leg's k
nearest chunks are among the keyword leg's k best (k = 3, 5, 10), the vector-leg rank of the first
place returned, its keyword rank, the best score and the nearest line (round 9's rule) — and whether the
search returned anything and showed an answer. Then, for the rule "return nothing when the best place
scores under T and the agreement at k is at most A", it reports what each (k, A, T) would take away: the
answers shown (dev questions' seen recall lost) and the no-answer searches it would empty, per
conversation, and the rule the two other conversations would pick for each one held out (fewest
no-answer results at no lost answer there). The search itself is unchanged: a search the rule empties
returns nothing, so its effect on both sets is exact.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import absent  # noqa: E402
import conversations as conv_bench  # noqa: E402
from diagnose import _record  # noqa: E402

KS = (3, 5, 10)
AGREE = (0, 1, 2)
TOPS = (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 1.01)


def features(log: dict[str, Any], hits: list[Any]) -> dict[str, Any]:
    c = log["c"]
    vec = [i for i, _ in c.vec_hits]
    kw = [i for i, _ in c.kw_hits]
    out: dict[str, Any] = {f"agree{k}": len(set(vec[:k]) & set(kw[:k])) for k in KS}
    first = hits[0].id if hits else None
    out["vec_rank"] = vec.index(first) if first in vec else 99
    out["kw_rank"] = kw.index(first) if first in kw else 99
    out["top"] = hits[0].score if hits else 0.0
    out["results"] = len(hits)
    return out


def collect(data: Path) -> list[dict[str, Any]]:
    queries = conv_bench.read_jsonl(data / "queries.jsonl")
    v = next(x for x in conv_bench.variants() if x.name == "default")
    rows: list[dict[str, Any]] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = conv_bench.service_for(data, conv, v)
        log: dict[str, Any] = {}
        _record(svc.searcher, log)
        try:
            for q in (q for q in queries if q["conv"] == conv):
                hits = svc.search_outcome(str(q["query"]), v.max_results).hits
                s = conv_bench.score_question(q, hits)
                rows.append({"conv": conv, "set": "dev", "qid": q["qid"], "category": q["category_name"],
                             "seen": s["seen"], **features(log, hits)})
            for a in absent.questions(data / "workspaces" / conv, conv):
                hits = svc.search_outcome(a.query, v.max_results).hits
                rows.append({"conv": conv, "set": "absent", "qid": a.qid, "kind": a.kind, "seen": 0.0,
                             **features(log, hits)})
        finally:
            svc.close()
    return rows


def fires(r: dict[str, Any], k: int, agree: int, top: float) -> bool:
    return r["results"] > 0 and r["top"] < top and r[f"agree{k}"] <= agree


def effect(rows: list[dict[str, Any]], convs: set[str], rule: tuple[int, int, float]) -> tuple[float, int, int]:
    """Seen recall lost (sum over dev questions), no-answer searches emptied, no-answer searches with a result."""
    dev = [r for r in rows if r["set"] == "dev" and r["conv"] in convs]
    ab = [r for r in rows if r["set"] == "absent" and r["conv"] in convs]
    lost = sum(r["seen"] for r in dev if fires(r, *rule))
    emptied = sum(1 for r in ab if fires(r, *rule))
    return lost, emptied, sum(1 for r in ab if r["results"] > 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--json", type=Path, help="write the per-question features here")
    args = ap.parse_args(argv)
    rows = collect(args.data)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    convs = sorted({r["conv"] for r in rows})
    answered = [r for r in rows if r["set"] == "dev" and r["seen"] > 0]
    absent_hit = [r for r in rows if r["set"] == "absent" and r["results"] > 0]
    print(f"dev questions showing an answer: {len(answered)}; no-answer searches with a result: "
          f"{len(absent_hit)} of {sum(1 for r in rows if r['set'] == 'absent')}")
    for k in KS:
        for name, rs in (("answered", answered), ("no-answer", absent_hit)):
            hist = [sum(1 for r in rs if r[f"agree{k}"] == a) for a in range(k + 1)]
            print(f"  agree@{k} {name:9s} {hist}")
    print("\n| rule (k, agree ≤ A, top < T) | seen lost | no-answer emptied | "
          + " | ".join(f"{c} lost / emptied" for c in convs) + " |")
    print("|---|---:|---:|" + "---:|" * len(convs))
    rules = list(itertools.product(KS, AGREE, TOPS))
    for rule in rules:
        lost, emptied, _ = effect(rows, set(convs), rule)
        if emptied == 0 and lost == 0:
            continue
        per = [effect(rows, {c}, rule) for c in convs]
        print(f"| {rule} | {lost:.2f} | {emptied} | " + " | ".join(f"{p[0]:.2f} / {p[1]}" for p in per) + " |")
    print("\nRotations: the rule two conversations pick (most emptied at nothing lost), on the third:")
    for held in convs:
        tune = set(convs) - {held}
        ok = [r for r in rules if effect(rows, tune, r)[0] == 0]
        best = max(ok, key=lambda r: (effect(rows, tune, r)[1], -r[2]), default=None)
        if best is None:
            print(f"  hold out {held}: no rule loses nothing")
            continue
        lost, emptied, had = effect(rows, {held}, best)
        print(f"  hold out {held}: pick {best} (tuning: emptied {effect(rows, tune, best)[1]}); held out: "
              f"seen lost {lost:.2f}, emptied {emptied} of {had} with a result")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
