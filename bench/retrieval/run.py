"""Run the retrieval benchmark: index the workspace per model/chunking, search every query per variant, score.

    python bench/retrieval/run.py            # all variants (indexes are cached under bench/out/)
    python bench/retrieval/run.py --only default baseline-original
    python bench/retrieval/run.py --conversations DATA_DIR   # also the conversational suite (conversations.py)

Writes bench/retrieval/results.md and results.json. Variants differ only in configuration; each one
runs through the real MemoryService / HybridSearcher over a real SQLite index with the real models.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import absent  # noqa: E402
import conversations  # noqa: E402
import numpy as np  # noqa: E402
from baseline import original_search  # noqa: E402
from score import Report, evaluate, md_table, read_jsonl  # noqa: E402

from hermit.config.memory_search import MemorySearchConfig, QueryConfig  # noqa: E402
from hermit.memory.embedders import create_embedder  # noqa: E402
from hermit.memory.embedders.base import Embedder, EmbedderInfo, QueryRunner  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402
from hermit.memory.search.lexicon import load_lexicon  # noqa: E402
from hermit.memory.search.tuning import DEFAULT_TUNING, SearchTuning  # noqa: E402
from hermit.memory.service import MemoryKey, MemoryService  # noqa: E402

WORKSPACE = HERE / "workspace"
QUERIES = HERE / "queries.jsonl"
OUT = HERE.parent / "out" / "retrieval"
# The benchmark's "today": the day after the last daily log (for temporal decay).
NOW = 1_793_577_600.0  # 2026-11-01T00:00:00Z


@dataclass(frozen=True)
class Variant:
    name: str
    note: str
    model: str = "multilingual-e5-small"
    chunk: tuple[int, int] = (400, 80)
    query: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False
    line_vectors: bool = True  # memory_search.line_vectors (off: its own index)
    # The search's measured settings for this variant (memory.search.tuning).
    tuning: SearchTuning = DEFAULT_TUNING


def variants() -> list[Variant]:
    no_tr = {"translation_weight": 0.0, "translate_vectors": False}
    return [
        Variant("baseline-original", "the original design: AND-joined ASCII keywords, BM25 flattened to 1.0, "
                "raw cosine, 0.7/0.3, minScore 0.35", baseline=True),
        Variant("default", "Hermit defaults (0.5/0.5 weighted, max-normalised BM25, exact-match rescue, "
                "EN↔ZH translation, date boost, line vectors)"),
        Variant("no-fill", "results under minScore never fill the unused results (round 6; default: they fill "
                "them once something passed)", query={"fill_results": False}),
        Variant("no-line-vectors", "memory_search.line_vectors off: places stay in their fused order",
                line_vectors=False),
        Variant("text-max", "BM25 max-normalised per query (round 5: the best keyword hit always scores 1)",
                query={"hybrid": {"text_normalization": "max"}}),
        Variant("query-scale-0.3", "BM25 over the larger of the best hit and 0.3 of the query's own BM25 "
                "(default 0.2)", tuning=replace(DEFAULT_TUNING, query_scale_share=0.3)),
        Variant("time-bonus-0", "a question asking for a time orders places as any other (round 16; default: a "
                "line carrying a time counts 0.3 more as a chunk's best line, round 17)",
                tuning=replace(DEFAULT_TUNING, time_line_bonus=0.0)),
        Variant("time-bonus-0.4", "the same at 0.4", tuning=replace(DEFAULT_TUNING, time_line_bonus=0.4)),
        Variant("weights-0.7-0.3", "the original 0.7/0.3 weights, everything else default",
                query={"hybrid": {"vector_weight": 0.7, "text_weight": 0.3}}),
        Variant("weights-0.3-0.7", "0.3/0.7 weights", query={"hybrid": {"vector_weight": 0.3, "text_weight": 0.7}}),
        Variant("no-translation", "without EN↔ZH dictionary translation (keyword and vector)", query=no_tr),
        Variant("no-translate-vectors", "translation for keywords only, no translated query vector",
                query={"translate_vectors": False}),
        Variant("no-date-boost", "without the date boost", query={"date_boost": 0.0}),
        Variant("no-rescue", "without the exact-match rescue", query={"hybrid": {"exact_match_rescue": False}}),
        Variant("bm25-saturation", "BM25 as rel/(rel+2) instead of max-normalised",
                query={"hybrid": {"text_normalization": "saturation"}}),
        Variant("rrf", "reciprocal rank fusion (k=60), rescaled to [0,1]", query={"hybrid": {"fusion": "rrf"}}),
        Variant("pool-x10", "candidate multiplier 10 instead of 4", query={"hybrid": {"candidate_multiplier": 10}}),
        Variant("vector-only", "vector leg only",
                query={"hybrid": {"text_weight": 0.0, "vector_weight": 1.0, "exact_match_rescue": False}}),
        Variant("keyword-only", "keyword leg only (what provider none gives)", query={"hybrid": {"vector_weight": 0.0}}),
        Variant("decay-30d", "temporal decay, half-life 30 days", query={"temporal_decay": {"enabled": True}}),
        Variant("decay-180d", "temporal decay, half-life 180 days",
                query={"temporal_decay": {"enabled": True, "half_life_days": 180}}),
        Variant("mmr", "MMR diversity, lambda 0.7", query={"mmr": {"enabled": True}}),
        Variant("chunks-200", "chunks of 200/40 tokens", chunk=(200, 40)),
        Variant("chunks-800", "chunks of 800/160 tokens", chunk=(800, 160)),
        Variant("minilm", "all-MiniLM-L6-v2 (English-only local model), defaults", model="all-MiniLM-L6-v2"),
        Variant("minilm-no-translation", "all-MiniLM-L6-v2 without translation", model="all-MiniLM-L6-v2",
                query=no_tr),
    ]


class MemoEmbedder:
    """Caches query vectors so variants over one model embed each query once."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.memo: dict[str, np.ndarray] = {}

    @property
    def info(self) -> EmbedderInfo:
        return self.inner.info

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.memo:
            self.memo[text] = self.inner.embed_query(text)
        return self.memo[text]


