"""Score memory-search results against the retrieval benchmark's gold labels.

Usage:
    python bench/retrieval/score.py --queries bench/retrieval/queries.jsonl \\
        --results RESULTS.jsonl [--label NAME] [--json OUT]

RESULTS.jsonl holds one line per query: {"id": ..., "results": [{"path", "startLine", "endLine",
"score", ...}, ...]} — exactly what `hermit memory search --json --queries FILE` prints. Results
are taken in the order given (best first). A result hits a gold "path:line" when the paths are
equal and startLine <= line <= endLine. A query with no results line scores zero.

Metrics (overall and per query type):
- recall@k (k = 1, 3, 6, 10): any=true -> 1 if some gold is hit within the top k, else 0;
  any=false -> fraction of the golds hit within the top k.
- MRR: 1 / rank of the first result that hits any gold (0 if none).
- nDCG@10, binary relevance per gold, each gold counted once (at the rank of the first result
  covering it). any=true: the ideal is one relevant hit at rank 1, so nDCG = 1/log2(1 + rank of the
  first hit). any=false: DCG = sum over golds of 1/log2(1 + rank), ideal = golds at ranks 1..G;
  the ratio is capped at 1 (one chunk may cover several golds).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

KS = (1, 3, 6, 10)
METRICS = tuple(f"R@{k}" for k in KS) + ("MRR", "nDCG@10")


@dataclass(frozen=True)
class Gold:
    path: str
    line: int


@dataclass(frozen=True)
class Hit:
    path: str
    start: int
    end: int

    def covers(self, gold: Gold) -> bool:
        return self.path == gold.path and self.start <= gold.line <= self.end


def norm_path(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def parse_gold(label: str) -> Gold:
    path, sep, line = label.rpartition(":")
    if not sep or not line.isdigit():
        raise ValueError(f"bad gold label {label!r}; expected path:line")
    return Gold(norm_path(path), int(line))


def read_jsonl(path: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, start=1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{n}: invalid JSON: {exc}") from exc
            if not isinstance(row, dict):
                raise SystemExit(f"{path}:{n}: expected a JSON object")
            rows.append(row)
    return rows


def parse_hits(results: object) -> list[Hit]:
    hits: list[Hit] = []
    if not isinstance(results, list):
        return hits
    for r in results:
        if not isinstance(r, dict):
            continue
        try:
            hits.append(Hit(norm_path(str(r["path"])), int(r["startLine"]), int(r["endLine"])))
        except (KeyError, TypeError, ValueError):
            continue
    return hits


def first_ranks(golds: list[Gold], hits: list[Hit]) -> list[int | None]:
    """For each gold, the 1-based rank of the first result covering it (None if never)."""
    ranks: list[int | None] = []
    for gold in golds:
        rank = next((i for i, hit in enumerate(hits, start=1) if hit.covers(gold)), None)
        ranks.append(rank)
    return ranks


def score_query(golds: list[Gold], any_gold: bool, hits: list[Hit]) -> dict[str, float]:
    ranks = first_ranks(golds, hits)
    found = sorted(r for r in ranks if r is not None)
    first = found[0] if found else None
    out: dict[str, float] = {}
    for k in KS:
        if any_gold:
            out[f"R@{k}"] = 1.0 if first is not None and first <= k else 0.0
        else:
            out[f"R@{k}"] = sum(1 for r in found if r <= k) / len(golds)
    out["MRR"] = 1.0 / first if first is not None else 0.0
    if any_gold:
        out["nDCG@10"] = 1.0 / math.log2(1 + first) if first is not None and first <= 10 else 0.0
    else:
        dcg = sum(1.0 / math.log2(1 + r) for r in found if r <= 10)
        ideal = sum(1.0 / math.log2(1 + i) for i in range(1, min(len(golds), 10) + 1))
        out["nDCG@10"] = min(1.0, dcg / ideal)
    return out


def mean(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    if not rows:
        return dict.fromkeys(METRICS, 0.0)
    return {m: sum(r[m] for r in rows) / len(rows) for m in METRICS}


@dataclass
class Report:
    overall: dict[str, float]
    by_type: dict[str, dict[str, float]]
    counts: dict[str, int]
    per_query: list[dict[str, object]]
    missing_results: int
    unknown_result_ids: list[str]

    def as_json(self) -> dict[str, object]:
        return {
            "overall": {"n": len(self.per_query), **self.overall},
            "by_type": {t: {"n": self.counts[t], **v} for t, v in self.by_type.items()},
            "missing_results": self.missing_results,
            "unknown_result_ids": self.unknown_result_ids,
            "per_query": self.per_query,
        }


def evaluate(queries: list[dict[str, object]], results: list[dict[str, object]]) -> Report:
    by_id: dict[str, list[Hit]] = {}
    for row in results:
        qid = str(row.get("id", ""))
        if qid in by_id:
            raise SystemExit(f"results: duplicate id {qid}")
        by_id[qid] = parse_hits(row.get("results"))
    scored: list[tuple[str, dict[str, float]]] = []
    per_query: list[dict[str, object]] = []
    missing = 0
    for q in queries:
        qid = str(q["id"])
        gold_raw = q.get("gold")
        if not isinstance(gold_raw, list) or not gold_raw:
            raise SystemExit(f"queries: {qid} has no gold labels")
        golds = [parse_gold(str(g)) for g in gold_raw]
        if qid not in by_id:
            missing += 1
        hits = by_id.get(qid, [])
        qtype = str(q.get("type", "?"))
        scores = score_query(golds, bool(q.get("any", True)), hits)
        scored.append((qtype, scores))
        per_query.append({"id": qid, "type": qtype, "query": q.get("query"), "n_results": len(hits), **scores})
    types: list[str] = []
    for qtype, _ in scored:
        if qtype not in types:
            types.append(qtype)
    return Report(
        overall=mean(s for _, s in scored),
        by_type={t: mean(s for qt, s in scored if qt == t) for t in types},
        counts={t: sum(1 for qt, _ in scored if qt == t) for t in types},
        per_query=per_query,
        missing_results=missing,
        unknown_result_ids=sorted(set(by_id) - {str(q["id"]) for q in queries}),
    )


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table (first column left-aligned, the rest right-aligned) as lines."""
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
            *("| " + " | ".join(cells) + " |" for cells in rows)]


