"""The project's own retrieval eval (bench/retrieval: 256 chunks, 204 EN/ZH queries) gives the same recall on
SQLite and on PostgreSQL. The store is what is compared, so both index with the fake embeddings server
(bag-of-words vectors over loopback, with line vectors as a local model has them): the real model costs
half a minute here and compares nothing more; the real models' quality is bench/retrieval's job."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from hermit.config.schema import MemorySearchConfig
from hermit.memory.embedders.remote import create_remote_embedder
from hermit.memory.service import MemoryKey, MemoryService
from hermit.testing.fake_embeddings import FakeEmbeddingServer

BENCH = Path(__file__).resolve().parent.parent / "bench" / "retrieval"
sys.path.insert(0, str(BENCH))

from score import Gold, Hit, parse_gold, score_query  # noqa: E402


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
    ws = tmp_path / "ws"
    shutil.copytree(BENCH / "workspace", ws)
    queries = [json.loads(line) for line in (BENCH / "queries.jsonl").read_text().splitlines() if line.strip()]
    assert len(queries) >= 200
    with FakeEmbeddingServer(dims=256) as srv:
        embed = {"provider": "openai-compatible", "model": "fake-embed", "line_vectors": True,
                 "remote": {"base_url": srv.openai_base_url}}
        lite_cfg = MemorySearchConfig.model_validate(embed)
        pg_cfg = MemorySearchConfig.model_validate({**embed, "store": {"backend": "postgres",
                                                                      "postgres": {"dsn_env": "TEST_DSN"}}})
        emb = create_remote_embedder(lite_cfg, {})
        lite = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", lite_cfg, emb)
        pg = MemoryService(MemoryKey("main", ws), tmp_path / "unused.sqlite", pg_cfg, emb,
                           environ={"TEST_DSN": pg_dsn})
        try:
            lite.sync()
            pg.sync()
            assert pg.store.counts() == lite.store.counts()
            a, b = _eval(lite, queries), _eval(pg, queries)
        finally:
            lite.close()
            pg.close()
    # Not a tuned figure: a floor that shows the eval ran on vectors and found things (~0.69 here).
    assert a["R@6"] > 0.6, a
    for metric in a:
        assert b[metric] == pytest.approx(a[metric], abs=0.01), (metric, a, b)