_services: dict[tuple[str, int, int], MemoryService] = {}
_embedders: dict[str, MemoEmbedder] = {}


def service_for(v: Variant) -> MemoryService:
    key = (v.model, *v.chunk, v.line_vectors)
    if key not in _services:
        cfg = MemorySearchConfig.model_validate(
            {"model": v.model, "chunking": {"tokens": v.chunk[0], "overlap": v.chunk[1]}, "line_vectors": v.line_vectors})
        if v.model not in _embedders:
            emb = create_embedder(cfg, {}, stamp_dir=OUT / "stamp")
            assert emb is not None
            # Questions embedded as a long-lived process embeds them (the query runner that
            # E5Embedder.warm_queries loads), whatever embedded the documents.
            thread = emb.warm_queries() if isinstance(emb, QueryRunner) else None
            if thread is not None:
                thread.join()
            _embedders[v.model] = MemoEmbedder(emb)
        OUT.mkdir(parents=True, exist_ok=True)
        db = OUT / f"{v.model}-{v.chunk[0]}-{v.chunk[1]}{'' if v.line_vectors else '-nolines'}.sqlite"
        svc = MemoryService(MemoryKey("bench", WORKSPACE), db, cfg, _embedders[v.model])
        t0 = time.perf_counter()
        report = svc.sync()
        print(f"  index {db.name}: {report.summary()} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
        _services[key] = svc
    return _services[key]


def run_variant(v: Variant, queries: list[dict[str, Any]]) -> tuple[Report, list[float], dict[str, float]]:
    svc = service_for(v)
    emb = _embedders[v.model]
    results: list[dict[str, Any]] = []
    latencies: list[float] = []
    qcfg = QueryConfig.model_validate(v.query)
    lexicon = load_lexicon(OUT / "cache") if qcfg.translation_weight > 0 else None
    searcher = HybridSearcher(svc.store, emb, qcfg, use_matrix=True, clock=lambda: NOW, lexicon=lexicon,
                              tuning=v.tuning)
    for q in queries:
        t0 = time.perf_counter()
        if v.baseline:
            hits = original_search(svc.store, emb, str(q["query"]), 10, 0.35)
        else:
            # min_score left to the config, as the agent's tool and the CLI leave it by default.
            out = searcher.search(str(q["query"]), 10)
            hits = [{"path": h.path, "startLine": h.start_line, "endLine": h.end_line, "score": h.score}
                    for h in out.hits]
        latencies.append((time.perf_counter() - t0) * 1000)
        results.append({"id": q["id"], "results": hits})
    # Questions whose answer is in no note of this world (bench/retrieval/absent.py), at default settings.
    found = []
    for a in absent.questions(WORKSPACE, "generated"):
        if v.baseline:
            found.append(len(original_search(svc.store, emb, a.query, 6, 0.35)))
        else:
            found.append(len(searcher.search(a.query, 6).hits))
    gone = {"n": len(found), "any": round(statistics.fmean(n > 0 for n in found), 4) if found else 0.0,
            "results": round(statistics.fmean(found), 3) if found else 0.0}
    return evaluate(queries, results), latencies, gone


def run_changed(v: Variant, queries: list[dict[str, Any]],
                change: Callable[[HybridSearcher], object]) -> tuple[Report, list[float], dict[str, float]]:
    """run_variant with each searcher passed through change first: how the probes try a ranking change on this
    suite without touching the search's own code."""
    global HybridSearcher
    plain = HybridSearcher

    def changed(*a: Any, **k: Any) -> HybridSearcher:
        s = plain(*a, **k)
        change(s)
        return s

    HybridSearcher = changed  # type: ignore[misc,assignment]
    try:
        return run_variant(v, queries)
    finally:
        HybridSearcher = plain  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", help="variant names to run")
    ap.add_argument("--out", default=str(HERE), help="where results.md / results.json go")
    ap.add_argument("--conversations", metavar="DATA_DIR", default=None,
                    help="also run the conversational suite over this LoCoMo folder (see conversations.py)")
    args = ap.parse_args(argv)
    queries = read_jsonl(QUERIES)
    chosen = [v for v in variants() if not args.only or v.name in args.only]
    rows: list[dict[str, Any]] = []
    for v in chosen:
        print(f"variant {v.name}", file=sys.stderr)
        # Warm the query cache so latency excludes the first-call model load.
        report, lat, gone = run_variant(v, queries)
        o = report.overall
        row = {"variant": v.name, "note": v.note, **{k: round(val, 4) for k, val in o.items()}, "absent": gone,
               "by_type_r6": {t: round(m["R@6"], 4) for t, m in report.by_type.items()},
               "by_type": {t: {k: round(x, 4) for k, x in m.items()} for t, m in report.by_type.items()},
               "latency_ms_p50": round(statistics.median(lat), 2)}
        rows.append(row)
        print(f"  R@6 {o['R@6']:.3f}  MRR {o['MRR']:.3f}  " + "  ".join(
            f"{t} {m['R@6']:.2f}" for t, m in report.by_type.items()), file=sys.stderr)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    (out / "results.md").write_text(markdown(rows, len(queries)))
    print(markdown(rows, len(queries)))
    if args.conversations:
        return conversations.main([args.conversations, "--out", args.out])
    return 0


def markdown(rows: list[dict[str, Any]], n: int) -> str:
    types = list(rows[0]["by_type_r6"]) if rows else []
    head = ["variant", "R@1", "R@3", "R@6", "R@10", "MRR", "nDCG@10", *[f"R@6 {t}" for t in types], "absent any",
            "p50 ms"]
    lines = [f"Retrieval benchmark: {n} queries over bench/retrieval/workspace "
             "(`python bench/retrieval/run.py`), top 10 results at each variant's minScore (0.35). "
             "R@k = recall@k; per-type columns are R@6. p50 ms = in-process search latency "
             "(query vectors cached after a model's first variant, so later rows exclude embedding). absent any = "
             "share of the questions whose answer is in no note (bench/retrieval/absent.py, asked at 6 results) "
             "that still got a result.", ""]
    cells_of = []
    for r in rows:
        cells = [r["variant"], *(f"{r[k]:.3f}" for k in ("R@1", "R@3", "R@6", "R@10", "MRR",
                                                          "nDCG@10")),
                 *(f"{r['by_type_r6'][t]:.2f}" for t in types), f"{r['absent']['any']:.2f}",
                 f"{r['latency_ms_p50']:.1f}"]
        cells_of.append(cells)
    lines += md_table(head, cells_of)
    lines += ["", "Variants:", ""] + [f"- `{r['variant']}`: {r['note']}" for r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