def markdown(report: Report, label: str) -> str:
    lines = [f"### {label}", "", "| type | n | " + " | ".join(METRICS) + " |",
             "|---|---:|" + "---:|" * len(METRICS)]
    rows = [(t, report.counts[t], v) for t, v in report.by_type.items()]
    rows.append(("**overall**", len(report.per_query), report.overall))
    for name, n, vals in rows:
        cells = " | ".join(f"{vals[m]:.3f}" for m in METRICS)
        lines.append(f"| {name} | {n} | {cells} |")
    if report.missing_results:
        lines += ["", f"{report.missing_results} queries had no results line (scored 0)."]
    if report.unknown_result_ids:
        lines += ["", f"Ignored result ids not in the queries file: {', '.join(report.unknown_result_ids)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Score memory_search results against gold labels.")
    parser.add_argument("--queries", type=Path, required=True, help="queries.jsonl with gold labels")
    parser.add_argument("--results", type=Path, required=True, help="results JSONL, one line per query")
    parser.add_argument("--label", default=None, help="name of this run (default: results file name)")
    parser.add_argument("--json", type=Path, default=None, help="also write the full report as JSON here")
    args = parser.parse_args(argv)
    label = args.label or args.results.name
    report = evaluate(read_jsonl(args.queries), read_jsonl(args.results))
    print(markdown(report, label))
    if args.json is not None:
        payload = {"label": label, "queries": str(args.queries), "results": str(args.results), **report.as_json()}
        args.json.write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
